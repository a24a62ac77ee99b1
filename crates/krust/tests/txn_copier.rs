//! Kafka's own exactly-once check (issue 13 acceptance): `org.apache.kafka.tools.
//! TransactionalMessageCopier` from Kafka 3.9's tools jar copies a topic of numbered records
//! inside transactions (100 records each, a third aborted at random, the consumer's offsets
//! sent to each transaction) while the test SIGKILLs, in turn, the copier's transaction
//! coordinator and the leader of the output partition, and starts each again: 5 rounds, each
//! while the copier still has records to copy. The copier is held (SIGSTOP) when it has
//! committed 1/6, 2/6, … of the records until that round's node is dead, then goes on while
//! the node restarts, so the rounds land mid-copy however fast the cluster copies. Then
//! Kafka's console consumer with `isolation.level=read_committed` must see every input record
//! exactly once in the output topic. The same run goes against 3 combined krust nodes (in
//! CI) and 3 combined Apache Kafka 3.9 nodes (the oracle, on demand: `cargo test -p krust
//! --test txn_copier -- --ignored`; it takes 150 s of CI's hour). Both passed on 2026-12-03,
//! run side by side: krust in 71 s, Kafka in 139 s.
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest, ResponseKind, TopicName};
use krust_net::{Client, ClientConfig};
use krust_testkit::{BrokerUnderTest, KafkaDist, class};

const COPIER: &str = "org.apache.kafka.tools.TransactionalMessageCopier";
const VERIFIABLE_PRODUCER: &str = "org.apache.kafka.tools.VerifiableProducer";
const INPUT: &str = "copier-in";
const OUTPUT: &str = "copier-out";
const TRANSACTIONAL_ID: &str = "copier-1";
const RECORDS: usize = 30_000;
const ROUNDS: usize = 5;
const COPY_TIMEOUT: Duration = Duration::from_secs(300);
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// The leader of `OUTPUT`-0 and the coordinator of `TRANSACTIONAL_ID`, as the cluster names
/// them now (`None` while it cannot say).
fn victims(bootstrap: &str) -> (Option<i32>, Option<i32>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for address in bootstrap.split(',') {
            let client = Client::new(
                address.to_string(),
                ClientConfig {
                    client_id: "txn-copier-test".to_owned(),
                    request_timeout: Duration::from_secs(5),
                    ..ClientConfig::default()
                },
            );
            let metadata = MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(OUTPUT.into()))),
            ]));
            let leader = match client.send(metadata, 12).await {
                Ok(ResponseKind::Metadata(r)) => r
                    .topics
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map(|p| p.leader_id.0)
                    .filter(|&l| l >= 0),
                _ => continue,
            };
            let find = FindCoordinatorRequest::default()
                .with_key(TRANSACTIONAL_ID.into())
                .with_key_type(1);
            let coordinator = match client.send(find, 3).await {
                Ok(ResponseKind::FindCoordinator(r)) if r.error_code == 0 => Some(r.node_id.0),
                _ => None,
            };
            return (leader, coordinator);
        }
        (None, None)
    })
}

/// Where the copier is held for each kill round: once it has committed 1/6, 2/6, … of the
/// records. Holding it there (SIGSTOP) until the round's node is dead makes every round hit
/// it while it still has records to copy, however fast the cluster is.
fn gates() -> Vec<u64> {
    (1..=ROUNDS)
        .map(|round| u64::try_from(round * RECORDS / (ROUNDS + 1)).unwrap_or(u64::MAX))
        .collect()
}

/// What the copier's status lines said so far, and the gate it is held at.
#[derive(Default)]
struct Progress {
    /// Records committed, from the last `"totalProcessed"` it printed.
    committed: u64,
    /// Stop the copier once `committed` reaches this.
    gate: Option<u64>,
    /// Where it was stopped, if it is.
    stopped_at: Option<u64>,
    /// Its standard output ended (it exited).
    ended: bool,
}

/// Kafka's `TransactionalMessageCopier`, running, with its status lines read as they come.
struct Copier {
    child: Child,
    progress: Arc<(Mutex<Progress>, Condvar)>,
    stdout: Option<JoinHandle<String>>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
}

fn send_signal(pid: u32, signal: &str) {
    // A copier that has just exited cannot be signalled; its exit is reported by `finish`.
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status();
}

/// `"totalProcessed":N` in one of the copier's JSON status lines.
fn total_processed(line: &str) -> Option<u64> {
    let rest = &line[line.find("\"totalProcessed\":")? + "\"totalProcessed\":".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Copier {
    fn start(dist: &KafkaDist, args: &[&str]) -> Copier {
        let mut child = Command::new(dist.java())
            .args(dist.jvm_args(COPIER, false))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start TransactionalMessageCopier");
        let pid = child.id();
        let progress = Arc::new((
            Mutex::new(Progress {
                gate: gates().first().copied(),
                ..Progress::default()
            }),
            Condvar::new(),
        ));
        let stdout = {
            let pipe = child.stdout.take().expect("copier stdout");
            let progress = Arc::clone(&progress);
            std::thread::spawn(move || {
                let mut all = String::new();
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(committed) = total_processed(&line) {
                        let (lock, changed) = &*progress;
                        let mut p = lock.lock().expect("progress lock");
                        p.committed = committed;
                        if p.stopped_at.is_none() && p.gate.is_some_and(|g| committed >= g) {
                            send_signal(pid, "STOP");
                            p.stopped_at = Some(committed);
                            changed.notify_all();
                        }
                    }
                    all.push_str(&line);
                    all.push('\n');
                }
                let (lock, changed) = &*progress;
                lock.lock().expect("progress lock").ended = true;
                changed.notify_all();
                all
            })
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader = {
            let pipe = child.stderr.take().expect("copier stderr");
            let stderr = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut s = stderr.lock().expect("stderr lock");
                    s.push_str(&line);
                    s.push('\n');
                }
            })
        };
        Copier {
            child,
            progress,
            stdout: Some(stdout),
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// Waits until the copier is stopped at its gate; the records it had committed then.
    fn wait_at_gate(&self) -> Result<u64, String> {
        let (lock, changed) = &*self.progress;
        let deadline = Instant::now() + COPY_TIMEOUT;
        let mut p = lock.lock().expect("progress lock");
        loop {
            if let Some(at) = p.stopped_at {
                return Ok(at);
            }
            if p.ended {
                return Err(format!(
                    "the copier ended at {} records, before its gate at {:?}",
                    p.committed, p.gate
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "the copier did not reach its gate at {:?} in {COPY_TIMEOUT:?} (at {})",
                    p.gate, p.committed
                ));
            }
            p = changed.wait_timeout(p, left).expect("progress lock").0;
        }
    }

    /// Lets a stopped copier go on, up to `next_gate` (to the end without one).
    fn resume(&self, next_gate: Option<u64>) {
        let (lock, _) = &*self.progress;
        let mut p = lock.lock().expect("progress lock");
        p.gate = next_gate;
        p.stopped_at = None;
        send_signal(self.child.id(), "CONT");
    }

    fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().expect("stderr lock");
        s[s.len().saturating_sub(3000)..].to_string()
    }

    /// Waits for the copier to exit (SIGKILLed after `timeout`): its status (`None` if killed),
    /// stdout and stderr.
    fn finish(&mut self, timeout: Duration) -> (Option<ExitStatus>, String, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        let stdout = self
            .stdout
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if let Some(h) = self.stderr_reader.take() {
            let _ = h.join();
        }
        let stderr = self.stderr.lock().expect("stderr lock").clone();
        (status, stdout, stderr)
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One whole run against `broker`; returns the output values read back read_committed.
fn copy_under_kills(dist: &KafkaDist, broker: &mut BrokerUnderTest) -> Vec<String> {
    let bootstrap = broker.bootstrap();
    for topic in [INPUT, OUTPUT] {
        let out = dist
            .run_tool(
                class::TOPIC_COMMAND,
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--create",
                    "--topic",
                    topic,
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "3",
                ],
                TOOL_TIMEOUT,
            )
            .expect("kafka-topics --create");
        assert!(out.success(), "{} create {topic}: {out:?}", broker.kind());
    }
    let records = RECORDS.to_string();
    let produced = dist
        .run_tool(
            VERIFIABLE_PRODUCER,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--topic",
                INPUT,
                "--max-messages",
                &records,
                "--acks",
                "-1",
            ],
            TOOL_TIMEOUT,
        )
        .expect("VerifiableProducer");
    let acked = produced.stdout.matches("\"producer_send_success\"").count();
    assert_eq!(
        acked,
        RECORDS,
        "{}: input written: {produced:?}",
        broker.kind()
    );
    let mut copier = Copier::start(
        dist,
        &[
            "--broker-list",
            &bootstrap,
            "--transactional-id",
            TRANSACTIONAL_ID,
            "--consumer-group",
            "copier-group",
            "--input-topic",
            INPUT,
            "--input-partition",
            "0",
            "--output-topic",
            OUTPUT,
            "--max-messages",
            &records,
            "--transaction-size",
            "100",
            "--transaction-timeout",
            "30000",
            "--enable-random-aborts",
        ],
    );
    let mut killed = Vec::new();
    for round in 0..ROUNDS {
        let gate = copier.wait_at_gate().unwrap_or_else(|e| {
            panic!(
                "{}: round {round}: {e}\nstderr (tail):\n{}\n{}",
                broker.kind(),
                copier.stderr_tail(),
                broker.log_tail(40)
            )
        });
        let (leader, coordinator) = victims(&bootstrap);
        let wanted = if round % 2 == 0 { coordinator } else { leader };
        let victim = wanted
            .or(coordinator)
            .or(leader)
            .unwrap_or(i32::try_from(round % 3).unwrap_or(0) + 1);
        broker
            .kill_node(victim)
            .unwrap_or_else(|e| panic!("{}: kill node {victim}: {e}", broker.kind()));
        // The copier goes on while the node is down, up to the next gate.
        copier.resume(gates().get(round + 1).copied());
        broker
            .restart_node(victim)
            .unwrap_or_else(|e| panic!("{}: restart node {victim}: {e}", broker.kind()));
        eprintln!(
            "{}: round {round}: SIGKILLed node {victim} with the copier at {gate} of {RECORDS} \
             records",
            broker.kind()
        );
        killed.push(victim);
    }
    let (status, stdout, stderr) = copier.finish(COPY_TIMEOUT);
    let tail = |s: &str| s[s.len().saturating_sub(3000)..].to_string();
    assert!(
        status.is_some_and(|s| s.success()),
        "{}: TransactionalMessageCopier exited with {status:?}\nstdout (tail):\n{}\nstderr \
         (tail):\n{}\n{}",
        broker.kind(),
        tail(&stdout),
        tail(&stderr),
        broker.log_tail(40)
    );
    eprintln!(
        "{}: SIGKILLed and restarted nodes {killed:?} while copying",
        broker.kind()
    );
    let consumed = dist
        .run_tool(
            class::CONSOLE_CONSUMER,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--topic",
                OUTPUT,
                "--from-beginning",
                "--isolation-level",
                "read_committed",
                "--max-messages",
                &records,
                "--timeout-ms",
                "60000",
            ],
            TOOL_TIMEOUT,
        )
        .expect("kafka-console-consumer");
    consumed.stdout.lines().map(str::to_owned).collect()
}

/// Values that are not exactly one of each `0..RECORDS`: (value, times seen).
fn not_exactly_once(values: &[String]) -> Vec<(String, usize)> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for v in values {
        *seen.entry(v.clone()).or_default() += 1;
    }
    let mut wrong: Vec<(String, usize)> = (0..RECORDS)
        .map(|i| i.to_string())
        .filter(|v| seen.get(v) != Some(&1))
        .map(|v| {
            let n = seen.get(&v).copied().unwrap_or(0);
            (v, n)
        })
        .collect();
    wrong.extend(
        seen.into_iter()
            .filter(|(v, _)| v.parse::<usize>().map_or(true, |n| n >= RECORDS)),
    );
    wrong
}

fn check(dist: &KafkaDist, mut broker: BrokerUnderTest) {
    let started = Instant::now();
    let values = copy_under_kills(dist, &mut broker);
    let wrong = not_exactly_once(&values);
    eprintln!(
        "{}: {} records read back, {} not exactly once ({:.0?})",
        broker.kind(),
        values.len(),
        wrong.len(),
        started.elapsed()
    );
    assert!(
        wrong.is_empty(),
        "{}: not exactly once: {:?}\n{}",
        broker.kind(),
        &wrong[..wrong.len().min(20)],
        broker.log_tail(40)
    );
}

#[test]
#[ignore = "oracle run against 3 Apache Kafka 3.9 nodes (150 s on 2 cores); on demand with `-- --ignored`, kept out of CI for its time"]
fn transactional_message_copier_is_exactly_once_across_kills_on_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    check(
        &dist,
        BrokerUnderTest::kafka_cluster(&dist, &[]).expect("Kafka 3.9 cluster"),
    );
}

#[test]
fn transactional_message_copier_is_exactly_once_across_kills_on_krust() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    check(
        &dist,
        BrokerUnderTest::krust_cluster(&dist, env!("CARGO_BIN_EXE_krust"), &[])
            .expect("krust cluster"),
    );
}
