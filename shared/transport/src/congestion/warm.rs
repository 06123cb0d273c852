//! Warm start's memory of a path: what a connection measured, when it is worth
//! starting from (`plausible`), and whether a new connection is on the same path
//! (`matches_rtt`). The controller's use of it is in `model.rs`.

use std::time::Duration;

/// Warm start accepts a saved path when the RTT now is within these factors of it.
const WARM_RTT_RANGE: (f64, f64) = (2.0 / 3.0, 1.5);
/// Warm start jumps to this fraction of the saved BDP (careful resume's half).
pub(super) const WARM_JUMP: f64 = 0.5;

/// What a connection learned about its path: enough to start the next one warm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathEstimate {
    /// Bottleneck bandwidth, bytes per second.
    pub bandwidth: u64,
    pub min_rtt: Duration,
}

/// Largest bandwidth a saved estimate may claim (100 Gbit/s): anything above is
/// a measurement artefact (ack compression on loopback), not a path.
const MAX_PLAUSIBLE_BANDWIDTH: u64 = 12_500_000_000;
/// Longest plausible min RTT: no terrestrial or satellite path is slower.
const MAX_PLAUSIBLE_RTT: Duration = Duration::from_secs(5);

impl PathEstimate {
    /// Whether the estimate is worth warm-starting from: its BDP is above the
    /// initial window in bytes (below it a warm start changes nothing, and such
    /// tiny values are what idle connections measure), and its numbers are
    /// physically possible.
    pub fn plausible(&self, initial_window: u64) -> bool {
        let bdp = self.bandwidth as f64 * self.min_rtt.as_secs_f64();
        self.bandwidth <= MAX_PLAUSIBLE_BANDWIDTH
            && !self.min_rtt.is_zero()
            && self.min_rtt <= MAX_PLAUSIBLE_RTT
            && bdp >= initial_window as f64
    }

    /// Whether an RTT measured now says this is (still) the same path.
    pub fn matches_rtt(&self, rtt: Duration) -> bool {
        let saved = self.min_rtt.as_secs_f64();
        let now = rtt.as_secs_f64();
        saved > 0.0 && now >= saved * WARM_RTT_RANGE.0 && now <= saved * WARM_RTT_RANGE.1
    }
}

/// Where warm start stands on this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warm {
    /// Nothing saved: plain Startup.
    Off,
    /// Saved estimate waiting for the first RTT sample.
    Pending(PathEstimate),
    /// Jumped; the first round the application fills validates it (the
    /// model's `jump_round`, shared with the cold-start train's jump).
    Jumped,
    /// Jump validated (or the path did not match: `jumped` false).
    Done { jumped: bool },
}
