//! The `/metrics` page, encoded by `prometheus-client` (OpenMetrics text). The
//! relay's counters stay where they are counted (atomics in `Metrics`,
//! `Rejections`, `Admission`, ...); at each scrape they are copied into an
//! `Exposition` of metric families, which a `prometheus-client` collector encodes:
//! one encoder, maintained elsewhere, instead of hand-written text.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::telemetry::histogram::HistogramSnapshot;

/// The media type of the page.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

#[derive(Debug, Clone)]
enum Samples {
    Counter(Vec<(Labels, u64)>),
    Gauge(Vec<(Labels, u64)>),
    /// Sum in seconds, count, `(upper bound in seconds, count in that bucket)`
    /// (not cumulative; the encoder accumulates), the last bound +Inf.
    Histogram {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
}

#[derive(Debug, Clone)]
struct Family {
    /// Without `_total`: OpenMetrics names a counter family without it and its
    /// sample with it.
    name: String,
    help: String,
    samples: Samples,
}

/// Counter or gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// The families of one scrape, in the order they are added.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// One unlabelled sample. `name` is the sample's name (`..._total` for a
    /// counter), as dashboards know it.
    pub fn value(&mut self, name: &str, kind: Kind, help: &str, v: u64) {
        self.labelled(name, kind, help, [(Vec::<(&str, &str)>::new(), v)]);
    }

    /// One family with a sample per label set, e.g. `[([("status", "503")], 2)]`.
    pub fn labelled<'a, L>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) where
        L: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let samples: Vec<(Labels, u64)> = samples
            .into_iter()
            .map(|(labels, v)| {
                let labels = labels
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                (labels, v)
            })
            .collect();
        let (name, samples) = match kind {
            Kind::Counter => (
                name.strip_suffix("_total").unwrap_or(name),
                Samples::Counter(samples),
            ),
            Kind::Gauge => (name, Samples::Gauge(samples)),
        };
        self.push(name, help, samples);
    }

    pub fn histogram(&mut self, name: &str, help: &str, s: &HistogramSnapshot) {
        let mut below = 0;
        let buckets = s
            .cumulative
            .iter()
            .map(|(bound, n)| {
                let le = bound.map_or(f64::INFINITY, |us| us as f64 / 1e6);
                let here = n - below;
                below = *n;
                (le, here)
            })
            .collect();
        let samples = Samples::Histogram {
            sum: s.sum_us as f64 / 1e6,
            count: s.count,
            buckets,
        };
        self.push(name, help, samples);
    }

    fn push(&mut self, name: &str, help: &str, samples: Samples) {
        self.families.push(Family {
            name: name.to_string(),
            help: help.to_string(),
            samples,
        });
    }

    /// The page: every family, then `# EOF`.
    pub fn encode(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug
        // in a family (e.g. a histogram without buckets), shown in the page.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            out.push_str(&format!("# encoding failed: {e}\n"));
        }
        out
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.families {
            let kind = match f.samples {
                Samples::Counter(_) => MetricType::Counter,
                Samples::Gauge(_) => MetricType::Gauge,
                Samples::Histogram { .. } => MetricType::Histogram,
            };
            let mut metric = encoder.encode_descriptor(&f.name, &f.help, None, kind)?;
            match &f.samples {
                Samples::Counter(samples) => {
                    for (labels, v) in samples {
                        metric
                            .encode_family(labels)?
                            .encode_counter::<NoLabelSet, _, u64>(v, None)?;
                    }
                }
                Samples::Gauge(samples) => {
                    for (labels, v) in samples {
                        metric.encode_family(labels)?.encode_gauge(v)?;
                    }
                }
                Samples::Histogram {
                    sum,
                    count,
                    buckets,
                } => metric.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_labels_and_histograms_encode_as_openmetrics() {
        let mut e = Exposition::default();
        e.value("x_bytes_total", Kind::Counter, "Bytes.", 7);
        e.value("x_active", Kind::Gauge, "Active.", 2);
        e.labelled(
            "x_retries_total",
            Kind::Counter,
            "Retries.",
            [([("status", "503")], 3), ([("status", "none")], 0)],
        );
        let h = crate::telemetry::histogram::Histogram::new(&[100_000, 1_000_000]);
        h.observe(std::time::Duration::from_millis(50));
        h.observe(std::time::Duration::from_millis(1500));
        e.histogram("x_seconds", "Latency.", &h.snapshot());
        let text = e.encode();
        for line in [
            "# TYPE x_bytes counter",
            "x_bytes_total 7",
            "# TYPE x_active gauge",
            "x_active 2",
            "x_retries_total{status=\"503\"} 3",
            "x_retries_total{status=\"none\"} 0",
            "# TYPE x_seconds histogram",
            "x_seconds_sum 1.55",
            "x_seconds_count 2",
            "x_seconds_bucket{le=\"0.1\"} 1",
            "x_seconds_bucket{le=\"1.0\"} 1",
            "x_seconds_bucket{le=\"+Inf\"} 2",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}: {text}");
        }
    }
}
