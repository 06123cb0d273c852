//! Counters the relay keeps for its logs and its health endpoint.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    pub bytes_received: AtomicU64,
    pub bytes_committed: AtomicU64,
    pub transfers_active: AtomicU64,
    pub transfers_committed: AtomicU64,
    pub transfers_failed: AtomicU64,
    pub azure_retries: AtomicU64,
    pub commit_ms_total: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
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
