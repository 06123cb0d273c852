//! A sync's counts, kept as it goes by the planner thread and the items in
//! flight alike, and read once for the summary.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::ui::progress::Found;
use crate::ui::report::SyncReport;

#[derive(Debug, Default)]
pub struct Counts {
    pub sent: AtomicU64,
    pub fetched: AtomicU64,
    pub skipped_unchanged: AtomicU64,
    pub identical: AtomicU64,
    pub adopted: AtomicU64,
    pub conflicts: AtomicU64,
    pub gaps: AtomicU64,
    pub bytes_read: AtomicU64,
    /// The status line's totals, known without collecting either side: the
    /// lines the merge has made or handed on so far, and the bytes the work
    /// handed on is to move; complete once the merge has ended. Changed and
    /// handed to the reporter under its lock, so that the reporter never
    /// keeps an older total than the last one.
    found: Mutex<Found>,
}

/// One more.
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

impl Counts {
    /// Changes the status line's totals by `change`, and hands them on.
    pub fn found(&self, change: impl FnOnce(&mut Found), set: impl FnOnce(Found)) {
        // A panic elsewhere while it was held leaves a total, not a hazard.
        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut found);
        set(*found);
    }

    pub fn read(&self, bytes: u64) {
        self.bytes_read.fetch_add(bytes, Relaxed);
    }

    /// The summary's counts (the deletes' are the planner's to fill in).
    pub fn report(&self, direction: &'static str) -> SyncReport {
        let g = |c: &AtomicU64| c.load(Relaxed);
        SyncReport {
            direction,
            sent: g(&self.sent),
            fetched: g(&self.fetched),
            skipped_unchanged: g(&self.skipped_unchanged),
            identical: g(&self.identical),
            adopted: g(&self.adopted),
            conflicts: g(&self.conflicts),
            gaps: g(&self.gaps),
            bytes_read: g(&self.bytes_read),
            ..SyncReport::default()
        }
    }
}
