//! `group-rebalance` (issue 6's group coordinator benchmark): `--consumers` (50) classic-protocol
//! consumers join one group subscribed to a topic with `--partitions` (100) partitions; measured
//! are (1) the time from the first JoinGroup until the group is stable — every member has a
//! SyncGroup assignment of the same generation and the assignments cover every partition — and
//! (2) the OffsetCommits per second the coordinator then sustains while every member commits its
//! partitions in a loop for `--commit-seconds`, one request at a time per member (so
//! `--consumers` requests are in flight), plus the broker's CPU seconds per 10k commits.
//!
//! The driver is the same for both implementations: one `krust_net::Client` connection per
//! member speaking JoinGroup v5 (KIP-394 member id round trip), SyncGroup v3, Heartbeat v3 every
//! `--heartbeat-ms` until the group is stable, OffsetCommit v8 — what a Java/librdkafka consumer
//! sends, without the client-side work. The leader assigns like the `range` assignor
//! (contiguous ranges over members sorted by id). No JVM client start-up is in the figures.
//!
//! krust is `krust dev` (one combined node); the peer is one combined Apache Kafka 3.9 node from
//! the test harness with the same group settings (`group.initial.rebalance.delay.ms=0`,
//! `offsets.topic.num.partitions=50`, RF 1) and Kafka's default thread counts. `--rounds`
//! rounds per implementation, each with a fresh group.
//!
//! ```text
//! cargo build --release -p krust -p krust-bench
//! target/release/group-rebalance [--consumers 50 --partitions 100 --commit-seconds 10 --rounds 3]
//! ```
//! Goal (issue 6): reported beside Kafka's in the same run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use clap::Parser;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest,
    OffsetFetchRequest, RequestKind, ResponseKind, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use krust_bench::{cores, cpu_model, default_krust_binary, load_average};
use krust_net::{Client, ClientConfig};
use krust_testkit::{KafkaDist, KafkaNode, KrustProcess, free_port};

const TOPIC: &str = "group-rebalance";
/// Kafka's error codes the driver reacts to.
const NONE: i16 = 0;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
/// Bound on reaching a stable group (and on the coordinator becoming available).
const STABLE_TIMEOUT: Duration = Duration::from_secs(180);
/// Each member's session: longer than the commit phase, in which members do not heartbeat.
const SESSION_TIMEOUT_MS: i32 = 45_000;
const REBALANCE_TIMEOUT_MS: i32 = 60_000;

/// krust vs Apache Kafka 3.9: time to a stable 50-member group and OffsetCommits/s.
#[derive(Debug, Parser)]
struct Args {
    /// The krust binary (default: `target/release/krust` of this workspace).
    #[arg(long)]
    krust: Option<PathBuf>,
    /// Members of the group.
    #[arg(long, default_value_t = 50)]
    consumers: usize,
    /// Partitions of the subscribed topic.
    #[arg(long, default_value_t = 100)]
    partitions: i32,
    /// Seconds of the commit phase.
    #[arg(long, default_value_t = 10)]
    commit_seconds: u64,
    /// Heartbeat interval of the members until the group is stable.
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// Rounds per implementation (a fresh group each).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Only measure Kafka.
    #[arg(long)]
    skip_krust: bool,
    /// Only measure krust.
    #[arg(long)]
    skip_kafka: bool,
}

/// One round's figures.
#[derive(Debug, Clone)]
struct Round {
    stable: Duration,
    generation: i32,
    commits: u64,
    commit_errors: u64,
    elapsed: Duration,
    cpu_seconds: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.consumers == 0 || args.partitions <= 0 || args.rounds == 0 || args.commit_seconds == 0 {
        bail!("--consumers, --partitions, --rounds and --commit-seconds must be positive");
    }
    let dist = KafkaDist::locate().context("Kafka 3.9 jars (scripts/fetch-kafka.sh)")?;
    println!("group-rebalance: krust vs Apache Kafka 3.9.1, one combined node each (loopback)");
    println!(
        "machine: {} ({} cores), load {}",
        cpu_model(),
        cores(),
        load_average()
    );
    println!(
        "parameters: {} consumers, 1 topic x {} partitions, range assignment, heartbeat {} ms until stable, \
         commit phase {} s (each member commits its partitions, 1 request in flight per member), \
         {} rounds, group.initial.rebalance.delay.ms=0, offsets.topic.num.partitions=50",
        args.consumers, args.partitions, args.heartbeat_ms, args.commit_seconds, args.rounds
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let mut results: Vec<(&str, Result<Vec<Round>>)> = Vec::new();
    if !args.skip_kafka {
        let broker = start_kafka(&dist);
        results.push((
            "kafka",
            broker.and_then(|mut b| measure(&runtime, &dist, &mut b, &args)),
        ));
    }
    if !args.skip_krust {
        let binary = args.krust.clone().unwrap_or_else(default_krust_binary);
        let broker = if binary.is_file() {
            start_krust(&binary)
        } else {
            Err(anyhow::anyhow!(
                "{} does not exist (cargo build --release -p krust)",
                binary.display()
            ))
        };
        results.push((
            "krust",
            broker.and_then(|mut b| measure(&runtime, &dist, &mut b, &args)),
        ));
    }
    print_table(&results);
    Ok(())
}

/// The broker being measured (killed on drop).
enum Broker {
    Kafka(Box<KafkaNode>),
    Krust {
        process: Box<KrustProcess>,
        port: u16,
    },
}

impl Broker {
    fn bootstrap(&self) -> String {
        match self {
            Broker::Kafka(node) => node.bootstrap_servers(),
            Broker::Krust { port, .. } => format!("127.0.0.1:{port}"),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Broker::Kafka(_) => "kafka",
            Broker::Krust { .. } => "krust",
        }
    }

    fn pid(&mut self) -> Option<u32> {
        match self {
            Broker::Kafka(node) => node.process().and_then(|p| p.pid()),
            Broker::Krust { process, .. } => process.pid(),
        }
    }
}

/// `krust dev` (one combined node, the settings it generates) on a free port.
fn start_krust(binary: &std::path::Path) -> Result<Broker> {
    let port = free_port().context("port")?;
    let mut process = KrustProcess::builder(binary)
        .name("krust-dev")
        .args([
            "dev",
            "--data-dir",
            "krust-data",
            "--port",
            &port.to_string(),
        ])
        .env("RUST_LOG", "warn")
        .start()
        .context("starting krust dev")?;
    let wait = Duration::from_secs(60);
    process
        .wait_for_line("ready", wait)
        .context("krust dev ready")?;
    process
        .wait_for_port(port, wait)
        .context("krust dev port")?;
    Ok(Broker::Krust {
        process: Box::new(process),
        port,
    })
}

fn start_kafka(dist: &KafkaDist) -> Result<Broker> {
    // The harness's quiet settings shrink the offsets topic and the thread pools; put Kafka's
    // defaults back (krust dev runs with them), keeping the harness's initial delay of 0 which
    // krust dev uses too.
    let node = KafkaNode::builder(dist)
        .prop("offsets.topic.num.partitions", "50")
        .prop("num.network.threads", "3")
        .prop("num.io.threads", "8")
        .prop("group.initial.rebalance.delay.ms", "0")
        .start()
        .context("starting a combined Kafka 3.9 node")?;
    Ok(Broker::Kafka(Box::new(node)))
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    dist: &KafkaDist,
    broker: &mut Broker,
    args: &Args,
) -> Result<Vec<Round>> {
    let bootstrap = broker.bootstrap();
    dist.create_topic(&bootstrap, TOPIC, args.partitions.unsigned_abs(), 1, &[])
        .with_context(|| format!("{}: creating {TOPIC}", broker.kind()))?;
    let pid = broker.pid();
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let group = format!("{TOPIC}-{round}");
        let figures = runtime
            .block_on(one_round(&bootstrap, &group, args, pid))
            .with_context(|| format!("{} round {round}", broker.kind()))?;
        println!(
            "  {} round {round}: stable after {:.0} ms (generation {}), {:.0} commits/s ({} errors)",
            broker.kind(),
            figures.stable.as_secs_f64() * 1e3,
            figures.generation,
            figures.commits as f64 / figures.elapsed.as_secs_f64(),
            figures.commit_errors
        );
        rounds.push(figures);
    }
    Ok(rounds)
}

/// A member's last SyncGroup: generation and assigned partitions.
type Synced = Option<(i32, Vec<i32>)>;

/// Shared state of one round's members.
struct Shared {
    start: Instant,
    /// Per member: (generation, partitions assigned) of its last SyncGroup.
    synced: Mutex<Vec<Synced>>,
    /// When the group was first seen stable, and its generation.
    stable: Mutex<Option<(Duration, i32)>>,
    /// Set once stable: members stop heartbeating and start committing.
    commit_phase: AtomicBool,
    /// Set at the end of the commit phase.
    stop: AtomicBool,
    commits: AtomicU64,
    commit_errors: AtomicU64,
    partitions: i32,
}

impl Shared {
    /// Records member `index`'s assignment and notes when that made the group stable.
    fn synced(&self, index: usize, generation: i32, partitions: Vec<i32>) {
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        synced[index] = Some((generation, partitions));
        let all_same = synced
            .iter()
            .all(|s| s.as_ref().is_some_and(|(g, _)| *g == generation));
        if !all_same {
            return;
        }
        let mut covered: Vec<i32> = synced
            .iter()
            .flatten()
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        covered.sort_unstable();
        if covered == (0..self.partitions).collect::<Vec<_>>() {
            let mut stable = self.stable.lock().unwrap_or_else(|e| e.into_inner());
            if stable.is_none() {
                *stable = Some((self.start.elapsed(), generation));
                self.commit_phase.store(true, Ordering::SeqCst);
            }
        }
    }
}

async fn one_round(bootstrap: &str, group: &str, args: &Args, pid: Option<u32>) -> Result<Round> {
    let config = ClientConfig {
        client_id: "group-rebalance".to_owned(),
        // JoinGroup waits for the rebalance: up to the rebalance timeout.
        request_timeout: Duration::from_millis(REBALANCE_TIMEOUT_MS.unsigned_abs().into())
            + Duration::from_secs(5),
        ..ClientConfig::default()
    };
    // The coordinator (and __consumer_offsets) exists and has loaded the group's shard before
    // the clock starts: FindCoordinator succeeds and a Heartbeat of an unknown member gets an
    // answer other than NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / _NOT_AVAILABLE.
    let probe = Client::new(bootstrap, config.clone());
    let deadline = Instant::now() + STABLE_TIMEOUT;
    let coordinator_busy = [
        NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS,
        COORDINATOR_NOT_AVAILABLE,
    ];
    loop {
        let request = FindCoordinatorRequest::default().with_key(sb(group));
        let response = probe.send(RequestKind::FindCoordinator(request), 3).await;
        if let Ok(ResponseKind::FindCoordinator(r)) = &response
            && r.error_code == NONE
        {
            let beat = HeartbeatRequest::default()
                .with_group_id(GroupId(sb(group)))
                .with_generation_id(-1)
                .with_member_id(sb("probe"));
            let answer = probe.send(RequestKind::Heartbeat(beat), 3).await;
            if let Ok(ResponseKind::Heartbeat(h)) = &answer
                && !coordinator_busy.contains(&h.error_code)
            {
                break;
            }
        }
        if Instant::now() > deadline {
            bail!("FindCoordinator({group}) never succeeded: {response:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let clients: Vec<Arc<Client>> = (0..args.consumers)
        .map(|_| Arc::new(Client::new(bootstrap, config.clone())))
        .collect();
    // Connect every member before the clock starts: the figure is the coordinator's, not TCP's.
    for client in &clients {
        client
            .connection(tokio::time::Instant::now() + Duration::from_secs(10))
            .await
            .context("connecting a member")?;
    }
    let shared = Arc::new(Shared {
        start: Instant::now(),
        synced: Mutex::new(vec![None; args.consumers]),
        stable: Mutex::new(None),
        commit_phase: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        commits: AtomicU64::new(0),
        commit_errors: AtomicU64::new(0),
        partitions: args.partitions,
    });
    let mut tasks = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        tasks.push(tokio::spawn(member(
            Arc::clone(client),
            index,
            group.to_owned(),
            Arc::clone(&shared),
            Duration::from_millis(args.heartbeat_ms),
        )));
    }
    let deadline = shared.start + STABLE_TIMEOUT;
    let (stable, generation) = loop {
        if let Some(s) = *shared.stable.lock().unwrap_or_else(|e| e.into_inner()) {
            break s;
        }
        if let Some(failed) = tasks.iter().position(tokio::task::JoinHandle::is_finished) {
            shared.stop.store(true, Ordering::SeqCst);
            let task = tasks.swap_remove(failed);
            let error = match task.await {
                Ok(Ok(())) => anyhow::anyhow!("a member ended before the group was stable"),
                Ok(Err(e)) => e,
                Err(e) => anyhow::anyhow!("member task: {e}"),
            };
            return Err(error.context(format!("member {failed}")));
        }
        if Instant::now() > deadline {
            shared.stop.store(true, Ordering::SeqCst);
            bail!("no stable group within {STABLE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    // The members are committing now (they poll the flag); count from here.
    let cpu_start = pid.map(cpu_seconds);
    let commits_start = shared.commits.load(Ordering::SeqCst);
    let errors_start = shared.commit_errors.load(Ordering::SeqCst);
    let measure_start = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.commit_seconds)).await;
    let commits = shared.commits.load(Ordering::SeqCst) - commits_start;
    let commit_errors = shared.commit_errors.load(Ordering::SeqCst) - errors_start;
    let elapsed = measure_start.elapsed();
    let cpu_end = pid.map(cpu_seconds);
    shared.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(70), task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e.context("a member failed")),
            Ok(Err(e)) => bail!("member task: {e}"),
            Err(_) => bail!("a member did not stop"),
        }
    }
    // The commits were stored: OffsetFetch returns a committed offset for every partition.
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(sb(TOPIC)))
                .with_partition_indexes((0..args.partitions).collect()),
        ]));
    let ResponseKind::OffsetFetch(fetched) = probe.send(RequestKind::OffsetFetch(fetch), 7).await?
    else {
        bail!("OffsetFetch: unexpected response kind");
    };
    let stored = fetched
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.error_code == NONE && p.committed_offset > 0)
        .count();
    if fetched.error_code != NONE || stored != args.partitions.unsigned_abs() as usize {
        bail!(
            "OffsetFetch after the commit phase: error {}, {stored} of {} partitions with a committed offset",
            fetched.error_code,
            args.partitions
        );
    }
    Ok(Round {
        stable,
        generation,
        commits,
        commit_errors,
        elapsed,
        cpu_seconds: match (cpu_start, cpu_end) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        },
    })
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// ConsumerProtocolSubscription v0: version, topics, null user data.
fn subscription() -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    put_string(&mut b, TOPIC);
    b.put_i32(-1);
    b.freeze()
}

/// ConsumerProtocolAssignment v0 for `partitions` of the topic.
fn assignment(partitions: &[i32]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    put_string(&mut b, TOPIC);
    b.put_i32(i32::try_from(partitions.len()).unwrap_or(i32::MAX));
    for p in partitions {
        b.put_i32(*p);
    }
    b.put_i32(-1);
    b.freeze()
}

fn put_string(b: &mut BytesMut, s: &str) {
    b.put_i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
    b.put_slice(s.as_bytes());
}

/// The partitions of a ConsumerProtocolAssignment (any version: the prefix is the same).
fn parse_assignment(mut b: Bytes) -> Result<Vec<i32>> {
    let mut partitions = Vec::new();
    if b.is_empty() {
        return Ok(partitions);
    }
    let need = |b: &Bytes, n: usize| {
        if b.remaining() < n {
            bail!("assignment truncated")
        } else {
            Ok(())
        }
    };
    need(&b, 6)?;
    let _version = b.get_i16();
    let topics = b.get_i32();
    for _ in 0..topics.max(0) {
        need(&b, 2)?;
        let len = usize::try_from(b.get_i16().max(0)).unwrap_or(0);
        need(&b, len + 4)?;
        b.advance(len);
        let count = b.get_i32();
        for _ in 0..count.max(0) {
            need(&b, 4)?;
            partitions.push(b.get_i32());
        }
    }
    Ok(partitions)
}

/// `range`: contiguous ranges of the partitions over the members sorted by id.
fn range_assign(members: &[String], partitions: i32) -> Vec<(String, Vec<i32>)> {
    let mut members = members.to_vec();
    members.sort();
    let n = i32::try_from(members.len()).unwrap_or(i32::MAX).max(1);
    let (per, extra) = (partitions / n, partitions % n);
    let mut next = 0;
    members
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let i = i32::try_from(i).unwrap_or(i32::MAX);
            let count = per + i32::from(i < extra);
            let owned = (next..next + count).collect();
            next += count;
            (m, owned)
        })
        .collect()
}

/// One member: join (with the KIP-394 round trip), sync (assigning if leader), heartbeat until
/// the group is stable or a rebalance starts (then rejoin), then commit until told to stop.
async fn member(
    client: Arc<Client>,
    index: usize,
    group: String,
    shared: Arc<Shared>,
    heartbeat: Duration,
) -> Result<()> {
    let mut member_id = String::new();
    'join: loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let join = JoinGroupRequest::default()
            .with_group_id(GroupId(sb(&group)))
            .with_session_timeout_ms(SESSION_TIMEOUT_MS)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_member_id(sb(&member_id))
            .with_protocol_type(sb("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(sb("range"))
                    .with_metadata(subscription()),
            ]);
        let ResponseKind::JoinGroup(joined) = client.send(RequestKind::JoinGroup(join), 5).await?
        else {
            bail!("JoinGroup: unexpected response kind");
        };
        match joined.error_code {
            NONE => {}
            MEMBER_ID_REQUIRED => {
                member_id = joined.member_id.to_string();
                continue 'join;
            }
            REBALANCE_IN_PROGRESS
            | NOT_COORDINATOR
            | COORDINATOR_LOAD_IN_PROGRESS
            | COORDINATOR_NOT_AVAILABLE => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'join;
            }
            code => bail!("JoinGroup error {code}"),
        }
        member_id = joined.member_id.to_string();
        let generation = joined.generation_id;
        let assignments = if joined.leader.as_str() == member_id {
            let ids: Vec<String> = joined
                .members
                .iter()
                .map(|m| m.member_id.to_string())
                .collect();
            range_assign(&ids, shared.partitions)
                .into_iter()
                .map(|(m, p)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(sb(&m))
                        .with_assignment(assignment(&p))
                })
                .collect()
        } else {
            Vec::new()
        };
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(sb(&group)))
            .with_generation_id(generation)
            .with_member_id(sb(&member_id))
            .with_assignments(assignments);
        let ResponseKind::SyncGroup(synced) = client.send(RequestKind::SyncGroup(sync), 3).await?
        else {
            bail!("SyncGroup: unexpected response kind");
        };
        match synced.error_code {
            NONE => {}
            REBALANCE_IN_PROGRESS => continue 'join,
            code => bail!("SyncGroup error {code}"),
        }
        let owned = parse_assignment(synced.assignment)?;
        shared.synced(index, generation, owned.clone());
        // Heartbeat until stable (or a new rebalance).
        while !shared.commit_phase.load(Ordering::SeqCst) {
            if shared.stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            let slept = Instant::now();
            while slept.elapsed() < heartbeat && !shared.commit_phase.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if shared.commit_phase.load(Ordering::SeqCst) {
                break;
            }
            let beat = HeartbeatRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_generation_id(generation)
                .with_member_id(sb(&member_id));
            let ResponseKind::Heartbeat(beat) =
                client.send(RequestKind::Heartbeat(beat), 3).await?
            else {
                bail!("Heartbeat: unexpected response kind");
            };
            match beat.error_code {
                NONE => {}
                REBALANCE_IN_PROGRESS => continue 'join,
                code => bail!("Heartbeat error {code}"),
            }
        }
        // Commit phase: this member's partitions, offsets counting up.
        let mut offset: i64 = 0;
        while !shared.stop.load(Ordering::SeqCst) {
            offset += 1;
            let commit = OffsetCommitRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_generation_id_or_member_epoch(generation)
                .with_member_id(sb(&member_id))
                .with_topics(vec![
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(sb(TOPIC)))
                        .with_partitions(
                            owned
                                .iter()
                                .map(|p| {
                                    OffsetCommitRequestPartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(offset)
                                })
                                .collect(),
                        ),
                ]);
            let ResponseKind::OffsetCommit(committed) =
                client.send(RequestKind::OffsetCommit(commit), 8).await?
            else {
                bail!("OffsetCommit: unexpected response kind");
            };
            let ok = committed
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .all(|p| p.error_code == NONE);
            if ok {
                shared.commits.fetch_add(1, Ordering::Relaxed);
            } else {
                shared.commit_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Leave, so that the next round's group is not sharing the coordinator with this
        // group's session expiry. The answer does not matter.
        let leave = LeaveGroupRequest::default()
            .with_group_id(GroupId(sb(&group)))
            .with_members(vec![
                MemberIdentity::default().with_member_id(sb(&member_id)),
            ]);
        let _ = client.send(RequestKind::LeaveGroup(leave), 3).await;
        return Ok(());
    }
}

/// User + system CPU seconds of `pid` (and its threads) so far.
fn cpu_seconds(pid: u32) -> f64 {
    // USER_HZ is fixed at 100 by the Linux ABI.
    const CLOCK_TICKS: f64 = 100.0;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the ")" of the command name: utime is field 14, stime 15.
            let rest = stat.rsplit_once(')')?.1.to_owned();
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / CLOCK_TICKS)
        })
        .unwrap_or(f64::NAN)
}

/// The median of `values` (sorted copy).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    }
}

/// Median figures of one implementation: stable ms, commits/s, CPU s per 10k commits.
fn summary(rounds: &[Round]) -> (f64, f64, f64) {
    let stable: Vec<f64> = rounds
        .iter()
        .map(|r| r.stable.as_secs_f64() * 1e3)
        .collect();
    let rate: Vec<f64> = rounds
        .iter()
        .map(|r| r.commits as f64 / r.elapsed.as_secs_f64())
        .collect();
    let cpu: Vec<f64> = rounds
        .iter()
        .map(|r| r.cpu_seconds / (r.commits.max(1) as f64) * 1e4)
        .collect();
    (median(&stable), median(&rate), median(&cpu))
}

fn print_table(results: &[(&str, Result<Vec<Round>>)]) {
    println!();
    println!(
        "| impl | stable ms (median) | generation | commits/s (median) | commit errors | CPU s / 10k commits |"
    );
    println!("|---|---|---|---|---|---|");
    let mut figures = Vec::new();
    for (name, result) in results {
        match result {
            Ok(rounds) => {
                let (stable, rate, cpu) = summary(rounds);
                let generations: Vec<String> =
                    rounds.iter().map(|r| r.generation.to_string()).collect();
                let errors: u64 = rounds.iter().map(|r| r.commit_errors).sum();
                println!(
                    "| {name} | {stable:.0} | {} | {rate:.0} | {errors} | {cpu:.2} |",
                    generations.join(",")
                );
                figures.push((*name, stable, rate, cpu));
            }
            Err(e) => println!("| {name} | error: {e:#} | | | | |"),
        }
    }
    let find = |n: &str| figures.iter().find(|f| f.0 == n);
    if let (Some(krust), Some(kafka)) = (find("krust"), find("kafka")) {
        println!();
        println!(
            "ratios krust/kafka: time to stable {:.2} (lower is better), commits/s {:.2} (higher is better), CPU per commit {:.2}",
            krust.1 / kafka.1,
            krust.2 / kafka.2,
            krust.3 / kafka.3
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_assignment_covers_every_partition_once() {
        let members: Vec<String> = (0..50).map(|i| format!("m-{i:02}")).collect();
        let assigned = range_assign(&members, 100);
        assert_eq!(assigned.len(), 50);
        let mut all: Vec<i32> = assigned.iter().flat_map(|(_, p)| p.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        assert!(assigned.iter().all(|(_, p)| p.len() == 2));
    }

    #[test]
    fn assignment_round_trips() {
        assert_eq!(
            parse_assignment(assignment(&[3, 4, 7])).expect("parses"),
            vec![3, 4, 7]
        );
        assert_eq!(
            parse_assignment(Bytes::new()).expect("parses"),
            Vec::<i32>::new()
        );
        assert!(parse_assignment(Bytes::from_static(b"\x00\x00\x00\x00\x00\x01")).is_err());
    }
}
