//! [`ZkBackend`]: the operations the migration needs from a ZooKeeper ensemble, implemented by
//! the real client ([`crate::client`]) and by [`MemZk`] (a [`ZkTree`] shared behind a lock,
//! with injectable outages) for deterministic tests; [`read_tree`] reads subtrees through any
//! backend into a [`ZkTree`].

use std::future::Future;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;

use crate::ops::{MultiError, Stat, ZkError, ZkErrorCode, ZkOp, ZkOpResult};
use crate::tree::{ZkTree, join};

/// A ZooKeeper ensemble as the migration uses it.
pub trait ZkBackend: Send + Sync {
    /// The node's data and stat.
    fn get_data(&self, path: &str)
    -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send;

    /// The node's stat, `None` when it does not exist.
    fn exists(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send;

    /// The names of the node's children (any order).
    fn get_children(&self, path: &str)
    -> impl Future<Output = Result<Vec<String>, ZkError>> + Send;

    /// One operation.
    fn apply(&self, op: &ZkOp) -> impl Future<Output = Result<ZkOpResult, ZkError>> + Send;

    /// Operations applied all together or not at all.
    fn multi(
        &self,
        ops: &[ZkOp],
    ) -> impl Future<Output = Result<Vec<ZkOpResult>, MultiError>> + Send;
}

/// Reads issued at once by [`read_tree`] on one session. ZooKeeper answers a session's
/// requests in order, so keeping many in flight hides the round trip instead of paying it once
/// per znode (tens of thousands of them in a large cluster).
pub const READ_TREE_CONCURRENCY: usize = 64;

/// Reads the subtrees under `roots` (each root included; a missing root is skipped) into a
/// tree, data and stats as read. Not atomic: ZooKeeper has no snapshot read, so a concurrent
/// writer may be seen half-way (Kafka's reader has the same property; the migration fences
/// writers before it reads). Up to [`READ_TREE_CONCURRENCY`] reads are in flight at a time;
/// a node's children are listed only after the node itself was read.
///
/// # Errors
/// The first error other than a node vanishing between listing and reading it.
pub async fn read_tree<B: ZkBackend>(backend: &B, roots: &[&str]) -> Result<ZkTree, ZkError> {
    read_tree_with(backend, roots, |_, _| None).await
}

/// [`read_tree`] where `shortcut(path, data)` may name, for a node just read, the descendants
/// to read instead of listing its children level by level (a reader that knows where its
/// data is, as Kafka's migration reads a topic's partition states from its assignment). The
/// nodes in between are then in the tree without data or stat of their own, and descendants
/// the shortcut does not name are not read.
///
/// # Errors
/// As [`read_tree`].
pub async fn read_tree_with<B, F>(
    backend: &B,
    roots: &[&str],
    shortcut: F,
) -> Result<ZkTree, ZkError>
where
    B: ZkBackend,
    F: Fn(&str, &[u8]) -> Option<Vec<String>>,
{
    let mut tree = ZkTree::new();
    let mut queue: Vec<String> = roots.iter().rev().map(|r| (*r).to_owned()).collect();
    let mut in_flight = FuturesUnordered::new();
    loop {
        while in_flight.len() < READ_TREE_CONCURRENCY
            && let Some(path) = queue.pop()
        {
            in_flight.push(read_node(backend, path, &shortcut));
        }
        let Some(read) = in_flight.next().await else {
            break;
        };
        let Some(node) = read? else {
            continue;
        };
        tree.insert_read(&node.path, node.data, node.stat);
        queue.extend(node.next);
    }
    Ok(tree)
}

/// One node as [`read_tree`] saw it, and the paths to read next.
struct ReadNode {
    path: String,
    data: Vec<u8>,
    stat: Stat,
    next: Vec<String>,
}

/// Reads `path` and lists its children if it has any (or asks `shortcut` which descendants
/// to read); `None` if it vanished.
async fn read_node<B, F>(
    backend: &B,
    path: String,
    shortcut: &F,
) -> Result<Option<ReadNode>, ZkError>
where
    B: ZkBackend,
    F: Fn(&str, &[u8]) -> Option<Vec<String>>,
{
    let (data, stat) = match backend.get_data(&path).await {
        Ok(found) => found,
        Err(e) if e.code == ZkErrorCode::NoNode => return Ok(None),
        Err(e) => return Err(e),
    };
    let next = if stat.num_children == 0 {
        Vec::new()
    } else if let Some(descendants) = shortcut(&path, &data) {
        descendants
    } else {
        match backend.get_children(&path).await {
            Ok(children) => children.iter().map(|c| join(&path, c)).collect(),
            Err(e) if e.code == ZkErrorCode::NoNode => Vec::new(),
            Err(e) => return Err(e),
        }
    };
    Ok(Some(ReadNode {
        path,
        data,
        stat,
        next,
    }))
}

/// An in-memory ensemble for tests: a [`ZkTree`] behind a lock, one session, and a switch that
/// makes every call fail with `CONNECTIONLOSS` (ZooKeeper down) until turned back.
#[derive(Debug, Clone)]
pub struct MemZk {
    inner: Arc<Mutex<MemState>>,
    session: i64,
}

#[derive(Debug)]
struct MemState {
    tree: ZkTree,
    down: bool,
    now_ms: i64,
}

impl Default for MemZk {
    fn default() -> Self {
        Self::new(ZkTree::new())
    }
}

impl MemZk {
    /// An ensemble holding `tree`, with session id 1.
    #[must_use]
    pub fn new(tree: ZkTree) -> Self {
        Self {
            inner: Arc::new(Mutex::new(MemState {
                tree,
                down: false,
                now_ms: 0,
            })),
            session: 1,
        }
    }

    /// Another client of the same ensemble with its own session (for ephemeral nodes).
    #[must_use]
    pub fn with_session(&self, session: i64) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            session,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A copy of the current tree.
    #[must_use]
    pub fn snapshot(&self) -> ZkTree {
        self.lock().tree.clone()
    }

    /// Runs `f` on the tree directly (test set-up and inspection).
    pub fn with_tree<R>(&self, f: impl FnOnce(&mut ZkTree) -> R) -> R {
        f(&mut self.lock().tree)
    }

    /// ZooKeeper down (`true`: every call fails with `CONNECTIONLOSS`) or back up.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// The clock used for `ctime`/`mtime` of later writes.
    pub fn set_now_ms(&self, now_ms: i64) {
        self.lock().now_ms = now_ms;
    }

    /// Ends this client's session: its ephemeral nodes go.
    pub fn expire_session(&self) {
        let session = self.session;
        self.lock().tree.close_session(session);
    }

    fn up(&self, path: &str) -> Result<std::sync::MutexGuard<'_, MemState>, ZkError> {
        let state = self.lock();
        if state.down {
            return Err(ZkError::new(ZkErrorCode::ConnectionLoss, path));
        }
        Ok(state)
    }
}

impl ZkBackend for MemZk {
    fn get_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send {
        let result = self.up(path).and_then(|state| {
            state
                .tree
                .get(path)
                .map(|(data, stat)| (data.to_vec(), stat))
        });
        std::future::ready(result)
    }

    fn exists(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send {
        std::future::ready(self.up(path).map(|state| state.tree.exists(path)))
    }

    fn get_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        std::future::ready(self.up(path).and_then(|state| state.tree.children(path)))
    }

    fn apply(&self, op: &ZkOp) -> impl Future<Output = Result<ZkOpResult, ZkError>> + Send {
        let session = self.session;
        let result = self.up(op.path()).and_then(|mut state| {
            let now = state.now_ms;
            state.tree.apply(op, session, now)
        });
        std::future::ready(result)
    }

    fn multi(
        &self,
        ops: &[ZkOp],
    ) -> impl Future<Output = Result<Vec<ZkOpResult>, MultiError>> + Send {
        let session = self.session;
        let first = ops.first().map_or("", ZkOp::path);
        let result = match self.up(first) {
            Err(error) => Err(MultiError { index: 0, error }),
            Ok(mut state) => {
                let now = state.now_ms;
                state.tree.multi(ops, session, now)
            }
        };
        std::future::ready(result)
    }
}
