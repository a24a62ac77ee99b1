//! A Kafka Streams 3.9 application with `processing.guarantee=exactly_once_v2` (issue 13
//! acceptance): `scripts/kafka-streams/StreamsEosApp.java` (built by
//! `scripts/fetch-kafka-streams.sh` against `org.apache.kafka:kafka-streams` from Maven Central)
//! keeps a running count and sum per key in a RocksDB store backed by a compacted changelog and
//! writes every update to an output topic. The test feeds it numbered records in four batches;
//! before each of the last three it SIGKILLs a broker (first the application's group
//! coordinator, then the others in turn), writes the batch while that broker is down, and
//! starts the broker again. A read_committed consumer must then read exactly the output an
//! exactly-once run gives: per key, one update per input value in order — no duplicate, no gap,
//! no aborted update. The same run goes against 3 combined krust nodes (in CI) and 3 combined
//! Apache Kafka 3.9 nodes (the oracle, on demand: `cargo test -p krust --test streams_eos --
//! --ignored`, kept out of CI for its time); both are checked against the same expected output.
//! Both passed on 2026-12-02 (krust in 69–85 s over 8 runs, Kafka in 65 s).
//!
//! Real processes only, 127.0.0.1, every wait bounded, everything killed on drop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{FindCoordinatorRequest, ResponseKind};
use krust_net::{Client, ClientConfig};
use krust_testkit::{
    BrokerUnderTest, KafkaDist, LogMark, ManagedProcess, ProcessSpec, ToolOutput, class,
    run_binary, workspace_root,
};

const APP_CLASS: &str = "StreamsEosApp";
const APPLICATION_ID: &str = "streams-eos-app";
const INPUT: &str = "streams-in";
const OUTPUT: &str = "streams-out";
const KEYS: usize = 40;
const BATCH: usize = 2_000;
const BATCHES: usize = 4;
const RECORDS: usize = BATCH * BATCHES;
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const FETCH_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(180);

/// Kafka Streams' jars and the compiled application: the classpath to run it with.
fn streams_classpath(dist: &KafkaDist) -> String {
    let script = workspace_root().join("scripts/fetch-kafka-streams.sh");
    let out = run_binary("bash", &[script.display().to_string()], None, FETCH_TIMEOUT)
        .expect("scripts/fetch-kafka-streams.sh");
    assert!(out.success(), "scripts/fetch-kafka-streams.sh: {out:?}");
    let classes = PathBuf::from(out.stdout.trim());
    let libs = classes
        .parent()
        .expect("the classes folder sits in the cache folder")
        .join("libs");
    // Kafka's own libs last: they add the slf4j binding and log4j the harness configures.
    format!(
        "{}:{}/*:{}",
        classes.display(),
        libs.display(),
        dist.classpath()
    )
}

/// The input's line for record `i`: key `i % KEYS`, value `i`, tab-separated.
fn input_lines(records: std::ops::Range<usize>) -> String {
    records.map(|i| format!("{}\t{i}\n", i % KEYS)).collect()
}

/// What an exactly-once run writes for `records` input records: per key, `count:sum:value`
/// after each of its values in order.
fn expected_output(records: usize) -> BTreeMap<String, Vec<String>> {
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut totals = vec![(0usize, 0usize); KEYS];
    for i in 0..records {
        let key = i % KEYS;
        let (count, sum) = &mut totals[key];
        *count += 1;
        *sum += i;
        expected
            .entry(key.to_string())
            .or_default()
            .push(format!("{count}:{sum}:{i}"));
    }
    expected
}

/// The broker coordinating `group`, as the cluster names it now (`None` while it cannot say).
fn group_coordinator(bootstrap: &str, group: &str) -> Option<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for address in bootstrap.split(',') {
            let client = Client::new(
                address.to_string(),
                ClientConfig {
                    client_id: "streams-eos-test".to_owned(),
                    request_timeout: Duration::from_secs(5),
                    ..ClientConfig::default()
                },
            );
            let find = FindCoordinatorRequest::default().with_key(group.to_owned().into());
            if let Ok(ResponseKind::FindCoordinator(r)) = client.send(find, 3).await
                && r.error_code == 0
            {
                return Some(r.node_id.0);
            }
        }
        None
    })
}

fn produce(dist: &KafkaDist, broker: &BrokerUnderTest, records: std::ops::Range<usize>) {
    let out = dist
        .console_produce(
            &broker.bootstrap(),
            INPUT,
            &input_lines(records.clone()),
            &[("parse.key", "true"), ("key.separator", "\t")],
            // The console producer gives up after 3 retries by default and still exits 0: a
            // batch sent to the killed broker would be dropped before leadership moves (after
            // `broker.session.timeout.ms`, on Kafka as on krust).
            &[("retries", "2147483647"), ("delivery.timeout.ms", "120000")],
        )
        .unwrap_or_else(|e| panic!("{}: producing {records:?}: {e}", broker.kind()));
    assert!(
        out.success() && !out.stderr.contains("Error when sending message"),
        "{}: console producer: {out:?}",
        broker.kind()
    );
}

/// The output topic read_committed from the beginning by Kafka's console consumer, one
/// `key\tvalue` line per record: `max` records, or all there are once none came for `idle_ms`.
fn read_output(dist: &KafkaDist, bootstrap: &str, max: Option<usize>, idle_ms: u64) -> ToolOutput {
    let mut args = vec![
        "--bootstrap-server".to_owned(),
        bootstrap.to_owned(),
        "--topic".to_owned(),
        OUTPUT.to_owned(),
        "--from-beginning".to_owned(),
        "--isolation-level".to_owned(),
        "read_committed".to_owned(),
        "--property".to_owned(),
        "print.key=true".to_owned(),
        "--property".to_owned(),
        "key.separator=\t".to_owned(),
        "--timeout-ms".to_owned(),
        idle_ms.to_string(),
    ];
    if let Some(max) = max {
        args.extend(["--max-messages".to_owned(), max.to_string()]);
    }
    dist.run_tool(
        class::CONSOLE_CONSUMER,
        &args,
        TOOL_TIMEOUT + Duration::from_millis(idle_ms),
    )
    .expect("kafka-console-consumer")
}

/// Waits until the application has aggregated at least `at_least` records (counting re-runs
/// of aborted work, so this is progress, not the result).
fn wait_processed(app: &mut ManagedProcess, broker: &BrokerUnderTest, at_least: usize) {
    // Earlier lines count too: the whole log (the application runs once).
    app.wait_for_log_matching(
        LogMark(0),
        &format!("PROCESSED >= {at_least}"),
        PROGRESS_TIMEOUT,
        |line| {
            line.strip_prefix("PROCESSED ")
                .and_then(|n| n.trim().parse::<usize>().ok())
                .is_some_and(|n| n >= at_least)
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{}: the Streams application did not get to {at_least} records: {e}\n{}\n{}",
            broker.kind(),
            app.log_tail(60),
            broker.log_tail(40)
        )
    });
}

/// One whole run against `broker`; returns the output read back read_committed, per key.
fn run_under_kills(
    dist: &KafkaDist,
    broker: &mut BrokerUnderTest,
) -> BTreeMap<String, Vec<String>> {
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
                    "3",
                    "--replication-factor",
                    "3",
                ],
                TOOL_TIMEOUT,
            )
            .expect("kafka-topics --create");
        assert!(out.success(), "{} create {topic}: {out:?}", broker.kind());
    }
    produce(dist, broker, 0..BATCH);

    let classpath = streams_classpath(dist);
    let work = tempfile::tempdir().expect("tempdir");
    let state_dir = work.path().join("state");
    let spec = ProcessSpec::new(
        "kafka-streams-app",
        dist.java(),
        work.path().join("streams-app.log"),
    )
    .args(dist.jvm_args_with_classpath(APP_CLASS, false, &classpath))
    .args([
        bootstrap.as_str(),
        APPLICATION_ID,
        INPUT,
        OUTPUT,
        &state_dir.display().to_string(),
    ]);
    let mut app = ManagedProcess::start(spec).expect("start the Streams application");
    wait_processed(&mut app, broker, BATCH / 2);

    let mut killed = Vec::new();
    for round in 1..BATCHES {
        let victim = if round == 1 {
            group_coordinator(&bootstrap, APPLICATION_ID).unwrap_or(1)
        } else {
            killed.last().map_or(1, |last: &i32| last % 3 + 1)
        };
        broker
            .kill_node(victim)
            .unwrap_or_else(|e| panic!("{}: SIGKILL node {victim}: {e}", broker.kind()));
        killed.push(victim);
        produce(dist, broker, round * BATCH..(round + 1) * BATCH);
        broker
            .restart_node(victim)
            .unwrap_or_else(|e| panic!("{}: restart node {victim}: {e}", broker.kind()));
        wait_processed(&mut app, broker, (round + 1) * BATCH - BATCH / 2);
    }
    eprintln!(
        "{}: SIGKILLed nodes {killed:?}, each while a batch was written and processed",
        broker.kind()
    );

    // Every update committed, then the application closed, then everything read back (extra
    // records, e.g. a duplicate update, would show past the expected count).
    let all = read_output(dist, &bootstrap, Some(RECORDS), 120_000);
    if all.stdout.lines().count() < RECORDS {
        panic!(
            "{}: the output never held {RECORDS} committed updates ({} read)\nconsumer stderr:\n{}\n{}\n{}",
            broker.kind(),
            all.stdout.lines().count(),
            all.stderr,
            app.log_tail(60),
            broker.log_tail(40)
        );
    }
    app.terminate(Duration::from_secs(60))
        .expect("the Streams application closes on SIGTERM");
    let read = read_output(dist, &bootstrap, None, 15_000).stdout;
    let mut output: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in read.lines() {
        let (key, value) = line.split_once('\t').unwrap_or(("<no key>", line));
        output
            .entry(key.to_owned())
            .or_default()
            .push(value.to_owned());
    }
    output
}

/// The keys whose updates differ from `expected`: (key, what was read, what was expected),
/// both cut to where they first differ.
fn differences(
    output: &BTreeMap<String, Vec<String>>,
    expected: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, Vec<String>, Vec<String>)> {
    let empty = Vec::new();
    let keys: std::collections::BTreeSet<&String> = output.keys().chain(expected.keys()).collect();
    keys.into_iter()
        .filter_map(|key| {
            let got = output.get(key).unwrap_or(&empty);
            let want = expected.get(key).unwrap_or(&empty);
            let first = got.iter().zip(want).take_while(|(a, b)| a == b).count();
            (got.len() != want.len() || first < got.len()).then(|| {
                let cut = |v: &[String]| v[first.min(v.len())..].iter().take(5).cloned().collect();
                (key.clone(), cut(got), cut(want))
            })
        })
        .collect()
}

fn check(dist: &KafkaDist, mut broker: BrokerUnderTest) {
    let started = Instant::now();
    let output = run_under_kills(dist, &mut broker);
    let expected = expected_output(RECORDS);
    let wrong = differences(&output, &expected);
    eprintln!(
        "{}: {} updates read back for {} keys, {} keys differ ({:.0?})",
        broker.kind(),
        output.values().map(Vec::len).sum::<usize>(),
        output.len(),
        wrong.len(),
        started.elapsed()
    );
    assert!(
        wrong.is_empty(),
        "{}: not the exactly-once output (key, read from where it differs, expected): {:?}",
        broker.kind(),
        &wrong[..wrong.len().min(10)]
    );
}

#[test]
#[ignore = "oracle run against 3 Apache Kafka 3.9 nodes; on demand with `-- --ignored`, kept out of CI for its time"]
fn kafka_streams_exactly_once_v2_across_broker_kills_on_kafka() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    check(
        &dist,
        BrokerUnderTest::kafka_cluster(&dist, &[]).expect("Kafka 3.9 cluster"),
    );
}

#[test]
fn kafka_streams_exactly_once_v2_across_broker_kills_on_krust() {
    let dist = KafkaDist::locate().expect("Kafka 3.9 jars (scripts/fetch-kafka.sh)");
    check(
        &dist,
        BrokerUnderTest::krust_cluster(&dist, env!("CARGO_BIN_EXE_krust"), &[])
            .expect("krust cluster"),
    );
}

#[test]
fn the_expected_output_is_per_key_running_totals() {
    let expected = expected_output(2 * KEYS + 1);
    assert_eq!(
        expected["0"],
        vec![
            "1:0:0".to_owned(),
            format!("2:{}:{}", KEYS, KEYS),
            format!("3:{}:{}", 3 * KEYS, 2 * KEYS)
        ]
    );
    assert_eq!(expected["1"].len(), 2);
    let mut output = expected.clone();
    output.get_mut("1").expect("key 1").push("3:1:1".to_owned());
    assert_eq!(differences(&output, &expected).len(), 1);
    assert!(differences(&expected, &expected).is_empty());
}
