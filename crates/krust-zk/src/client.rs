//! The async ZooKeeper client (owned by the client work; see the crate doc).
