//! `ZkClient` against a real ZooKeeper (the 3.8.4 server shipped in Kafka 3.9's jars, started
//! by the testkit on a free loopback port).
//!
//! - Conformance: one scenario (create/set/delete/check, multi-ops that succeed and that fail at
//!   a known index, sequential names, ephemeral nodes, NOCHILDRENFOREPHEMERALS, NOTEMPTY,
//!   BADVERSION, a subtree read back with `read_tree`) runs against `MemZk` and against the real
//!   server; the two transcripts must be equal once the fields only a real server knows (zxids,
//!   times, the session id) are blanked. It runs once more on a chrooted client.
//! - Outages: a killed server makes every call fail with a retriable code (no hang), and the
//!   client works again after a restart; an expired session is reported once
//!   (`SESSIONEXPIRED`), then a new session takes over and the old ephemeral nodes go.
//! - A chroot in the connect string is created and every path is relative to it.
//!
//! Every test runs under a timeout; the servers are SIGKILLed on drop.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use krust_testkit::{KafkaDist, ZooKeeperServer};
use krust_zk::backend::{MemZk, ZkBackend, read_tree};
use krust_zk::client::{ZkClient, ZkClientConfig, ZkSessionState};
use krust_zk::ops::{ANY_VERSION, CreateMode, Stat, ZkErrorCode, ZkOp, ZkOpResult};

/// Bound of one whole test body.
const TEST_TIMEOUT: Duration = Duration::from_secs(180);

fn start_zookeeper() -> ZooKeeperServer {
    let dist = KafkaDist::locate().expect("Apache Kafka 3.9 (run ./scripts/fetch-kafka.sh)");
    ZooKeeperServer::start(&dist).expect("zookeeper starts")
}

/// Runs `body` on a two-worker tokio runtime, bounded by [`TEST_TIMEOUT`].
fn run<F: Future<Output = ()>>(body: F) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        tokio::time::timeout(TEST_TIMEOUT, body)
            .await
            .expect("the test finishes within its timeout");
    });
}

/// Short timeouts so outages are noticed quickly (the server negotiates at least 4 s:
/// 2 × tickTime).
fn config(connect: String) -> ZkClientConfig {
    ZkClientConfig::new(connect)
        .with_session_timeout(Duration::from_secs(4))
        .with_connection_timeout(Duration::from_secs(2))
}

/// A stat with what only a real server knows blanked: zxids, times, and which session owns an
/// ephemeral node (kept as 1 = ephemeral, 0 = not).
fn portable(stat: Stat) -> Stat {
    Stat {
        czxid: 0,
        mzxid: 0,
        ctime: 0,
        mtime: 0,
        ephemeral_owner: i64::from(stat.ephemeral_owner != 0),
        ..stat
    }
}

fn portable_result(result: ZkOpResult) -> ZkOpResult {
    match result {
        ZkOpResult::SetData { stat } => ZkOpResult::SetData {
            stat: portable(stat),
        },
        other => other,
    }
}

/// A transcript of what a backend answered.
#[derive(Default)]
struct Transcript(Vec<String>);

impl Transcript {
    fn note(&mut self, step: &str, outcome: impl Debug) {
        self.0.push(format!("{step}: {outcome:?}"));
    }
}

async fn op<B: ZkBackend>(zk: &B, t: &mut Transcript, step: &str, op: ZkOp) {
    let outcome = zk
        .apply(&op)
        .await
        .map(portable_result)
        .map_err(|e| (e.code, e.path));
    t.note(step, outcome);
}

async fn multi<B: ZkBackend>(zk: &B, t: &mut Transcript, step: &str, ops: &[ZkOp]) {
    let outcome = zk
        .multi(ops)
        .await
        .map(|results| results.into_iter().map(portable_result).collect::<Vec<_>>())
        .map_err(|e| (e.index, e.error.code, e.error.path));
    t.note(step, outcome);
}

fn create(path: &str, data: &str, mode: CreateMode) -> ZkOp {
    ZkOp::Create {
        path: path.to_owned(),
        data: data.as_bytes().to_vec(),
        mode,
    }
}

/// The conformance scenario: everything the migration relies on, under `/conf`.
async fn scenario<B: ZkBackend>(zk: &B) -> Vec<String> {
    use CreateMode::{Ephemeral, EphemeralSequential, Persistent, PersistentSequential};
    let mut t = Transcript::default();

    // Create, and the ways it fails.
    op(zk, &mut t, "create root", create("/conf", "", Persistent)).await;
    op(zk, &mut t, "create a", create("/conf/a", "1", Persistent)).await;
    op(
        zk,
        &mut t,
        "create a again",
        create("/conf/a", "x", Persistent),
    )
    .await;
    op(
        zk,
        &mut t,
        "create without parent",
        create("/conf/x/y", "", Persistent),
    )
    .await;

    // Versions: setData, check, delete.
    op(
        zk,
        &mut t,
        "set a@0",
        ZkOp::set_data("/conf/a", b"2".to_vec(), 0),
    )
    .await;
    op(
        zk,
        &mut t,
        "set a@0 again",
        ZkOp::set_data("/conf/a", b"3".to_vec(), 0),
    )
    .await;
    op(
        zk,
        &mut t,
        "set a@any",
        ZkOp::set_data("/conf/a", b"22".to_vec(), ANY_VERSION),
    )
    .await;
    op(
        zk,
        &mut t,
        "set missing",
        ZkOp::set_data("/conf/nope", Vec::new(), 0),
    )
    .await;
    let got = zk
        .get_data("/conf/a")
        .await
        .map(|(data, stat)| (String::from_utf8_lossy(&data).into_owned(), portable(stat)))
        .map_err(|e| e.code);
    t.note("get a", got);
    t.note(
        "get missing",
        zk.get_data("/conf/nope").await.map_err(|e| e.code),
    );
    t.note(
        "exists missing",
        zk.exists("/conf/nope").await.map_err(|e| e.code),
    );
    let exists = zk.exists("/conf/a").await.map(|s| s.map(portable));
    t.note("exists a", exists.map_err(|e| e.code));
    op(zk, &mut t, "check a@2", ZkOp::check("/conf/a", 2)).await;
    op(zk, &mut t, "check a@5", ZkOp::check("/conf/a", 5)).await;
    op(
        zk,
        &mut t,
        "check missing",
        ZkOp::check("/conf/nope", ANY_VERSION),
    )
    .await;
    op(zk, &mut t, "delete a@7", ZkOp::delete("/conf/a", 7)).await;
    op(
        zk,
        &mut t,
        "delete missing",
        ZkOp::delete("/conf/nope", ANY_VERSION),
    )
    .await;

    // Sequential names (the parent's child counter, also across a delete).
    op(
        zk,
        &mut t,
        "create seq dir",
        create("/conf/seq", "", Persistent),
    )
    .await;
    for i in 0..3 {
        let step = format!("sequential {i}");
        op(
            zk,
            &mut t,
            &step,
            create("/conf/seq/n-", "", PersistentSequential),
        )
        .await;
    }
    op(
        zk,
        &mut t,
        "delete seq 1",
        ZkOp::delete("/conf/seq/n-0000000001", 0),
    )
    .await;
    op(
        zk,
        &mut t,
        "sequential after delete",
        create("/conf/seq/n-", "", PersistentSequential),
    )
    .await;
    op(
        zk,
        &mut t,
        "plain child of seq",
        create("/conf/seq/plain", "", Persistent),
    )
    .await;
    op(
        zk,
        &mut t,
        "sequential after plain",
        create("/conf/seq/n-", "", PersistentSequential),
    )
    .await;

    // Ephemeral nodes.
    op(
        zk,
        &mut t,
        "create ephemeral",
        create("/conf/eph", "e", Ephemeral),
    )
    .await;
    op(
        zk,
        &mut t,
        "child of ephemeral",
        create("/conf/eph/c", "", Persistent),
    )
    .await;
    op(
        zk,
        &mut t,
        "ephemeral sequential",
        create("/conf/eseq-", "", EphemeralSequential),
    )
    .await;
    let eph = zk.get_data("/conf/eph").await.map(|(_, s)| portable(s));
    t.note("get ephemeral", eph.map_err(|e| e.code));

    // Delete with children, then without.
    op(
        zk,
        &mut t,
        "delete non-empty",
        ZkOp::delete("/conf/seq", ANY_VERSION),
    )
    .await;
    op(
        zk,
        &mut t,
        "delete plain",
        ZkOp::delete("/conf/seq/plain", 0),
    )
    .await;

    // Multi-ops: all applied, or none and the first failing index.
    let ok = [
        create("/conf/m", "m", Persistent),
        create("/conf/m/1", "", Persistent),
        create("/conf/m/s-", "", PersistentSequential),
        ZkOp::set_data("/conf/m", b"mm".to_vec(), 0),
        ZkOp::check("/conf/m", 1),
        ZkOp::delete("/conf/m/1", 0),
    ];
    multi(zk, &mut t, "multi ok", &ok).await;
    let bad_version = [
        create("/conf/f", "", Persistent),
        ZkOp::set_data("/conf/a", b"z".to_vec(), 99),
        create("/conf/g", "", Persistent),
    ];
    multi(zk, &mut t, "multi bad version at 1", &bad_version).await;
    let exists_f = zk.exists("/conf/f").await.map(|s| s.is_some());
    t.note("multi applied nothing", exists_f.map_err(|e| e.code));
    let node_exists = [
        ZkOp::check("/conf/a", 2),
        create("/conf/h", "", Persistent),
        create("/conf/a", "", Persistent),
    ];
    multi(zk, &mut t, "multi node exists at 2", &node_exists).await;
    let no_node = [
        ZkOp::delete("/conf/nope", ANY_VERSION),
        create("/conf/i", "", Persistent),
    ];
    multi(zk, &mut t, "multi no node at 0", &no_node).await;
    let not_empty = [
        ZkOp::set_data("/conf/a", b"y".to_vec(), 2),
        ZkOp::delete("/conf/m", ANY_VERSION),
    ];
    multi(zk, &mut t, "multi not empty at 1", &not_empty).await;
    let ephemeral_parent = [
        create("/conf/j", "", Persistent),
        create("/conf/eph/k", "", Persistent),
    ];
    multi(zk, &mut t, "multi ephemeral parent at 1", &ephemeral_parent).await;
    let check_fails = [ZkOp::check("/conf/a", 0), create("/conf/l", "", Persistent)];
    multi(zk, &mut t, "multi check at 0", &check_fails).await;
    multi(zk, &mut t, "multi empty", &[]).await;

    // Listing and reading the subtree back.
    let mut children = zk.get_children("/conf").await.map_err(|e| e.code);
    if let Ok(children) = children.as_mut() {
        children.sort();
    }
    t.note("children", children);
    t.note(
        "children missing",
        zk.get_children("/conf/nope").await.map_err(|e| e.code),
    );
    let tree = read_tree(zk, &["/conf", "/absent"])
        .await
        .expect("read_tree");
    for path in tree.paths().filter(|p| p.starts_with("/conf")) {
        let (data, stat) = tree.get(path).expect("listed path");
        t.note(
            &format!("tree {path}"),
            (String::from_utf8_lossy(data).into_owned(), portable(stat)),
        );
    }
    t.0
}

#[test]
fn real_zookeeper_answers_as_memzk_does() {
    let zk = start_zookeeper();
    run(async {
        let mem = scenario(&MemZk::default()).await;
        let client = ZkClient::connect(config(zk.connect_string()))
            .await
            .expect("connects");
        let real = scenario(&client).await;
        let diffs: Vec<String> = mem
            .iter()
            .zip(&real)
            .filter(|(m, r)| m != r)
            .map(|(m, r)| format!("MemZk: {m}\nreal:  {r}"))
            .collect();
        assert!(
            diffs.is_empty(),
            "transcripts differ:\n{}",
            diffs.join("\n")
        );
        assert_eq!(mem.len(), real.len(), "transcript lengths");
        // The same under a chroot: every path and result is relative to it.
        let rooted = ZkClient::connect(config(format!("{}/kafka", zk.connect_string())))
            .await
            .expect("connects under a chroot");
        assert_eq!(scenario(&rooted).await, mem, "chrooted transcript");
        // The scenario saw what it was written for (not two identical wrong answers).
        let expect = [
            "create a again: Err((NodeExists, \"/conf/a\"))",
            "create without parent: Err((NoNode, \"/conf/x/y\"))",
            "set a@0 again: Err((BadVersion, \"/conf/a\"))",
            "sequential 2: Ok(Created { path: \"/conf/seq/n-0000000002\" })",
            "child of ephemeral: Err((NoChildrenForEphemerals, \"/conf/eph/c\"))",
            "delete non-empty: Err((NotEmpty, \"/conf/seq\"))",
            "multi bad version at 1: Err((1, BadVersion, \"/conf/a\"))",
            "multi applied nothing: Ok(false)",
            "multi node exists at 2: Err((2, NodeExists, \"/conf/a\"))",
            "multi no node at 0: Err((0, NoNode, \"/conf/nope\"))",
            "multi not empty at 1: Err((1, NotEmpty, \"/conf/m\"))",
            "multi ephemeral parent at 1: Err((1, NoChildrenForEphemerals, \"/conf/eph/k\"))",
            "multi check at 0: Err((0, BadVersion, \"/conf/a\"))",
            "multi empty: Ok([])",
        ];
        for line in expect {
            assert!(
                real.iter().any(|l| l == line),
                "missing {line:?} in {real:#?}"
            );
        }
    });
}

/// Bound of one call while the server is down: well above connection timeout (2 s) + session
/// timeout (30 s), the most a call may wait; reaching it means the call hung.
const CALL_BOUND: Duration = Duration::from_secs(90);

async fn bounded<T>(call: impl Future<Output = T>) -> T {
    tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("the call returns instead of hanging")
}

/// Retries `call` while it fails with a retriable code, at most `attempts` times.
async fn retrying<T, F, Fut>(attempts: usize, mut call: F) -> Result<T, ZkErrorCode>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ZkErrorCode>>,
{
    let mut last = ZkErrorCode::ConnectionLoss;
    for _ in 0..attempts {
        match call().await {
            Ok(value) => return Ok(value),
            Err(code) if code.is_retriable() => last = code,
            Err(code) => return Err(code),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

#[test]
fn a_killed_server_fails_calls_with_retriable_codes_and_a_restart_heals() {
    let mut zk = start_zookeeper();
    run(async move {
        // A session that outlives the restart (the client expires it after 1.4 × its timeout).
        let cfg = ZkClientConfig::new(zk.connect_string())
            .with_session_timeout(Duration::from_secs(30))
            .with_connection_timeout(Duration::from_secs(2));
        let client = ZkClient::connect(cfg).await.expect("connects");
        client
            .apply(&ZkOp::create("/k", b"v".to_vec()))
            .await
            .expect("create");

        zk.kill().expect("kill zookeeper");
        // Each call returns (no hang) well within connection timeout + session timeout.
        let get = bounded(client.get_data("/k"))
            .await
            .expect_err("server is down");
        assert!(get.code.is_retriable(), "get_data: {get}");
        let set = bounded(client.apply(&ZkOp::set_data("/k", b"w".to_vec(), ANY_VERSION)))
            .await
            .expect_err("server is down");
        assert!(set.code.is_retriable(), "setData: {set}");
        let multi =
            bounded(client.multi(&[ZkOp::check("/k", 0), ZkOp::create("/k/c", Vec::new())]))
                .await
                .expect_err("server is down");
        assert_eq!(multi.index, 0, "a lost connection is reported at index 0");
        assert!(multi.error.code.is_retriable(), "multi: {multi}");
        let exists = bounded(client.exists("/k")).await;
        assert!(exists.is_err_and(|e| e.code.is_retriable()));
        let children = bounded(client.get_children("/")).await;
        assert!(children.is_err_and(|e| e.code.is_retriable()));
        assert_ne!(client.session_state(), ZkSessionState::Connected);

        zk.restart().expect("zookeeper restarts");
        let data = retrying(100, || async {
            client
                .get_data("/k")
                .await
                .map(|(d, _)| d)
                .map_err(|e| e.code)
        })
        .await
        .expect("calls work again after the restart");
        assert_eq!(data, b"v");
        // Nothing was written while the server was down.
        let stat = client.exists("/k/c").await.expect("exists");
        assert_eq!(stat, None);
    });
}

#[test]
fn an_expired_session_is_reported_once_then_replaced() {
    let mut zk = start_zookeeper();
    run(async move {
        let client = ZkClient::connect(config(zk.connect_string()))
            .await
            .expect("connects");
        let eph = ZkOp::Create {
            path: "/owner".into(),
            data: b"1".to_vec(),
            mode: CreateMode::Ephemeral,
        };
        client.apply(&eph).await.expect("create ephemeral");
        let first_session = client.session_id();
        let (_, stat) = client.get_data("/owner").await.expect("get");
        assert_eq!(stat.ephemeral_owner, first_session);

        // The server is gone longer than the session timeout: the client expires the session
        // on its side (the state watcher sees it), and the restarted server expires it too.
        zk.kill().expect("kill zookeeper");
        let state = client
            .wait_for_session_state(Duration::from_secs(60), |s| s == ZkSessionState::Expired)
            .await
            .expect("the client notices the expiry");
        assert_eq!(state, ZkSessionState::Expired);
        zk.restart().expect("zookeeper restarts");

        let reported = client.exists("/owner").await.expect_err("expiry reported");
        assert_eq!(reported.code, ZkErrorCode::SessionExpired);
        assert!(reported.code.is_retriable());

        // The next calls run on a new session; the old one's ephemeral node goes once the
        // server expires it.
        let gone = retrying(300, || async {
            match client.exists("/owner").await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err(ZkErrorCode::ConnectionLoss), // not yet: poll again
                Err(e) => Err(e.code),
            }
        })
        .await;
        assert_eq!(
            gone,
            Ok(()),
            "the expired session's ephemeral node is removed"
        );
        assert_ne!(client.session_id(), first_session);
        assert_eq!(client.session_state(), ZkSessionState::Connected);
        client
            .apply(&eph)
            .await
            .expect("re-create on the new session");
        let (_, stat) = client.get_data("/owner").await.expect("get");
        assert_eq!(stat.ephemeral_owner, client.session_id());
    });
}

#[test]
fn a_chroot_is_created_and_paths_are_relative_to_it() {
    let zk = start_zookeeper();
    run(async {
        let rooted = ZkClient::connect(config(format!("{}/kafka/c1", zk.connect_string())))
            .await
            .expect("connects and creates the chroot");
        let created = rooted
            .apply(&ZkOp::Create {
                path: "/brokers".into(),
                data: Vec::new(),
                mode: CreateMode::Persistent,
            })
            .await
            .expect("create");
        assert_eq!(
            created,
            ZkOpResult::Created {
                path: "/brokers".into()
            }
        );
        let seq = ZkOp::Create {
            path: "/brokers/s-".into(),
            data: Vec::new(),
            mode: CreateMode::PersistentSequential,
        };
        assert_eq!(
            rooted.apply(&seq).await.expect("sequential"),
            ZkOpResult::Created {
                path: "/brokers/s-0000000000".into()
            }
        );
        let in_multi = rooted.multi(&[seq]).await.expect("multi");
        assert_eq!(
            in_multi,
            vec![ZkOpResult::Created {
                path: "/brokers/s-0000000001".into()
            }]
        );

        let plain = ZkClient::connect(config(zk.connect_string()))
            .await
            .expect("connects");
        let mut children = plain
            .get_children("/kafka/c1/brokers")
            .await
            .expect("seen from outside the chroot");
        children.sort();
        assert_eq!(children, ["s-0000000000", "s-0000000001"]);

        let missing = ZkClientConfig {
            create_chroot: false,
            ..config(format!("{}/kafka/c2", zk.connect_string()))
        };
        let unrooted = ZkClient::connect(missing).await.expect("connects");
        let e = unrooted
            .apply(&ZkOp::create("/x", Vec::new()))
            .await
            .expect_err("the chroot is missing");
        assert_eq!(e.code, ZkErrorCode::NoNode);
    });
}

#[test]
fn connecting_to_a_closed_port_fails_with_a_retriable_code() {
    // A port with no server: bound then released by the testkit's free-port picker is not
    // exposed, so use a ZooKeeper that is killed before the client connects.
    let mut zk = start_zookeeper();
    let connect = zk.connect_string();
    zk.kill().expect("kill zookeeper");
    run(async move {
        let e = ZkClient::connect(config(connect))
            .await
            .expect_err("no server");
        assert!(e.code.is_retriable(), "{e}");
    });
}
