//! [`ZkBackend`]: the operations the migration needs from a ZooKeeper ensemble, implemented by
//! the real client ([`crate::client`]) and by [`MemZk`] (a [`ZkTree`] shared behind a lock,
//! with injectable outages) for deterministic tests; [`read_tree`] reads subtrees through any
//! backend into a [`ZkTree`].

use std::future::Future;
use std::sync::{Arc, Mutex};

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

/// Reads the subtrees under `roots` (each root included; a missing root is skipped) into a
/// tree, data and stats as read. Not atomic: ZooKeeper has no snapshot read, so a concurrent
/// writer may be seen half-way (Kafka's reader has the same property; the migration fences
/// writers before it reads).
///
/// # Errors
/// The first error other than a node vanishing between listing and reading it.
pub async fn read_tree<B: ZkBackend>(backend: &B, roots: &[&str]) -> Result<ZkTree, ZkError> {
    let mut tree = ZkTree::new();
    for root in roots {
        let mut stack = vec![(*root).to_owned()];
        while let Some(path) = stack.pop() {
            let (data, stat) = match backend.get_data(&path).await {
                Ok(found) => found,
                Err(e) if e.code == ZkErrorCode::NoNode => continue,
                Err(e) => return Err(e),
            };
            tree.insert_read(&path, data, stat);
            if stat.num_children == 0 {
                continue;
            }
            let children = match backend.get_children(&path).await {
                Ok(children) => children,
                Err(e) if e.code == ZkErrorCode::NoNode => continue,
                Err(e) => return Err(e),
            };
            for child in children {
                stack.push(join(&path, &child));
            }
        }
    }
    Ok(tree)
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
