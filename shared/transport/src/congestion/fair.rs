//! Fair mode (`--fair`): a TCP-Cubic-shaped cap on the model's window that backs
//! off (× 0.7, once per round) on losses seen while the RTT is inflated by a
//! queue, which is when a loss-based flow shares the bottleneck with us. Random
//! loss on an empty queue still costs nothing. Pure: time is passed in.

use std::time::{Duration, Instant};

/// Cubic's multiplicative decrease and its C constant (packets/s³).
const FAIR_BETA: f64 = 0.7;
const CUBIC_C: f64 = 0.4;
/// A loss counts as congestion when the RTT exceeds min RTT by this fraction of
/// min RTT (or `FAIR_QUEUE_MIN`, whichever is larger). Our own probe queue stays
/// below 0.35 BDP, so only someone else's queue gets this high.
const FAIR_QUEUE_FRACTION: f64 = 0.5;
const FAIR_QUEUE_MIN: Duration = Duration::from_millis(4);

/// Fair mode's Cubic-shaped cap, in bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct FairCap {
    /// Window before the last backoff.
    w_max: f64,
    /// Seconds until the cap is back at `w_max`.
    k: f64,
    /// When the last backoff happened.
    epoch: Instant,
    last_backoff_round: u64,
}

impl FairCap {
    /// The cap after a congestive loss at `window` bytes, unless the cap already
    /// backed off in this round (`current`'s last backoff).
    pub(super) fn backoff(
        current: Option<FairCap>,
        window: u64,
        mtu: u64,
        now: Instant,
        round: u64,
    ) -> Option<FairCap> {
        if current.is_some_and(|f| f.last_backoff_round >= round) {
            return current;
        }
        let before = window as f64;
        let pkts = before / mtu as f64;
        Some(FairCap {
            w_max: before,
            k: (pkts * (1.0 - FAIR_BETA) / CUBIC_C).cbrt(),
            epoch: now,
            last_backoff_round: round,
        })
    }

    /// The cap at `now`, in bytes.
    pub(super) fn cap(&self, now: Instant, mtu: u64) -> u64 {
        let t = now.saturating_duration_since(self.epoch).as_secs_f64();
        let w_max_pkts = self.w_max / mtu as f64;
        let cap_pkts = CUBIC_C * (t - self.k).powi(3) + w_max_pkts;
        (cap_pkts.max(0.0) * mtu as f64) as u64
    }
}

/// Loss while the RTT shows a queue we did not build, or an ECN mark
/// (`lost_bytes` = 0).
pub(super) fn congestive(
    lost_bytes: u64,
    latest_rtt: Option<Duration>,
    min_rtt: Option<Duration>,
) -> bool {
    if lost_bytes == 0 {
        return true;
    }
    match (latest_rtt, min_rtt) {
        (Some(rtt), Some(min)) => {
            let extra = min.mul_f64(FAIR_QUEUE_FRACTION).max(FAIR_QUEUE_MIN);
            rtt > min + extra
        }
        _ => false,
    }
}
