//! The periodic status line of a watch (stderr), or its `status` event
//! (`--json-lines`): files waiting to settle and the oldest wait, in
//! flight, committed since the start, bytes, already in the journal.

use std::time::Duration;

use serde_json::json;

use crate::ui::progress::{Output, Reporter};

/// Tallies since the watch started.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub committed: u64,
    pub bytes: u64,
    pub identical: u64,
    pub failed: u64,
    pub changed: u64,
    pub reconciles: u64,
}

impl Counts {
    pub fn status(&self) -> Status {
        Status {
            committed: self.committed,
            bytes: self.bytes,
            identical: self.identical,
            failed: self.failed,
            changed: self.changed,
            reconciles: self.reconciles,
            ..Status::default()
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Status {
    pub waiting: usize,
    pub oldest_waiting: Option<Duration>,
    pub in_flight: usize,
    pub committed: u64,
    pub bytes: u64,
    pub identical: u64,
    pub known: u64,
    pub failed: u64,
    pub changed: u64,
    pub reconciles: u64,
}

pub fn line(s: &Status) -> String {
    let oldest = s
        .oldest_waiting
        .map_or(String::new(), |d| format!(" (oldest {} s)", d.as_secs()));
    format!(
        "watch: {} waiting to settle{oldest}, {} in flight, {} committed ({}), {} identical, \
         {} already in the journal, {} failed, {} changed while sent",
        s.waiting,
        s.in_flight,
        s.committed,
        relay_proto::size::format_size(s.bytes),
        s.identical,
        s.known,
        s.failed,
        s.changed,
    )
}

pub fn print(reporter: &Reporter, s: &Status) {
    match reporter.output() {
        Output::JsonLines => println!(
            "{}",
            json!({
                "event": "watch_status",
                "waiting": s.waiting,
                "oldest_waiting_s": s.oldest_waiting.map(|d| d.as_secs_f64()),
                "in_flight": s.in_flight,
                "committed": s.committed,
                "bytes": s.bytes,
                "identical": s.identical,
                "known": s.known,
                "failed": s.failed,
                "changed": s.changed,
                "reconciles": s.reconciles,
            })
        ),
        _ => reporter.note(&line(s)),
    }
}
