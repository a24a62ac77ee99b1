//! `metrics.port` serves Kafka's `raft-metrics` group over Prometheus HTTP: a single-voter
//! krust controller quorum is started with `metrics.port`, a few entries are appended through
//! the `--test-append-socket` hook, and `/metrics` is scraped with a plain HTTP/1.1 GET. The
//! scrape must show the leader state, a high watermark past the appends, a measured commit
//! latency and the append rate; another path answers 404.

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
