//! A consumer in a consumer group that keeps consuming one topic in the background, committing
//! after every poll, and reports each record it consumed and each offset it committed — for
//! "the group never reprocesses a committed offset" checks while brokers are rolled or killed.
//!
//! It is Kafka 3.9's own Java `KafkaConsumer` (classic group protocol, `enable.auto.commit=false`,
//! `auto.offset.reset=earliest`), driven by a few lines of Java run through the JDK's
//! single-file source launcher, like [`crate::AckedProducer`]. Its output lines, in the order
//! the consumer did things:
//!
//! ```text
//! consumed <topic> <partition> <offset> <value>
//! committed <topic> <partition> <next offset>
//! commit-failed <exception>           (the offsets of that poll were not committed)
//! assigned <topic>-<partition>,…      (a rebalance gave it these partitions)
//! ```
//!
//! A commit is printed only after `commitSync` returned, so every record consumed after a
//! `committed t p n` line at an offset below `n` was consumed again although the group had
//! committed past it — what [`GroupConsumerReport::reprocessed`] lists.
//!
//! [`GroupConsumer::stop`] creates a stop file; the program then leaves the group, closes the
//! consumer and prints `closed`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::dist::KafkaDist;
use crate::error::{HarnessError, Result};
use crate::process::{LOG_TAIL_LINES, ManagedProcess, ProcessSpec};

/// The Java source of the consumer (see the module doc for its output).
const SOURCE: &str = r#"
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class GroupConsumer {
    static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        String topic = args[2];
        Path stop = Paths.get(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(Collections.singletonList(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                }

                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    say("assigned " + partitions.stream().map(TopicPartition::toString)
                        .collect(Collectors.joining(",")));
                }
            });
            say("group-consumer started");
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (Exception e) {
                    say("poll-error " + e);
                    Thread.sleep(200);
                    continue;
                }
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<String, String>> batch = records.records(tp);
                    for (ConsumerRecord<String, String> r : batch) {
                        say("consumed " + r.topic() + " " + r.partition() + " " + r.offset() + " "
                            + r.value());
                    }
                    offsets.put(tp, new OffsetAndMetadata(batch.get(batch.size() - 1).offset() + 1));
                }
                try {
                    consumer.commitSync(offsets, Duration.ofSeconds(30));
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                        say("committed " + e.getKey().topic() + " " + e.getKey().partition() + " "
                            + e.getValue().offset());
                    }
                } catch (Exception e) {
                    say("commit-failed " + e);
                }
            }
        }
        say("closed");
    }
}
"#;

/// The value consumed at each (topic, partition, offset).
pub type ConsumedValues = BTreeMap<(String, i32, i64), String>;

/// What the consumer printed so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupConsumerReport {
    /// Every record consumed, in order: (topic, partition, offset, value). A record consumed
    /// twice appears twice.
    pub consumed: Vec<(String, i32, i64, String)>,
    /// The last committed next offset per (topic, partition).
    pub committed: BTreeMap<(String, i32), i64>,
    /// Records consumed again at an offset below one the group had already committed:
    /// (topic, partition, offset, the committed offset at that time).
    pub reprocessed: Vec<(String, i32, i64, i64)>,
    /// The `commit-failed` and `poll-error` lines.
    pub errors: Vec<String>,
    /// How many `assigned` lines (rebalances that reached this member).
    pub assignments: usize,
}

impl GroupConsumerReport {
    /// The value consumed at each (topic, partition, offset) — the first one, and any different
    /// value seen at the same offset later as a problem line.
    #[must_use]
    pub fn values(&self) -> (ConsumedValues, Vec<String>) {
        let mut values = BTreeMap::new();
        let mut problems = Vec::new();
        for (topic, partition, offset, value) in &self.consumed {
            let key = (topic.clone(), *partition, *offset);
            match values.get(&key) {
                Some(first) if first != value => problems.push(format!(
                    "{topic}-{partition} offset {offset} consumed as {first:?} and later as {value:?}"
                )),
                Some(_) => {}
                None => {
                    values.insert(key, value.clone());
                }
            }
        }
        (values, problems)
    }
}

/// Parses the consumer's output (see the module doc); other lines are skipped.
#[must_use]
pub fn parse_group_consumer_report(log: &str) -> GroupConsumerReport {
    let mut report = GroupConsumerReport::default();
    for line in log.lines() {
        let mut fields = line.splitn(5, ' ');
        match fields.next() {
            Some("consumed") => {
                let topic = fields.next();
                let partition = fields.next().and_then(|p| p.parse().ok());
                let offset = fields.next().and_then(|o| o.parse().ok());
                let value = fields.next().unwrap_or("");
                if let (Some(topic), Some(partition), Some(offset)) = (topic, partition, offset) {
                    if let Some(&committed) = report.committed.get(&(topic.to_owned(), partition))
                        && offset < committed
                    {
                        report
                            .reprocessed
                            .push((topic.to_owned(), partition, offset, committed));
                    }
                    report
                        .consumed
                        .push((topic.to_owned(), partition, offset, value.to_owned()));
                }
            }
            Some("committed") => {
                let topic = fields.next();
                let partition = fields.next().and_then(|p| p.parse().ok());
                let offset: Option<i64> = fields.next().and_then(|o| o.parse().ok());
                if let (Some(topic), Some(partition), Some(offset)) = (topic, partition, offset) {
                    let entry = report
                        .committed
                        .entry((topic.to_owned(), partition))
                        .or_insert(offset);
                    *entry = (*entry).max(offset);
                }
            }
            Some("commit-failed" | "poll-error") => report.errors.push(line.to_owned()),
            Some("assigned") => report.assignments += 1,
            _ => {}
        }
    }
    report
}

/// A running [`KafkaDist::start_group_consumer`]; SIGKILLed on drop.
#[derive(Debug)]
pub struct GroupConsumer {
    process: ManagedProcess,
    stop_file: PathBuf,
    // Declared last: removed after the process is killed.
    _dir: tempfile::TempDir,
}

impl KafkaDist {
    /// Starts the background group consumer (see the module doc) of `group` on `topic`;
    /// `props` are extra consumer configs, e.g. `session.timeout.ms`. Returns once the consumer
    /// is constructed and subscribed.
    ///
    /// # Errors
    /// `Io`, `Spawn`; `Exited`/`Timeout` if it does not start within `start_timeout`.
    pub fn start_group_consumer(
        &self,
        bootstrap: &str,
        group: &str,
        topic: &str,
        props: &[(&str, &str)],
        start_timeout: Duration,
    ) -> Result<GroupConsumer> {
        let dir = tempfile::Builder::new()
            .prefix("krust-group-consumer-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for the group consumer", e))?;
        let source = dir.path().join("GroupConsumer.java");
        std::fs::write(&source, SOURCE)
            .map_err(|e| HarnessError::io(format!("writing {}", source.display()), e))?;
        let stop_file = dir.path().join("stop");
        let mut spec = ProcessSpec::new(
            "group consumer",
            self.java(),
            dir.path().join("consumer.log"),
        )
        .args(self.jvm_args(&source.display().to_string(), false))
        .arg(bootstrap)
        .arg(group)
        .arg(topic)
        .arg(&stop_file);
        for (key, value) in props {
            spec = spec.arg(format!("{key}={value}"));
        }
        let mut process = ManagedProcess::start(spec)?;
        process.wait_for_log("group-consumer started", start_timeout)?;
        Ok(GroupConsumer {
            process,
            stop_file,
            _dir: dir,
        })
    }
}

impl GroupConsumer {
    /// Everything reported so far.
    #[must_use]
    pub fn report(&self) -> GroupConsumerReport {
        parse_group_consumer_report(&self.process.log_since_start())
    }

    /// Waits until the committed offset of `topic`/`partition` reaches at least `offset`.
    ///
    /// # Errors
    /// `Invalid` if the consumer died, `Timeout` (quoting its log) otherwise.
    pub fn wait_committed(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> Result<GroupConsumerReport> {
        let deadline = Instant::now() + timeout;
        loop {
            let report = self.report();
            let committed = report
                .committed
                .get(&(topic.to_owned(), partition))
                .copied();
            if committed.is_some_and(|c| c >= offset) {
                return Ok(report);
            }
            if !self.process.is_running()? {
                return Err(HarnessError::Invalid(format!(
                    "group consumer exited before committing {topic}-{partition} up to {offset}:\n{}",
                    self.process.log_tail(LOG_TAIL_LINES)
                )));
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!(
                        "a commit of {topic}-{partition} up to {offset} (committed: {committed:?})"
                    ),
                    waited: timeout,
                    log: self.process.log_path().to_path_buf(),
                    log_tail: self.process.log_tail(LOG_TAIL_LINES),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Leaves the group and closes the consumer; the final report.
    ///
    /// # Errors
    /// `Io` if the stop file cannot be written; `Exited`/`Timeout` if it does not close in time.
    pub fn stop(&mut self, timeout: Duration) -> Result<GroupConsumerReport> {
        std::fs::write(&self.stop_file, b"")
            .map_err(|e| HarnessError::io(format!("writing {}", self.stop_file.display()), e))?;
        self.process.wait_for_log("closed", timeout)?;
        Ok(self.report())
    }

    /// Everything it printed so far. The outputs of consumers of one group run one after the
    /// other, concatenated, parse as one report ([`parse_group_consumer_report`]): a record the
    /// next one consumes below an offset the previous one committed is reprocessed.
    #[must_use]
    pub fn output(&self) -> String {
        self.process.log_since_start()
    }

    /// The last lines of its log.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_consumed_below_a_committed_offset_is_reprocessed() {
        let log = "group-consumer started\nassigned t-0\nconsumed t 0 0 a\nconsumed t 0 1 b\n\
                   committed t 0 2\nconsumed t 0 1 b\ncommit-failed x\nconsumed t 0 2 c\n\
                   consumed t 0 2 C\n";
        let report = parse_group_consumer_report(log);
        assert_eq!(report.consumed.len(), 5);
        assert_eq!(report.reprocessed, vec![("t".to_owned(), 0, 1, 2)]);
        assert_eq!(report.committed.get(&("t".to_owned(), 0)), Some(&2));
        assert_eq!(report.errors, vec!["commit-failed x".to_owned()]);
        assert_eq!(report.assignments, 1);
        let (values, problems) = report.values();
        assert_eq!(values.len(), 3);
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    #[test]
    fn values_with_spaces_and_garbage_lines_are_parsed() {
        let report = parse_group_consumer_report("consumed t 1 7 a b c\nconsumed t x 1 y\nnoise\n");
        assert_eq!(
            report.consumed,
            vec![("t".to_owned(), 1, 7, "a b c".to_owned())]
        );
    }
}
