//! Kafka 3.9's client tools as functions: create topics, produce, consume, measure. They take a
//! bootstrap address, so they work the same against a Kafka node and against krust (that is the
//! point: Kafka's own clients checking krust's broker).

use std::time::Duration;

use crate::dist::{DEFAULT_TOOL_TIMEOUT, KafkaDist, ToolOutput, class};
use crate::error::{HarnessError, Result};

/// The last summary line of `ProducerPerformance`
/// (`N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, …`).
#[derive(Clone, Debug)]
pub struct ProducerPerfSummary {
    /// Records acknowledged.
    pub records_sent: u64,
    /// Throughput in records per second.
    pub records_per_sec: f64,
    /// Throughput in MB per second.
    pub mb_per_sec: f64,
    /// Mean produce latency.
    pub avg_latency_ms: f64,
    /// Worst produce latency.
    pub max_latency_ms: f64,
    /// Everything the tool printed.
    pub output: ToolOutput,
}

impl KafkaDist {
    /// `kafka-topics.sh --bootstrap-server <bootstrap> --create --topic <topic> --partitions <n>
    /// --replication-factor <rf> [--config k=v]…`.
    ///
    /// # Errors
    /// `ToolFailed` (with Kafka's message, e.g. `TopicExistsException`) or `ToolTimeout`.
    pub fn create_topic(
        &self,
        bootstrap: &str,
        topic: &str,
        partitions: u32,
        replication_factor: u16,
        configs: &[(&str, &str)],
    ) -> Result<ToolOutput> {
        let mut args = vec![
            "--bootstrap-server".to_owned(),
            bootstrap.to_owned(),
            "--create".to_owned(),
            "--topic".to_owned(),
            topic.to_owned(),
            "--partitions".to_owned(),
            partitions.to_string(),
            "--replication-factor".to_owned(),
            replication_factor.to_string(),
        ];
        for (key, value) in configs {
            args.push("--config".to_owned());
            args.push(format!("{key}={value}"));
        }
        self.tool(class::TOPIC_COMMAND).args(args).run()?.ok()
    }

    /// `kafka-console-producer.sh`: sends `input` (one record per line) to `topic` with
    /// `acks=all`, then exits once everything is acknowledged. `properties` are passed as
    /// `--property k=v` (e.g. `parse.key=true`, `key.separator=:`, `parse.headers=true`,
    /// `null.marker=NULL`) and `producer_properties` as `--producer-property k=v` (e.g.
    /// `linger.ms=100`, `batch.size=600`; `compression.type=gzip` is passed as
    /// `--compression-codec gzip`, because the tool would otherwise force it to `none`).
    ///
    /// # Errors
    /// `ToolFailed` or `ToolTimeout`.
    pub fn console_produce(
        &self,
        bootstrap: &str,
        topic: &str,
        input: &str,
        properties: &[(&str, &str)],
        producer_properties: &[(&str, &str)],
    ) -> Result<ToolOutput> {
        let mut args = vec![
            "--bootstrap-server".to_owned(),
            bootstrap.to_owned(),
            "--topic".to_owned(),
            topic.to_owned(),
            "--producer-property".to_owned(),
            "acks=all".to_owned(),
        ];
        for (key, value) in properties {
            args.push("--property".to_owned());
            args.push(format!("{key}={value}"));
        }
        for (key, value) in producer_properties {
            if *key == "compression.type" {
                args.push("--compression-codec".to_owned());
                args.push((*value).to_owned());
            } else {
                args.push("--producer-property".to_owned());
                args.push(format!("{key}={value}"));
            }
        }
        self.tool(class::CONSOLE_PRODUCER)
            .args(args)
            .stdin(input.as_bytes())
            .run()?
            .ok()
    }

    /// `kafka-console-consumer.sh --from-beginning --max-messages <n>`: the first `max_messages`
    /// records of `topic`, one per line on stdout (formatted by `properties`, e.g.
    /// `print.key=true`, `print.offset=true`, `print.headers=true`, `key.separator=\t`). The tool
    /// gives up after `timeout` without a new record (`--timeout-ms`) and then exits 0 all the
    /// same, so fewer lines than `max_messages` is turned into an error here.
    ///
    /// # Errors
    /// `ConsumedTooFew`, `ToolFailed` or `ToolTimeout`.
    pub fn console_consume(
        &self,
        bootstrap: &str,
        topic: &str,
        max_messages: usize,
        properties: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<ToolOutput> {
        let mut args = vec![
            "--bootstrap-server".to_owned(),
            bootstrap.to_owned(),
            "--topic".to_owned(),
            topic.to_owned(),
            "--from-beginning".to_owned(),
            "--max-messages".to_owned(),
            max_messages.to_string(),
            "--timeout-ms".to_owned(),
            timeout.as_millis().to_string(),
        ];
        for (key, value) in properties {
            args.push("--property".to_owned());
            args.push(format!("{key}={value}"));
        }
        let output = self
            .tool(class::CONSOLE_CONSUMER)
            .args(args)
            .timeout(timeout + DEFAULT_TOOL_TIMEOUT)
            .run()?
            .ok()?;
        let got = output.stdout.lines().count();
        if got < max_messages {
            return Err(HarnessError::ConsumedTooFew {
                topic: topic.to_owned(),
                expected: max_messages,
                got,
                stdout: output.stdout,
                stderr: output.stderr,
            });
        }
        Ok(output)
    }

    /// `kafka-producer-perf-test.sh --topic <topic> --num-records <n> --record-size <size>
    /// --throughput -1 --producer-props bootstrap.servers=<bootstrap> acks=all <props>…` and its
    /// final summary.
    ///
    /// # Errors
    /// `ToolFailed`, `ToolTimeout`, or `Invalid` if the summary line is missing.
    pub fn producer_perf(
        &self,
        bootstrap: &str,
        topic: &str,
        num_records: u64,
        record_size: usize,
        producer_props: &[(&str, &str)],
    ) -> Result<ProducerPerfSummary> {
        let mut args = vec![
            "--topic".to_owned(),
            topic.to_owned(),
            "--num-records".to_owned(),
            num_records.to_string(),
            "--record-size".to_owned(),
            record_size.to_string(),
            "--throughput".to_owned(),
            "-1".to_owned(),
            "--producer-props".to_owned(),
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".to_owned(),
        ];
        args.extend(producer_props.iter().map(|(k, v)| format!("{k}={v}")));
        let output = self
            .tool(class::PRODUCER_PERFORMANCE)
            .args(args)
            .run()?
            .ok()?;
        parse_producer_perf(output)
    }
}

fn parse_producer_perf(output: ToolOutput) -> Result<ProducerPerfSummary> {
    let invalid = |output: &ToolOutput| {
        HarnessError::Invalid(format!(
            "no ProducerPerformance summary line in:\n{}\n{}",
            output.stdout, output.stderr
        ))
    };
    let Some(line) = output
        .stdout
        .lines()
        .rev()
        .find(|l| l.contains(" records sent, "))
    else {
        return Err(invalid(&output));
    };
    // "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, …"
    let numbers: Vec<f64> = line
        .split([' ', '(', ','])
        .filter_map(|token| token.parse::<f64>().ok())
        .collect();
    let [sent, per_sec, mb, avg, max, ..] = numbers[..] else {
        return Err(invalid(&output));
    };
    Ok(ProducerPerfSummary {
        records_sent: sent as u64,
        records_per_sec: per_sec,
        mb_per_sec: mb,
        avg_latency_ms: avg,
        max_latency_ms: max,
        output,
    })
}
