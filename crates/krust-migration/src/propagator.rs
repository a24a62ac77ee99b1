//! See the crate doc.
