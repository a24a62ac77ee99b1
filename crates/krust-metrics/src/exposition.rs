//! The Prometheus text exposition format, version 0.0.4.
//!
//! One `# HELP` and one `# TYPE` line per family, then one line per sample:
//! `name{label="value",…} value`. Help text escapes `\` and newlines; label values also `"`.
//! Values are `NaN`, `+Inf`, `-Inf` or a decimal number.

use std::fmt::Write as _;

/// The Prometheus type of a [`Family`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// A value that goes up and down.
    Gauge,
    /// A monotonic count (name should end in `_total`).
    Counter,
    /// `_bucket{le=…}`, `_sum` and `_count` samples.
    Histogram,
    /// No type claimed.
    Untyped,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Gauge => "gauge",
            Self::Counter => "counter",
            Self::Histogram => "histogram",
            Self::Untyped => "untyped",
        }
    }
}

/// One line of a family.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Appended to the family name (`""`, `"_bucket"`, `"_sum"`, `"_count"`).
    pub suffix: &'static str,
    /// Label pairs, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// An unlabelled sample.
    #[must_use]
    pub fn plain(value: f64) -> Self {
        Self {
            suffix: "",
            labels: Vec::new(),
            value,
        }
    }
}

/// A metric family: what one `# HELP` / `# TYPE` pair describes.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// Prometheus name (see [`crate::prometheus_name`]).
    pub name: String,
    /// Description (Kafka's metric description where there is one).
    pub help: String,
    /// Type.
    pub kind: MetricKind,
    /// Samples.
    pub samples: Vec<Sample>,
}

impl Family {
    /// A gauge with one unlabelled value.
    #[must_use]
    pub fn gauge(name: String, help: &str, value: f64) -> Self {
        Self {
            name,
            help: help.to_owned(),
            kind: MetricKind::Gauge,
            samples: vec![Sample::plain(value)],
        }
    }

    /// A gauge for a value out of a fixed set: one sample per `choices` entry labelled
    /// `label="<choice>"`, `1` for `current` and `0` for the others.
    #[must_use]
    pub fn state_set(
        name: String,
        help: &str,
        label: &str,
        choices: &[&str],
        current: &str,
    ) -> Self {
        Self {
            name,
            help: help.to_owned(),
            kind: MetricKind::Gauge,
            samples: choices
                .iter()
                .map(|c| Sample {
                    suffix: "",
                    labels: vec![(label.to_owned(), (*c).to_owned())],
                    value: if *c == current { 1.0 } else { 0.0 },
                })
                .collect(),
        }
    }

    /// A histogram family from [`crate::Histogram`].
    #[must_use]
    pub fn histogram(name: String, help: &str, histogram: &crate::Histogram) -> Self {
        let mut samples: Vec<Sample> = histogram
            .cumulative()
            .into_iter()
            .map(|(le, n)| Sample {
                suffix: "_bucket",
                labels: vec![("le".to_owned(), format_value(le))],
                value: n as f64,
            })
            .collect();
        samples.push(Sample {
            suffix: "_sum",
            labels: Vec::new(),
            value: histogram.sum(),
        });
        samples.push(Sample {
            suffix: "_count",
            labels: Vec::new(),
            value: histogram.count() as f64,
        });
        Self {
            name,
            help: help.to_owned(),
            kind: MetricKind::Histogram,
            samples,
        }
    }
}

/// A value as the text format writes it.
#[must_use]
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        format!("{v}")
    }
}

fn escape(text: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// Renders `families` in order.
#[must_use]
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for family in families {
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "# HELP {} {}",
            family.name,
            escape(&family.help, false)
        );
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind.as_str());
        for sample in &family.samples {
            out.push_str(&family.name);
            out.push_str(sample.suffix);
            if !sample.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in sample.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape(v, true));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", format_value(sample.value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Histogram;

    #[test]
    fn renders_the_text_format() {
        let mut h = Histogram::new(&[1.0, 10.0]);
        h.observe(0.5);
        h.observe(20.0);
        let families = vec![
            Family::gauge(
                "kafka_server_raft_metrics_high_watermark".into(),
                "The high watermark maintained on this member; -1 if it is unknown",
                42.0,
            ),
            Family::state_set(
                "kafka_server_raft_metrics_current_state".into(),
                "The current state",
                "state",
                &["leader", "follower"],
                "leader",
            ),
            Family::gauge("x_avg".into(), "back\\slash\nnewline", f64::NAN),
            Family {
                name: "odd".into(),
                help: String::new(),
                kind: MetricKind::Counter,
                samples: vec![Sample {
                    suffix: "_total",
                    labels: vec![("path".into(), "a\"b".into())],
                    value: 3.0,
                }],
            },
            Family::histogram("lat_ms".into(), "latency", &h),
        ];
        let want = "\
# HELP kafka_server_raft_metrics_high_watermark The high watermark maintained on this member; -1 if it is unknown
# TYPE kafka_server_raft_metrics_high_watermark gauge
kafka_server_raft_metrics_high_watermark 42
# HELP kafka_server_raft_metrics_current_state The current state
# TYPE kafka_server_raft_metrics_current_state gauge
kafka_server_raft_metrics_current_state{state=\"leader\"} 1
kafka_server_raft_metrics_current_state{state=\"follower\"} 0
# HELP x_avg back\\\\slash\\nnewline
# TYPE x_avg gauge
x_avg NaN
# HELP odd 
# TYPE odd counter
odd_total{path=\"a\\\"b\"} 3
# HELP lat_ms latency
# TYPE lat_ms histogram
lat_ms_bucket{le=\"1\"} 1
lat_ms_bucket{le=\"10\"} 1
lat_ms_bucket{le=\"+Inf\"} 2
lat_ms_sum 20.5
lat_ms_count 2
";
        assert_eq!(render(&families), want);
    }

    #[test]
    fn values_use_the_formats_special_words() {
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(-1.0), "-1");
    }
}
