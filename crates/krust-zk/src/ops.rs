//! ZooKeeper operations, results and error codes as plain data.
//!
//! A path is an absolute ZooKeeper path (`/brokers/topics/foo`). Versions follow ZooKeeper:
//! `-1` ([`ANY_VERSION`]) matches any version; a node's version starts at 0 and grows by one
//! with every `setData`.

use std::fmt;

/// Matches any version in `setData`, `delete` and `check`.
pub const ANY_VERSION: i32 = -1;

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateMode {
    /// Lives until deleted.
    Persistent,
    /// Deleted when the creating session ends.
    Ephemeral,
    /// Persistent, with a 10-digit sequence number appended to the name by the parent.
    PersistentSequential,
    /// Ephemeral and sequential.
    EphemeralSequential,
}

impl CreateMode {
    /// Whether the server appends a sequence number.
    #[must_use]
    pub fn is_sequential(self) -> bool {
        matches!(self, Self::PersistentSequential | Self::EphemeralSequential)
    }

    /// Whether the node goes with its session.
    #[must_use]
    pub fn is_ephemeral(self) -> bool {
        matches!(self, Self::Ephemeral | Self::EphemeralSequential)
    }
}

/// One operation, alone or inside a multi-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkOp {
    /// Create `path` (its parent must exist) holding `data`.
    Create {
        /// The path (for a sequential node, the prefix of the name).
        path: String,
        /// The node's data.
        data: Vec<u8>,
        /// Persistent, ephemeral, sequential.
        mode: CreateMode,
    },
    /// Replace the data of `path` if its version is `version` (or [`ANY_VERSION`]).
    SetData {
        /// The path.
        path: String,
        /// The new data.
        data: Vec<u8>,
        /// The expected version.
        version: i32,
    },
    /// Delete `path` (it must have no children) if its version is `version`.
    Delete {
        /// The path.
        path: String,
        /// The expected version.
        version: i32,
    },
    /// Fail the multi-op unless `path` exists at `version`.
    Check {
        /// The path.
        path: String,
        /// The expected version.
        version: i32,
    },
}

impl ZkOp {
    /// The path the operation names.
    #[must_use]
    pub fn path(&self) -> &str {
        match self {
            Self::Create { path, .. }
            | Self::SetData { path, .. }
            | Self::Delete { path, .. }
            | Self::Check { path, .. } => path,
        }
    }

    /// A persistent create.
    #[must_use]
    pub fn create(path: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Self::Create {
            path: path.into(),
            data: data.into(),
            mode: CreateMode::Persistent,
        }
    }

    /// A `setData` at `version`.
    #[must_use]
    pub fn set_data(path: impl Into<String>, data: impl Into<Vec<u8>>, version: i32) -> Self {
        Self::SetData {
            path: path.into(),
            data: data.into(),
            version,
        }
    }

    /// A delete at `version`.
    #[must_use]
    pub fn delete(path: impl Into<String>, version: i32) -> Self {
        Self::Delete {
            path: path.into(),
            version,
        }
    }

    /// A version check.
    #[must_use]
    pub fn check(path: impl Into<String>, version: i32) -> Self {
        Self::Check {
            path: path.into(),
            version,
        }
    }
}

/// What a node's metadata says (ZooKeeper's `Stat`, the fields Kafka reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    /// The zxid that created the node.
    pub czxid: i64,
    /// The zxid that last modified the node's data.
    pub mzxid: i64,
    /// Creation time (ms since the epoch).
    pub ctime: i64,
    /// Last data modification time (ms since the epoch).
    pub mtime: i64,
    /// Data version (number of `setData`s).
    pub version: i32,
    /// Children version (number of child changes).
    pub cversion: i32,
    /// The owning session of an ephemeral node, 0 otherwise.
    pub ephemeral_owner: i64,
    /// Length of the data.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
}

/// The result of one successful operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkOpResult {
    /// The node was created at `path` (with the sequence suffix for a sequential node).
    Created {
        /// The created path.
        path: String,
    },
    /// The data was set; the node's new stat.
    SetData {
        /// The node after the write.
        stat: Stat,
    },
    /// The node was deleted.
    Deleted,
    /// The check passed.
    Checked,
}

/// ZooKeeper's error codes (`KeeperException.Code`) that Kafka's migration distinguishes, and
/// the rest by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZkErrorCode {
    /// The node does not exist (-101).
    NoNode,
    /// The node already exists (-110).
    NodeExists,
    /// The expected version did not match (-103).
    BadVersion,
    /// The node has children (-111).
    NotEmpty,
    /// An ephemeral node cannot have children (-108).
    NoChildrenForEphemerals,
    /// The connection was lost; the operation may or may not have happened (-4).
    ConnectionLoss,
    /// The session expired; its ephemeral nodes are gone (-112).
    SessionExpired,
    /// Authentication failed (-115).
    AuthFailed,
    /// Not authorized (-102).
    NoAuth,
    /// The operation timed out (-7).
    OperationTimeout,
    /// A multi-op was not run because an earlier operation in it failed (-2).
    RuntimeInconsistency,
    /// The client is closed or was never connected.
    Closed,
    /// Any other code.
    Other(i32),
}

impl ZkErrorCode {
    /// ZooKeeper's numeric code.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            Self::NoNode => -101,
            Self::NodeExists => -110,
            Self::BadVersion => -103,
            Self::NotEmpty => -111,
            Self::NoChildrenForEphemerals => -108,
            Self::ConnectionLoss => -4,
            Self::SessionExpired => -112,
            Self::AuthFailed => -115,
            Self::NoAuth => -102,
            Self::OperationTimeout => -7,
            Self::RuntimeInconsistency => -2,
            Self::Closed => -122,
            Self::Other(code) => code,
        }
    }

    /// The code for ZooKeeper's number.
    #[must_use]
    pub fn from_code(code: i32) -> Self {
        match code {
            -101 => Self::NoNode,
            -110 => Self::NodeExists,
            -103 => Self::BadVersion,
            -111 => Self::NotEmpty,
            -108 => Self::NoChildrenForEphemerals,
            -4 => Self::ConnectionLoss,
            -112 => Self::SessionExpired,
            -115 => Self::AuthFailed,
            -102 => Self::NoAuth,
            -7 => Self::OperationTimeout,
            -2 => Self::RuntimeInconsistency,
            -122 => Self::Closed,
            other => Self::Other(other),
        }
    }

    /// Whether retrying the same request later can succeed (a connection problem, not an
    /// answer about the data).
    #[must_use]
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            Self::ConnectionLoss | Self::SessionExpired | Self::OperationTimeout | Self::Closed
        )
    }

    /// ZooKeeper's name for the code (`KeeperException.Code`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::NoNode => "NONODE",
            Self::NodeExists => "NODEEXISTS",
            Self::BadVersion => "BADVERSION",
            Self::NotEmpty => "NOTEMPTY",
            Self::NoChildrenForEphemerals => "NOCHILDRENFOREPHEMERALS",
            Self::ConnectionLoss => "CONNECTIONLOSS",
            Self::SessionExpired => "SESSIONEXPIRED",
            Self::AuthFailed => "AUTHFAILED",
            Self::NoAuth => "NOAUTH",
            Self::OperationTimeout => "OPERATIONTIMEOUT",
            Self::RuntimeInconsistency => "RUNTIMEINCONSISTENCY",
            Self::Closed => "CONNECTIONCLOSED",
            Self::Other(_) => "UNKNOWN",
        }
    }
}

impl fmt::Display for ZkErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// A failed operation: the code and the path it concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ZooKeeper {code} for {path}")]
pub struct ZkError {
    /// What went wrong.
    pub code: ZkErrorCode,
    /// The path of the failed operation ("" when none applies).
    pub path: String,
}

impl ZkError {
    /// An error for `path`.
    #[must_use]
    pub fn new(code: ZkErrorCode, path: impl Into<String>) -> Self {
        Self {
            code,
            path: path.into(),
        }
    }
}

/// A failed multi-op: nothing was applied; `index` is the first operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ZooKeeper multi-op failed at operation {index}: {error}")]
pub struct MultiError {
    /// Position of the failing operation in the multi-op.
    pub index: usize,
    /// Its error.
    pub error: ZkError,
}
