//! An idempotent `acks=all` producer that keeps producing numbered records in the background
//! and reports every record the broker acknowledged, for "no acknowledged record lost" checks
//! while a test kills and restarts brokers.
//!
//! It is Kafka 3.9's own Java `KafkaProducer`, driven by a few lines of Java run through the
//! JDK's single-file source launcher (`java -cp <libs>/* AckedProducer.java …`). Kafka's
//! `VerifiableProducer` would print the same facts, but it forces `retries=0`, which Kafka's
//! producer refuses together with `enable.idempotence=true` ("Must set retries to non-zero when
//! using the idempotent producer"); an idempotent producer that retries is exactly what the
//! crash tests need (retries across a leader change must not duplicate records).
//!
//! Record `i` (0, 1, 2, …) has the value `i` (decimal, no key) and goes to partition 0 of
//! `topics[i % topics.len()]`. Its completion callback prints one line to the log:
//!
//! ```text
//! acked <topic> <partition> <offset> <value>
//! failed <topic> <value> <exception class>: <message>
//! ```
//!
//! [`AckedProducer::stop`] creates a stop file; the program then stops sending, flushes (every
//! outstanding record is acknowledged or failed), closes the producer and prints
//! `closed sent=<n>`.
//!
//! With a watch interval it also describes the topics with Kafka's `Admin` client that often
//! (one JVM for the whole test instead of a `kafka-topics --describe` per probe) and prints
//! `partition <topic> <partition> <leader or -1> <isr,…> <replicas,…>`, also after the producer
//! closed, until the process is dropped: [`AckedProducer::wait_partition`] waits on those.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::dist::KafkaDist;
use crate::error::{HarnessError, Result};
use crate::process::{LOG_TAIL_LINES, LogMark, ManagedProcess, ProcessSpec};

/// The Java source of the producer (see the module doc for its output).
const SOURCE: &str = r#"
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringSerializer;

public class AckedProducer {
    static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
        }
    }

    static String ids(java.util.List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String[] topics = args[1].split(",");
        Path stop = Paths.get(args[2]);
        Path exit = Paths.get(args[3]);
        long intervalMs = Long.parseLong(args[4]);
        long max = Long.parseLong(args[5]);
        long watchMs = Long.parseLong(args[6]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        for (int i = 7; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        if (watchMs > 0) {
            Thread watcher = new Thread(() -> {
                Properties adminProps = new Properties();
                adminProps.put("bootstrap.servers", bootstrap);
                adminProps.put("request.timeout.ms", "5000");
                adminProps.put("default.api.timeout.ms", "10000");
                try (Admin admin = Admin.create(adminProps)) {
                    while (true) {
                        try {
                            Map<String, TopicDescription> described = admin
                                .describeTopics(Arrays.asList(topics)).allTopicNames()
                                .get(10, TimeUnit.SECONDS);
                            for (TopicDescription topic : described.values()) {
                                for (TopicPartitionInfo p : topic.partitions()) {
                                    Node leader = p.leader();
                                    say("partition " + topic.name() + " " + p.partition() + " "
                                        + (leader == null ? -1 : leader.id()) + " "
                                        + ids(p.isr()) + " " + ids(p.replicas()));
                                }
                            }
                        } catch (Exception e) {
                            say("watch-error " + e);
                        }
                        Thread.sleep(watchMs);
                    }
                } catch (InterruptedException e) {
                    // exiting
                }
            });
            watcher.setDaemon(true);
            watcher.start();
        }
        long sent = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            say("acked-producer started");
            while (sent < max && !Files.exists(stop)) {
                final String topic = topics[(int) (sent % topics.length)];
                final String value = Long.toString(sent);
                producer.send(new ProducerRecord<>(topic, 0, null, value), (metadata, error) -> {
                    if (error == null) {
                        say("acked " + topic + " " + metadata.partition() + " "
                            + metadata.offset() + " " + value);
                    } else {
                        say("failed " + topic + " " + value + " "
                            + error.getClass().getName() + ": " + error.getMessage());
                    }
                });
                sent++;
                if (intervalMs > 0) {
                    Thread.sleep(intervalMs);
                }
            }
            producer.flush();
        }
        say("closed sent=" + sent);
        // Keep watching the partitions until told to exit (or killed).
        while (!Files.exists(exit)) {
            Thread.sleep(100);
        }
    }
}
"#;

/// One acknowledged record: the broker's answer to the producer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckedRecord {
    /// The topic it went to.
    pub topic: String,
    /// Its partition (always 0 here).
    pub partition: i32,
    /// The offset the leader assigned.
    pub offset: i64,
    /// The record's number, which is also its value.
    pub value: u64,
}

/// A partition as Kafka's `Admin.describeTopics` saw it (a `partition …` line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionState {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The leader's node id, `None` without a leader.
    pub leader: Option<i32>,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
    /// The assigned replicas, preferred leader first.
    pub replicas: Vec<i32>,
}

impl PartitionState {
    /// Whether every assigned replica is in the ISR and there is a leader.
    pub fn fully_in_sync(&self) -> bool {
        self.leader.is_some()
            && self.isr.len() == self.replicas.len()
            && self.replicas.iter().all(|r| self.isr.contains(r))
    }
}

/// What the producer reported so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerReport {
    /// Acknowledged records, in the order the callbacks ran.
    pub acked: Vec<AckedRecord>,
    /// `(topic, value, error)` of records that failed (not acknowledged; they may or may not be
    /// in the log).
    pub failed: Vec<(String, u64, String)>,
    /// `closed sent=<n>`: the producer flushed and closed after sending `n` records.
    pub closed_sent: Option<u64>,
}

impl ProducerReport {
    /// The acknowledged records of `topic`, in the order they were acknowledged.
    pub fn acked_in(&self, topic: &str) -> Vec<&AckedRecord> {
        self.acked.iter().filter(|r| r.topic == topic).collect()
    }
}

/// A running [`KafkaDist::start_acked_producer`]; SIGKILLed on drop.
#[derive(Debug)]
pub struct AckedProducer {
    process: ManagedProcess,
    stop_file: PathBuf,
    // Declared last: removed after the process is killed.
    _dir: tempfile::TempDir,
}

impl KafkaDist {
    /// Starts the background producer (see the module doc): an idempotent `acks=all` Kafka
    /// producer sending record `i` to `topics[i % topics.len()]`, partition 0, every
    /// `interval_ms` ms, at most `max_records`; `watch` > 0 describes the topics that often;
    /// `props` are extra producer configs (`k`, `v`), e.g. `delivery.timeout.ms`. Returns once
    /// the producer is constructed.
    ///
    /// # Errors
    /// `Invalid` without topics; `Io`, `Spawn`; `Exited`/`Timeout` if it does not start within
    /// `start_timeout` (the JDK compiles the source first).
    #[allow(clippy::too_many_arguments)] // a test tool's knobs, each documented above
    pub fn start_acked_producer(
        &self,
        bootstrap: &str,
        topics: &[&str],
        interval_ms: u64,
        max_records: u64,
        watch: Duration,
        props: &[(&str, &str)],
        start_timeout: Duration,
    ) -> Result<AckedProducer> {
        if topics.is_empty() || topics.iter().any(|t| t.is_empty() || t.contains(',')) {
            return Err(HarnessError::Invalid(format!(
                "acked producer: bad topic list {topics:?}"
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("krust-acked-producer-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for the acked producer", e))?;
        let source = dir.path().join("AckedProducer.java");
        std::fs::write(&source, SOURCE)
            .map_err(|e| HarnessError::io(format!("writing {}", source.display()), e))?;
        let stop_file = dir.path().join("stop");
        // The single-file source launcher takes the `.java` path where the main class would go.
        let mut spec = ProcessSpec::new(
            "acked producer",
            self.java(),
            dir.path().join("producer.log"),
        )
        .args(self.jvm_args(&source.display().to_string(), false))
        .arg(bootstrap)
        .arg(topics.join(","))
        .arg(&stop_file)
        .arg(dir.path().join("exit"))
        .arg(interval_ms.to_string())
        // Java's `long` is signed.
        .arg(max_records.min(i64::MAX.unsigned_abs()).to_string())
        .arg(watch.as_millis().to_string());
        for (key, value) in props {
            spec = spec.arg(format!("{key}={value}"));
        }
        let mut process = ManagedProcess::start(spec)?;
        process.wait_for_log("acked-producer started", start_timeout)?;
        Ok(AckedProducer {
            process,
            stop_file,
            _dir: dir,
        })
    }
}

impl AckedProducer {
    /// Everything reported so far (parsed from the log).
    pub fn report(&self) -> ProducerReport {
        parse_report(&self.process.log_since_start())
    }

    /// A point in the output: [`AckedProducer::wait_partition`] looks only at lines after it.
    pub fn mark(&self) -> LogMark {
        self.process.log_mark()
    }

    /// Waits until at least `count` records have been acknowledged in total.
    ///
    /// # Errors
    /// `Invalid` if the producer died, `Timeout` (quoting its log) otherwise.
    pub fn wait_acked(&mut self, count: usize, timeout: Duration) -> Result<ProducerReport> {
        let deadline = Instant::now() + timeout;
        loop {
            let report = self.report();
            if report.acked.len() >= count {
                return Ok(report);
            }
            if !self.process.is_running()? {
                return Err(HarnessError::Invalid(format!(
                    "acked producer exited with {} acknowledged of {count} awaited:\n{}",
                    report.acked.len(),
                    self.process.log_tail(LOG_TAIL_LINES)
                )));
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("{count} acknowledged records (have {})", report.acked.len()),
                    waited: timeout,
                    log: self.process.log_path().to_path_buf(),
                    log_tail: self.process.log_tail(LOG_TAIL_LINES),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a `partition` line of `topic`/`partition` printed after `mark` for which
    /// `matches` holds (needs a watch interval), and returns it.
    ///
    /// # Errors
    /// `Exited` if the producer died, `Timeout` (quoting its log) otherwise.
    pub fn wait_partition(
        &mut self,
        mark: LogMark,
        topic: &str,
        partition: i32,
        timeout: Duration,
        mut matches: impl FnMut(&PartitionState) -> bool,
    ) -> Result<PartitionState> {
        let line = self.process.wait_for_log_matching(
            mark,
            &format!("a described state of {topic}-{partition} that fits"),
            timeout,
            |line| {
                parse_partition_line(line)
                    .is_some_and(|s| s.topic == topic && s.partition == partition && matches(&s))
            },
        )?;
        parse_partition_line(&line)
            .ok_or_else(|| HarnessError::Invalid(format!("unparsable partition line {line:?}")))
    }

    /// Stops sending and waits for the producer to flush and close (every record sent is then
    /// acknowledged or failed); returns the final report. The process keeps describing the
    /// topics until it is dropped.
    ///
    /// # Errors
    /// `Io` if the stop file cannot be written; `Exited`/`Timeout` if it does not close in time.
    pub fn stop(&mut self, timeout: Duration) -> Result<ProducerReport> {
        std::fs::write(&self.stop_file, b"")
            .map_err(|e| HarnessError::io(format!("writing {}", self.stop_file.display()), e))?;
        self.process.wait_for_log("closed sent=", timeout)?;
        Ok(self.report())
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}

fn parse_ids(text: &str) -> Option<Vec<i32>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(|id| id.parse().ok()).collect()
}

/// Parses a `partition <topic> <partition> <leader> <isr> <replicas>` line.
pub fn parse_partition_line(line: &str) -> Option<PartitionState> {
    let mut fields = line.split(' ');
    if fields.next()? != "partition" {
        return None;
    }
    let topic = fields.next()?.to_owned();
    let partition = fields.next()?.parse().ok()?;
    let leader: i32 = fields.next()?.parse().ok()?;
    // An empty list leaves an empty field between two spaces.
    let isr = parse_ids(fields.next()?)?;
    let replicas = parse_ids(fields.next()?)?;
    if fields.next().is_some() {
        return None;
    }
    Some(PartitionState {
        topic,
        partition,
        leader: (leader >= 0).then_some(leader),
        isr,
        replicas,
    })
}

/// Parses the producer's output lines (see the module doc); other lines (JVM or client
/// warnings) are skipped.
pub fn parse_report(log: &str) -> ProducerReport {
    let mut report = ProducerReport::default();
    for line in log.lines() {
        let mut fields = line.split(' ');
        match fields.next() {
            Some("acked") => {
                let topic = fields.next();
                let partition = fields.next().and_then(|p| p.parse().ok());
                let offset = fields.next().and_then(|o| o.parse().ok());
                let value = fields.next().and_then(|v| v.parse().ok());
                if let (Some(topic), Some(partition), Some(offset), Some(value), None) =
                    (topic, partition, offset, value, fields.next())
                {
                    report.acked.push(AckedRecord {
                        topic: topic.to_owned(),
                        partition,
                        offset,
                        value,
                    });
                }
            }
            Some("failed") => {
                let topic = fields.next();
                let value = fields.next().and_then(|v| v.parse().ok());
                if let (Some(topic), Some(value)) = (topic, value) {
                    let error = fields.collect::<Vec<_>>().join(" ");
                    report.failed.push((topic.to_owned(), value, error));
                }
            }
            Some(first) => {
                if let Some(sent) = first
                    .strip_prefix("closed")
                    .and(fields.next())
                    .and_then(|s| s.strip_prefix("sent="))
                    .and_then(|s| s.parse().ok())
                {
                    report.closed_sent = Some(sent);
                }
            }
            None => {}
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_acked_failed_and_closed_lines() {
        let log = "acked-producer started\nacked t 0 5 12\nWARN something\n\
                   failed u 13 org.apache.kafka.common.errors.TimeoutException: Expiring 1 record(s)\n\
                   acked t 0 x 14\nclosed sent=15\n";
        let report = parse_report(log);
        assert_eq!(
            report.acked,
            vec![AckedRecord {
                topic: "t".into(),
                partition: 0,
                offset: 5,
                value: 12
            }]
        );
        assert_eq!(report.failed.len(), 1);
        assert_eq!(report.failed[0].1, 13);
        assert!(report.failed[0].2.contains("Expiring 1 record(s)"));
        assert_eq!(report.closed_sent, Some(15));
        assert_eq!(report.acked_in("u").len(), 0);
    }

    #[test]
    fn parses_partition_lines() {
        let state = parse_partition_line("partition t 0 4 4,5 4,5,6").expect("parsed");
        assert_eq!(state.leader, Some(4));
        assert_eq!(state.isr, vec![4, 5]);
        assert_eq!(state.replicas, vec![4, 5, 6]);
        assert!(!state.fully_in_sync());
        let state = parse_partition_line("partition t 0 -1  4,5,6").expect("parsed");
        assert_eq!(state.leader, None);
        assert!(state.isr.is_empty());
        assert!(parse_partition_line("partition t 0 x 4 4").is_none());
        assert!(parse_partition_line("acked t 0 1 2").is_none());
    }
}
