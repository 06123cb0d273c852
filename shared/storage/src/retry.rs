//! Retry schedule for Azure requests: capped exponential backoff with full jitter,
//! and the counts of retries by cause. Pure: the caller supplies the random draw,
//! so schedules are unit-tested.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub cap: Duration,
    /// Attempts in total, the first included.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// Delay before retry number `retry` (1 = first retry); `unit` is a uniform draw
    /// in [0, 1). Full jitter spreads the retries of many blocks hitting one 503.
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20));
        let ceiling = exp.min(self.cap);
        let unit = unit.clamp(0.0, 1.0);
        // Never zero: at least half the ceiling, so a retry storm still slows down.
        ceiling.mul_f64(0.5 + unit / 2.0)
    }

    /// Whether another attempt is allowed after `attempts` tries.
    pub fn allows(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }
}

/// HTTP statuses worth retrying: timeouts, throttling and server errors.
pub const RETRYABLE_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];

pub fn is_retryable_status(status: u16) -> bool {
    RETRYABLE_STATUSES.contains(&status)
}

/// Labels of the [`RetryCounts`] slots, in slot order: each retryable status, then
/// `other` (any other status), `transport` (no response: the connection was
/// reset or closed, DNS, TLS) and `timeout` (abandoned: its body made no
/// progress, or no answer came, for the writer's patience; `watch.rs`).
pub const RETRY_LABELS: [&str; 9] = [
    "408",
    "429",
    "500",
    "502",
    "503",
    "504",
    "other",
    "transport",
    "timeout",
];
const OTHER: usize = RETRYABLE_STATUSES.len();
const TRANSPORT: usize = OTHER + 1;
const TIMEOUT: usize = OTHER + 2;

/// Retries by their cause, one lock-free counter per label of [`RETRY_LABELS`].
/// A fixed set, so a misbehaving endpoint cannot grow it (and so every series
/// exists from the start, at 0). Shared by all writers of a process through an
/// `Arc`, and read while transfers run.
#[derive(Debug, Default)]
pub struct RetryCounts {
    slots: [AtomicU64; RETRY_LABELS.len()],
}

impl RetryCounts {
    /// One retry caused by a response with `status`, or by no response at all
    /// (a transport error).
    pub fn record(&self, status: Option<u16>) {
        self.slots[slot(status)].fetch_add(1, Ordering::Relaxed);
    }

    /// One retry of a request that did not finish within its deadline.
    pub fn record_timeout(&self) {
        self.slots[TIMEOUT].fetch_add(1, Ordering::Relaxed);
    }

    pub fn timeouts(&self) -> u64 {
        self.slots[TIMEOUT].load(Ordering::Relaxed)
    }

    /// Retries counted under the label `status` falls into.
    pub fn get(&self, status: Option<u16>) -> u64 {
        self.slots[slot(status)].load(Ordering::Relaxed)
    }

    pub fn total(&self) -> u64 {
        self.snapshot().iter().map(|(_, n)| n).sum()
    }

    /// `(label, count)` for every label, zeros included.
    pub fn snapshot(&self) -> [(&'static str, u64); RETRY_LABELS.len()] {
        std::array::from_fn(|i| (RETRY_LABELS[i], self.slots[i].load(Ordering::Relaxed)))
    }
}

/// Requests one writer gave up, by reason (`watch::Abandon`), and how many of
/// all its failed attempts were ended by a timer while their body was still
/// being accepted: with progress-based deadlines that last count stays 0, and
/// the WAN-lab tests assert it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Abandoned {
    /// No progress for the stall interval: of the body sent, or of an answer
    /// that had begun.
    pub stalled: u32,
    pub unanswered: u32,
    pub while_moving: u32,
}

/// The live counters behind [`Abandoned`].
#[derive(Debug, Default)]
pub struct AbandonCounts {
    stalled: AtomicU32,
    unanswered: AtomicU32,
    while_moving: AtomicU32,
}

impl AbandonCounts {
    pub fn record(&self, why: &crate::watch::Abandon) {
        match why {
            crate::watch::Abandon::Stalled { .. } | crate::watch::Abandon::AnswerStalled { .. } => {
                &self.stalled
            }
            crate::watch::Abandon::Unanswered { .. } => &self.unanswered,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_while_moving(&self) {
        self.while_moving.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Abandoned {
        Abandoned {
            stalled: self.stalled.load(Ordering::Relaxed),
            unanswered: self.unanswered.load(Ordering::Relaxed),
            while_moving: self.while_moving.load(Ordering::Relaxed),
        }
    }
}

fn slot(status: Option<u16>) -> usize {
    match status {
        None => TRANSPORT,
        Some(s) => RETRYABLE_STATUSES
            .iter()
            .position(|&r| r == s)
            .unwrap_or(OTHER),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            max_attempts: 5,
        };
        assert_eq!(b.delay(1, 1.0), Duration::from_millis(100));
        assert_eq!(b.delay(2, 1.0), Duration::from_millis(200));
        assert_eq!(b.delay(3, 1.0), Duration::from_millis(400));
        assert_eq!(b.delay(10, 1.0), Duration::from_secs(1));
        assert_eq!(b.delay(40, 1.0), Duration::from_secs(1));
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(50));
        assert!(b.allows(4));
        assert!(!b.allows(5));
    }

    #[test]
    fn statuses() {
        for s in [500, 503, 429, 408] {
            assert!(is_retryable_status(s));
        }
        for s in [400, 403, 404, 409, 412] {
            assert!(!is_retryable_status(s));
        }
    }

    #[test]
    fn retry_labels_name_the_retryable_statuses() {
        for (i, s) in RETRYABLE_STATUSES.iter().enumerate() {
            assert_eq!(RETRY_LABELS[i], s.to_string());
        }
        assert_eq!(RETRY_LABELS[OTHER], "other");
        assert_eq!(RETRY_LABELS[TRANSPORT], "transport");
        assert_eq!(RETRY_LABELS[TIMEOUT], "timeout");
    }

    #[test]
    fn retries_are_counted_by_status() {
        let c = RetryCounts::default();
        assert!(c.snapshot().iter().all(|(_, n)| *n == 0));
        assert_eq!(c.snapshot().len(), RETRY_LABELS.len());
        for s in [
            Some(503),
            Some(503),
            Some(500),
            None,
            Some(409),
            Some(200),
            Some(429),
        ] {
            c.record(s);
        }
        assert_eq!(c.get(Some(503)), 2);
        assert_eq!(c.get(Some(500)), 1);
        assert_eq!(c.get(Some(429)), 1);
        assert_eq!(c.get(None), 1);
        c.record_timeout();
        assert_eq!(c.timeouts(), 1);
        assert_eq!(c.get(None), 1, "a timeout is not a transport error");
        // Statuses outside the set share `other`.
        assert_eq!(c.get(Some(409)), 2);
        assert_eq!(c.get(Some(418)), 2);
        assert_eq!(c.get(Some(502)), 0);
        assert_eq!(c.total(), 8);
        let snap = c.snapshot();
        assert_eq!(snap[4], ("503", 2));
        assert_eq!(snap[6], ("other", 2));
        assert_eq!(snap[7], ("transport", 1));
        assert_eq!(snap[8], ("timeout", 1));
    }
}
