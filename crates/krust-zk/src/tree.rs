//! [`ZkTree`]: an in-memory ZooKeeper data tree with ZooKeeper's semantics.
//!
//! Two uses: the fake ensemble of deterministic tests (every operation checked as a server
//! checks it: parent exists, no children under an ephemeral, versions, sequence numbers,
//! multi-ops all-or-nothing), and a snapshot of a real ensemble's subtrees (built with
//! [`ZkTree::insert_read`] from what the client read, stats included) that pure code walks.

use std::collections::{BTreeMap, BTreeSet};

use crate::ops::{ANY_VERSION, MultiError, Stat, ZkError, ZkErrorCode, ZkOp, ZkOpResult};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    data: Vec<u8>,
    stat: Stat,
    children: BTreeSet<String>,
    /// The next sequence number handed to a sequential child (the parent's `cversion` in
    /// ZooKeeper).
    next_sequence: i32,
}

/// An in-memory ZooKeeper tree. The root `/` always exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkTree {
    nodes: BTreeMap<String, Node>,
    zxid: i64,
}

impl Default for ZkTree {
    fn default() -> Self {
        Self::new()
    }
}

/// The parent of an absolute path (`/a/b` → `/a`, `/a` → `/`), `None` for the root.
#[must_use]
pub fn parent_of(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The last component of a path.
#[must_use]
pub fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `parent` + `/` + `child`.
#[must_use]
pub fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// Whether `path` is a path ZooKeeper accepts: absolute, no empty component, no trailing
/// slash (except the root), no `.`/`..` components.
#[must_use]
pub fn is_valid_path(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    if !path.starts_with('/') || path.ends_with('/') {
        return false;
    }
    path[1..]
        .split('/')
        .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
}

/// One undoable step of a multi-op.
enum Undo {
    Remove(String),
    Restore(String, Node),
}

impl ZkTree {
    /// A tree holding only `/`.
    #[must_use]
    pub fn new() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_owned(),
            Node {
                data: Vec::new(),
                stat: Stat::default(),
                children: BTreeSet::new(),
                next_sequence: 0,
            },
        );
        Self { nodes, zxid: 0 }
    }

    /// The node's data and stat.
    ///
    /// # Errors
    /// `NONODE`.
    pub fn get(&self, path: &str) -> Result<(&[u8], Stat), ZkError> {
        self.nodes
            .get(path)
            .map(|n| (n.data.as_slice(), n.stat))
            .ok_or_else(|| ZkError::new(ZkErrorCode::NoNode, path))
    }

    /// The node's stat, if it exists.
    #[must_use]
    pub fn exists(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(|n| n.stat)
    }

    /// The names of the node's children, sorted.
    ///
    /// # Errors
    /// `NONODE`.
    pub fn children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        self.nodes
            .get(path)
            .map(|n| n.children.iter().cloned().collect())
            .ok_or_else(|| ZkError::new(ZkErrorCode::NoNode, path))
    }

    /// Every path in the tree, sorted (the root first).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    /// Number of nodes, the root included.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether only the root exists.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    /// Records a node read from a real ensemble (data and stat as read). Missing ancestors are
    /// added as empty placeholders so the tree stays connected; a later `insert_read` of an
    /// ancestor replaces its placeholder data and stat (children are kept).
    pub fn insert_read(&mut self, path: &str, data: Vec<u8>, stat: Stat) {
        if !is_valid_path(path) {
            return;
        }
        self.ensure_ancestors(path);
        match self.nodes.get_mut(path) {
            Some(node) => {
                node.data = data;
                node.stat = stat;
            }
            None => {
                self.nodes.insert(
                    path.to_owned(),
                    Node {
                        data,
                        stat,
                        children: BTreeSet::new(),
                        next_sequence: 0,
                    },
                );
            }
        }
        if let Some(parent) = parent_of(path)
            && let Some(p) = self.nodes.get_mut(parent)
        {
            p.children.insert(name_of(path).to_owned());
        }
    }

    fn ensure_ancestors(&mut self, path: &str) {
        let mut missing = Vec::new();
        let mut current = parent_of(path);
        while let Some(p) = current {
            if self.nodes.contains_key(p) {
                break;
            }
            missing.push(p.to_owned());
            current = parent_of(p);
        }
        for p in missing.into_iter().rev() {
            self.insert_read(&p, Vec::new(), Stat::default());
        }
    }

    /// Runs one operation as the server would, for `session` (the owner of ephemeral nodes)
    /// at `now_ms`.
    ///
    /// # Errors
    /// ZooKeeper's error for the operation; the tree is unchanged.
    pub fn apply(&mut self, op: &ZkOp, session: i64, now_ms: i64) -> Result<ZkOpResult, ZkError> {
        let mut undo = Vec::new();
        self.apply_logged(op, session, now_ms, &mut undo)
    }

    /// Runs a multi-op: all operations or none.
    ///
    /// # Errors
    /// The first failing operation; the tree is unchanged.
    pub fn multi(
        &mut self,
        ops: &[ZkOp],
        session: i64,
        now_ms: i64,
    ) -> Result<Vec<ZkOpResult>, MultiError> {
        let zxid = self.zxid;
        let mut undo = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match self.apply_logged(op, session, now_ms, &mut undo) {
                Ok(r) => results.push(r),
                Err(error) => {
                    for step in undo.into_iter().rev() {
                        match step {
                            Undo::Remove(path) => {
                                self.nodes.remove(&path);
                            }
                            Undo::Restore(path, node) => {
                                self.nodes.insert(path, node);
                            }
                        }
                    }
                    self.zxid = zxid;
                    return Err(MultiError { index, error });
                }
            }
        }
        Ok(results)
    }

    /// Deletes every ephemeral node `session` owns (its session expired or closed).
    pub fn close_session(&mut self, session: i64) {
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == session && session != 0)
            .map(|(p, _)| p.clone())
            .collect();
        for path in owned {
            let _ = self.apply(&ZkOp::delete(path, ANY_VERSION), session, 0);
        }
    }

    fn save(&self, path: &str, undo: &mut Vec<Undo>) {
        if let Some(node) = self.nodes.get(path) {
            undo.push(Undo::Restore(path.to_owned(), node.clone()));
        }
    }

    fn apply_logged(
        &mut self,
        op: &ZkOp,
        session: i64,
        now_ms: i64,
        undo: &mut Vec<Undo>,
    ) -> Result<ZkOpResult, ZkError> {
        let path = op.path();
        let err = |code| ZkError::new(code, path);
        if !is_valid_path(path) || (path == "/" && !matches!(op, ZkOp::Check { .. })) {
            return Err(err(ZkErrorCode::Other(-8)));
        }
        match op {
            ZkOp::Create { data, mode, .. } => {
                let parent = parent_of(path).ok_or_else(|| err(ZkErrorCode::NodeExists))?;
                let parent_node = self
                    .nodes
                    .get(parent)
                    .ok_or_else(|| err(ZkErrorCode::NoNode))?;
                if parent_node.stat.ephemeral_owner != 0 {
                    return Err(err(ZkErrorCode::NoChildrenForEphemerals));
                }
                let sequence = parent_node.next_sequence;
                let created = if mode.is_sequential() {
                    format!("{path}{sequence:010}")
                } else {
                    path.to_owned()
                };
                if self.nodes.contains_key(&created) {
                    return Err(ZkError::new(ZkErrorCode::NodeExists, created));
                }
                self.zxid += 1;
                let zxid = self.zxid;
                self.save(parent, undo);
                let p = self.nodes.get_mut(parent).expect("parent checked above");
                p.children.insert(name_of(&created).to_owned());
                p.next_sequence = p.next_sequence.wrapping_add(1);
                p.stat.cversion = p.stat.cversion.wrapping_add(1);
                p.stat.num_children = i32::try_from(p.children.len()).unwrap_or(i32::MAX);

                let stat = Stat {
                    czxid: zxid,
                    mzxid: zxid,
                    ctime: now_ms,
                    mtime: now_ms,
                    version: 0,
                    cversion: 0,
                    ephemeral_owner: if mode.is_ephemeral() { session } else { 0 },
                    data_length: i32::try_from(data.len()).unwrap_or(i32::MAX),
                    num_children: 0,
                };
                self.nodes.insert(
                    created.clone(),
                    Node {
                        data: data.clone(),
                        stat,
                        children: BTreeSet::new(),
                        next_sequence: 0,
                    },
                );
                undo.push(Undo::Remove(created.clone()));
                Ok(ZkOpResult::Created { path: created })
            }
            ZkOp::SetData { data, version, .. } => {
                let node = self
                    .nodes
                    .get(path)
                    .ok_or_else(|| err(ZkErrorCode::NoNode))?;
                if *version != ANY_VERSION && *version != node.stat.version {
                    return Err(err(ZkErrorCode::BadVersion));
                }
                self.zxid += 1;
                let zxid = self.zxid;
                self.save(path, undo);
                let node = self.nodes.get_mut(path).expect("checked above");
                node.data = data.clone();
                node.stat.version = node.stat.version.wrapping_add(1);
                node.stat.mzxid = zxid;
                node.stat.mtime = now_ms;
                node.stat.data_length = i32::try_from(data.len()).unwrap_or(i32::MAX);
                Ok(ZkOpResult::SetData { stat: node.stat })
            }
            ZkOp::Delete { version, .. } => {
                let node = self
                    .nodes
                    .get(path)
                    .ok_or_else(|| err(ZkErrorCode::NoNode))?;
                if *version != ANY_VERSION && *version != node.stat.version {
                    return Err(err(ZkErrorCode::BadVersion));
                }
                if !node.children.is_empty() {
                    return Err(err(ZkErrorCode::NotEmpty));
                }
                self.zxid += 1;
                let parent = parent_of(path)
                    .expect("the root cannot be deleted")
                    .to_owned();
                self.save(path, undo);
                self.save(&parent, undo);
                self.nodes.remove(path);
                if let Some(p) = self.nodes.get_mut(&parent) {
                    p.children.remove(name_of(path));
                    p.stat.cversion = p.stat.cversion.wrapping_add(1);
                    p.stat.num_children = i32::try_from(p.children.len()).unwrap_or(i32::MAX);
                }
                Ok(ZkOpResult::Deleted)
            }
            ZkOp::Check { version, .. } => {
                let node = self
                    .nodes
                    .get(path)
                    .ok_or_else(|| err(ZkErrorCode::NoNode))?;
                if *version != ANY_VERSION && *version != node.stat.version {
                    return Err(err(ZkErrorCode::BadVersion));
                }
                Ok(ZkOpResult::Checked)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::CreateMode;

    #[test]
    fn create_needs_parent_and_refuses_duplicates() {
        let mut t = ZkTree::new();
        let e = t
            .apply(&ZkOp::create("/a/b", b"x".to_vec()), 0, 1)
            .expect_err("fails");
        assert_eq!(e.code, ZkErrorCode::NoNode);
        t.apply(&ZkOp::create("/a", Vec::new()), 0, 1)
            .expect("succeeds");
        t.apply(&ZkOp::create("/a/b", b"x".to_vec()), 0, 1)
            .expect("succeeds");
        let e = t
            .apply(&ZkOp::create("/a/b", b"y".to_vec()), 0, 1)
            .expect_err("fails");
        assert_eq!(e.code, ZkErrorCode::NodeExists);
        assert_eq!(t.get("/a/b").expect("succeeds").0, b"x");
        assert_eq!(t.children("/a").expect("succeeds"), vec!["b".to_owned()]);
    }

    #[test]
    fn versions_and_multi_all_or_nothing() {
        let mut t = ZkTree::new();
        t.apply(&ZkOp::create("/e", b"1".to_vec()), 0, 1)
            .expect("succeeds");
        t.apply(&ZkOp::set_data("/e", b"2".to_vec(), 0), 0, 2)
            .expect("succeeds");
        assert_eq!(t.get("/e").expect("succeeds").1.version, 1);
        let before = t.clone();
        let err = t
            .multi(
                &[
                    ZkOp::set_data("/e", b"3".to_vec(), 1),
                    ZkOp::create("/f", Vec::new()),
                    ZkOp::check("/e", 1),
                ],
                0,
                3,
            )
            .expect_err("fails");
        assert_eq!(err.index, 2);
        assert_eq!(err.error.code, ZkErrorCode::BadVersion);
        assert_eq!(t, before);
        let ok = t
            .multi(
                &[ZkOp::check("/e", 1), ZkOp::set_data("/e", b"3".to_vec(), 1)],
                0,
                3,
            )
            .expect("succeeds");
        assert_eq!(ok.len(), 2);
        assert_eq!(t.get("/e").expect("succeeds").1.version, 2);
    }

    #[test]
    fn sequential_ephemeral_and_sessions() {
        let mut t = ZkTree::new();
        t.apply(&ZkOp::create("/c", Vec::new()), 0, 1)
            .expect("succeeds");
        let seq = ZkOp::Create {
            path: "/c/change_".into(),
            data: Vec::new(),
            mode: CreateMode::PersistentSequential,
        };
        assert_eq!(
            t.apply(&seq, 0, 1).expect("succeeds"),
            ZkOpResult::Created {
                path: "/c/change_0000000000".into()
            }
        );
        assert_eq!(
            t.apply(&seq, 0, 1).expect("succeeds"),
            ZkOpResult::Created {
                path: "/c/change_0000000001".into()
            }
        );
        let eph = ZkOp::Create {
            path: "/c/eph".into(),
            data: Vec::new(),
            mode: CreateMode::Ephemeral,
        };
        t.apply(&eph, 7, 1).expect("succeeds");
        let e = t
            .apply(&ZkOp::create("/c/eph/x", Vec::new()), 7, 1)
            .expect_err("fails");
        assert_eq!(e.code, ZkErrorCode::NoChildrenForEphemerals);
        let e = t
            .apply(&ZkOp::delete("/c", ANY_VERSION), 0, 1)
            .expect_err("fails");
        assert_eq!(e.code, ZkErrorCode::NotEmpty);
        t.close_session(7);
        assert!(t.exists("/c/eph").is_none());
    }

    #[test]
    fn insert_read_builds_ancestors() {
        let mut t = ZkTree::new();
        let stat = Stat {
            version: 4,
            ..Stat::default()
        };
        t.insert_read("/brokers/topics/foo", b"{}".to_vec(), stat);
        assert_eq!(
            t.children("/brokers").expect("succeeds"),
            vec!["topics".to_owned()]
        );
        assert_eq!(t.get("/brokers/topics/foo").expect("succeeds").1.version, 4);
        assert!(!is_valid_path("a"));
        assert!(!is_valid_path("/a/"));
        assert!(!is_valid_path("/a//b"));
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(join("/", "a"), "/a");
    }
}
