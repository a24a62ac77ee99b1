//! `metrics.port` serves Kafka's `raft-metrics` group over Prometheus HTTP: a single-voter
//! krust controller quorum is started with `metrics.port`, a few entries are appended through
//! the `--test-append-socket` hook, and `/metrics` is scraped with a plain HTTP/1.1 GET. The
//! scrape must show the leader state, a high watermark past the appends, a measured commit
//! latency and the append rate; another path answers 404. With three voters, the leader also
//! reports its election latency and the followers the records they fetched.

#[path = "quorum_support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use krust_testkit::free_ports;
use support::{Quorum, append_via};

const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP/1.1 GET on loopback; returns (status line, body).
fn get(port: u16, path: &str) -> Result<(String, String), String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of head in {answer:?}"))?;
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body.to_owned()))
}

/// `name{labels} value` lines → value by `name{labels}`.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let value = match value {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().ok()?,
            };
            Some((key.to_owned(), value))
        })
        .collect()
}

#[test]
fn single_voter_quorum_serves_raft_metrics_over_http() {
    let metrics_port = free_ports(1).expect("port")[0];
    let port_text = metrics_port.to_string();
    let mut quorum = Quorum::new(1, &[("metrics.port", port_text.as_str())]);
    quorum.start_all();
    let socket = quorum.node(1).socket();

    // The single voter elects itself; appends commit once it leads.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    for i in 0..5 {
        loop {
            match append_via(&socket, &format!("entry-{i}")) {
                Ok(offset) => {
                    last = Some(offset);
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("append {i}: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("append {i}: {e}\n{}", quorum.log_tails()),
            }
        }
    }
    let last = last.expect("appended");

    // The gauges are the driver's status as of its last loop turn, which may lag the commit
    // reply by a moment: scrape until the high watermark shows the last append.
    let hw_key = "kafka_server_raft_metrics_high_watermark";
    let deadline = Instant::now() + SCRAPE_TIMEOUT;
    let (body, values) = loop {
        let (status, body) = get(metrics_port, "/metrics").expect("scrape");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        let values = samples(&body);
        if values.get(hw_key).is_some_and(|hw| *hw > last as f64) || Instant::now() > deadline {
            break (body, values);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let value = |key: &str| -> f64 {
        *values
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing from the scrape:\n{body}"))
    };
    assert_eq!(
        value("kafka_server_raft_metrics_current_state{state=\"leader\"}"),
        1.0
    );
    assert_eq!(
        value("kafka_server_raft_metrics_current_state{state=\"follower\"}"),
        0.0
    );
    assert_eq!(value("kafka_server_raft_metrics_current_leader"), 1.0);
    let high_watermark = value("kafka_server_raft_metrics_high_watermark");
    assert!(
        high_watermark > last as f64,
        "high watermark {high_watermark} must be past the last append at {last}"
    );
    let commit_max = value("kafka_server_raft_metrics_commit_latency_max");
    assert!(commit_max > 0.0, "commit-latency-max {commit_max}\n{body}");
    let commit_avg = value("kafka_server_raft_metrics_commit_latency_avg");
    assert!(
        commit_avg > 0.0 && commit_avg <= commit_max,
        "commit-latency-avg {commit_avg}, max {commit_max}"
    );
    let append_rate = value("kafka_server_raft_metrics_append_records_rate");
    assert!(append_rate > 0.0, "append-records-rate {append_rate}");
    assert_eq!(value("kafka_server_raft_metrics_fetch_records_rate"), 0.0);
    assert_eq!(
        value("kafka_server_raft_metrics_number_unknown_voter_connections"),
        0.0
    );
    let idle = value("kafka_server_raft_metrics_poll_idle_ratio_avg");
    assert!((0.0..=1.0).contains(&idle), "poll-idle-ratio-avg {idle}");
    for family in [
        "current_state",
        "current_leader",
        "current_vote",
        "current_epoch",
        "high_watermark",
        "log_end_offset",
        "log_end_epoch",
        "number_unknown_voter_connections",
        "commit_latency_avg",
        "commit_latency_max",
        "election_latency_avg",
        "election_latency_max",
        "fetch_records_rate",
        "append_records_rate",
        "poll_idle_ratio_avg",
    ] {
        let name = format!("kafka_server_raft_metrics_{family}");
        assert!(
            body.contains(&format!("# TYPE {name} gauge\n")),
            "{name} has no TYPE line:\n{body}"
        );
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "{name} has no HELP line"
        );
    }

    let (status, _) = get(metrics_port, "/").expect("other path");
    assert!(status.starts_with("HTTP/1.1 404 "), "{status}");

    quorum.stop_all();
}

/// Scrapes `port` until `accept` holds on the samples or `timeout` passes; returns the last.
fn scrape_until(
    port: u16,
    timeout: Duration,
    accept: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> (String, BTreeMap<String, f64>) {
    let deadline = Instant::now() + timeout;
    loop {
        let (status, body) = get(port, "/metrics").expect("scrape");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        let values = samples(&body);
        if accept(&values) || Instant::now() > deadline {
            return (body, values);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Three voters, each with its own `metrics.port`: the elected leader reports the time its
/// election took (it stood as a candidate and needed votes), and followers report the records
/// they fetched from it.
#[test]
fn three_voters_report_election_latency_and_fetched_records() {
    let ports = free_ports(3).expect("ports");
    let mut quorum = Quorum::new(3, support::FAST_TIMEOUTS);
    for (node, port) in quorum.nodes.iter().zip(&ports) {
        let mut text = std::fs::read_to_string(node.properties()).expect("read properties");
        text.push_str(&format!("metrics.port={port}\n"));
        std::fs::write(node.properties(), text).expect("write properties");
    }
    quorum.start_all();
    let q = support::wait_for_quorum(&quorum.bootstrap(), Duration::from_secs(60), |q| {
        q.leader_id > 0 && q.high_watermark > 0
    })
    .unwrap_or_else(|| panic!("no leader\n{}", quorum.log_tails()));
    let leader = q.leader_id;
    let socket = quorum.node(leader).socket();
    let mut last = 0;
    for i in 0..10 {
        last = append_via(&socket, &format!("entry-{i}"))
            .unwrap_or_else(|e| panic!("append {i} to leader {leader}: {e}"));
    }

    for (node, port) in quorum.nodes.iter().zip(&ports) {
        let leads = node.id == leader;
        let (body, values) = scrape_until(*port, Duration::from_secs(20), |v| {
            let caught_up = v
                .get("kafka_server_raft_metrics_high_watermark")
                .is_some_and(|hw| *hw > last as f64);
            let state = if leads { "leader" } else { "follower" };
            let in_state = v
                .get(&format!(
                    "kafka_server_raft_metrics_current_state{{state=\"{state}\"}}"
                ))
                .is_some_and(|s| *s == 1.0);
            caught_up && in_state
        });
        let value = |key: &str| -> f64 {
            *values
                .get(key)
                .unwrap_or_else(|| panic!("node {}: {key} missing:\n{body}", node.id))
        };
        assert_eq!(
            value("kafka_server_raft_metrics_current_leader"),
            f64::from(leader),
            "node {}",
            node.id
        );
        if leads {
            assert_eq!(
                value("kafka_server_raft_metrics_current_state{state=\"leader\"}"),
                1.0
            );
            let election = value("kafka_server_raft_metrics_election_latency_max");
            assert!(
                election > 0.0,
                "leader's election-latency-max {election}\n{body}"
            );
            let append_rate = value("kafka_server_raft_metrics_append_records_rate");
            assert!(append_rate > 0.0, "append-records-rate {append_rate}");
            let commit = value("kafka_server_raft_metrics_commit_latency_max");
            assert!(commit > 0.0, "commit-latency-max {commit}");
        } else {
            assert_eq!(
                value("kafka_server_raft_metrics_current_state{state=\"follower\"}"),
                1.0,
                "node {}\n{body}",
                node.id
            );
            let fetched = value("kafka_server_raft_metrics_fetch_records_rate");
            assert!(
                fetched > 0.0,
                "node {} fetch-records-rate {fetched}",
                node.id
            );
        }
    }

    quorum.stop_all();
}
