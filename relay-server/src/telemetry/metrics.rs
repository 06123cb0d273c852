//! Counters the relay keeps for its logs and its health endpoint, and the pieces of
//! the Prometheus text format that are more than one line (labels, histograms).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use relay_storage::retry::RetryCounts;

use crate::telemetry::exposition::{Exposition, Kind};
use crate::telemetry::failures::Failures;
use crate::telemetry::histogram::Histogram;
use crate::telemetry::rejections::{Reason, Rejections};

/// Upper bounds of the commit-latency buckets, in microseconds (0.05 s to 60 s):
/// a commit is one Put Block List plus a hash comparison, normally tens of
/// milliseconds; the tail shows Azure throttling and retries.
pub const COMMIT_BUCKETS_US: [u64; 10] = [
    50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
    60_000_000,
];

#[derive(Debug)]
pub struct Metrics {
    /// Shared with each transfer's stager, which adds bytes as it reads them (a
    /// live rate, not a total booked when the transfer ends).
    pub bytes_received: Arc<AtomicU64>,
    /// Shared with each transfer's stager, which adds every block Azure accepted.
    pub bytes_staged: Arc<AtomicU64>,
    pub bytes_committed: AtomicU64,
    pub transfers_active: AtomicU64,
    pub transfers_committed: AtomicU64,
    pub transfers_failed: AtomicU64,
    /// Shared with every blob writer of the relay's storage (see `Relay::bind`).
    pub azure_retries: Arc<RetryCounts>,
    /// Every storage request sent (retries included), shared likewise.
    pub storage_requests: Arc<AtomicU64>,
    pub commit_seconds: Histogram,
    /// Downloads (Fetch streams) past their Reject point, and how they ended.
    pub fetches_started: AtomicU64,
    pub fetches_completed: AtomicU64,
    pub fetches_failed: AtomicU64,
    /// Of the failed: dropped because the client stopped reading.
    pub fetches_stalled: AtomicU64,
    /// Blob bytes written to download streams.
    pub bytes_sent: AtomicU64,
    /// The bytes that carried them (compressed chunks, headers included).
    pub wire_bytes_sent: AtomicU64,
    pub listings_completed: AtomicU64,
    /// Listings that ended before their end (storage, no memory, client gone).
    pub listings_failed: AtomicU64,
    /// Of the failed: dropped because a page was not taken within the write
    /// timeout.
    pub listings_stalled: AtomicU64,
    /// Deletes storage answered, by outcome: the listed version deleted, no
    /// blob of the name, another version kept (`If-Match` refused).
    pub deletes_deleted: AtomicU64,
    pub deletes_gone: AtomicU64,
    pub deletes_changed: AtomicU64,
    /// Deletes storage failed (after the relay's retries) or refused.
    pub deletes_failed: AtomicU64,
    /// Streams refused before their Plan, by reason; also rate-limits their log.
    pub rejections: Rejections,
    /// Every transfer that ended without a commit, by code and class.
    pub failures: Failures,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            bytes_received: Arc::default(),
            bytes_staged: Arc::default(),
            bytes_committed: AtomicU64::default(),
            transfers_active: AtomicU64::default(),
            transfers_committed: AtomicU64::default(),
            transfers_failed: AtomicU64::default(),
            azure_retries: Arc::default(),
            storage_requests: Arc::default(),
            commit_seconds: Histogram::new(&COMMIT_BUCKETS_US),
            fetches_started: AtomicU64::default(),
            fetches_completed: AtomicU64::default(),
            fetches_failed: AtomicU64::default(),
            fetches_stalled: AtomicU64::default(),
            bytes_sent: AtomicU64::default(),
            wire_bytes_sent: AtomicU64::default(),
            listings_completed: AtomicU64::default(),
            listings_failed: AtomicU64::default(),
            listings_stalled: AtomicU64::default(),
            deletes_deleted: AtomicU64::default(),
            deletes_gone: AtomicU64::default(),
            deletes_changed: AtomicU64::default(),
            deletes_failed: AtomicU64::default(),
            rejections: Rejections::default(),
            failures: Failures::default(),
        }
    }
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// A transfer ended without a commit: the total and the labelled count.
    pub fn failed(&self, reason: Reason) {
        self.transfers_failed.fetch_add(1, Ordering::Relaxed);
        self.failures.record(reason);
    }
}

/// Decrements the active-transfer gauge however a transfer ends.
pub struct ActiveGuard<'a>(&'a Metrics);

impl<'a> ActiveGuard<'a> {
    pub fn new(m: &'a Metrics) -> Self {
        m.transfers_active.fetch_add(1, Ordering::Relaxed);
        Self(m)
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.transfers_active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Azure retries as one counter with a `status` label; every label is always
/// present (at 0 too) so dashboards and alerts see each series from the start.
pub fn render_retries(out: &mut Exposition, counts: &RetryCounts) {
    out.labelled(
        "blob_relay_azure_retries_total",
        Kind::Counter,
        "Azure requests retried, by cause: the HTTP status, or transport (no response: a reset or closed connection) or timeout (abandoned for no progress: of its body, of its answer, or no answer within the stall timeout).",
        counts.snapshot().map(|(label, n)| ([("status", label)], n)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_histogram_renders_every_bucket_at_zero() {
        let h = Histogram::new(&COMMIT_BUCKETS_US);
        let mut e = Exposition::default();
        e.histogram("c", "h", &h.snapshot());
        let out = e.encode();
        let les: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("c_bucket{le=\"")?.split('"').next())
            .collect();
        assert_eq!(
            les,
            [
                "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "30.0", "60.0", "+Inf"
            ]
        );
        assert!(
            out.contains("c_sum 0.0\n") && out.contains("c_count 0\n"),
            "{out}"
        );
        assert!(
            out.lines()
                .filter(|l| l.starts_with("c_bucket"))
                .all(|l| l.ends_with(" 0"))
        );
    }

    #[test]
    fn retries_render_every_status_label() {
        let c = RetryCounts::default();
        c.record(Some(503));
        c.record(None);
        let mut e = Exposition::default();
        render_retries(&mut e, &c);
        let out = e.encode();
        assert_eq!(
            out.matches("# TYPE blob_relay_azure_retries counter")
                .count(),
            1
        );
        for label in relay_storage::retry::RETRY_LABELS {
            assert!(
                out.contains(&format!(
                    "blob_relay_azure_retries_total{{status=\"{label}\"}} "
                )),
                "{label}: {out}"
            );
        }
        assert!(out.contains("blob_relay_azure_retries_total{status=\"503\"} 1\n"));
        assert!(out.contains("blob_relay_azure_retries_total{status=\"transport\"} 1\n"));
        assert!(out.contains("blob_relay_azure_retries_total{status=\"500\"} 0\n"));
    }
}
