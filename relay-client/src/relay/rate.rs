//! `--max-rate` / `--cap-mbps`: the cap on what this run writes into QUIC, for all
//! files together. A congestion window of rate × RTT alone is no cap: on a short
//! path the peer's ACK delay (up to 25 ms) dwarfs the RTT and the window starves
//! the link far below the rate, while prompt ACKs let it run far above. So the
//! client meters its own writes (a token bucket with a burst of a few
//! milliseconds), and the congestion controller's window is only kept from being
//! the bottleneck (see `relay_transport::congestion`).

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// Writes are metered in pieces this large, so a low rate is smooth rather than
/// one chunk every few seconds.
pub const PIECE: usize = 16 << 10;

/// How far ahead of the schedule a writer may run (a burst), at most.
const BURST: Duration = Duration::from_millis(5);

#[derive(Debug)]
pub struct RateLimiter {
    bytes_per_s: f64,
    /// When the bytes granted so far are due, on the schedule.
    due: Mutex<Option<Instant>>,
}

impl RateLimiter {
    pub fn new(rate_mbit: f64) -> Self {
        Self {
            bytes_per_s: rate_mbit * 1e6 / 8.0,
            due: Mutex::new(None),
        }
    }

    /// Waits until `n` more bytes fit under the rate.
    pub async fn take(&self, n: usize) {
        let wait_until = {
            let mut due = self.due.lock().await;
            let now = Instant::now();
            // An idle limiter banks no credit: the schedule restarts now.
            let start = due.map_or(now, |d| d.max(now));
            let next = start + Duration::from_secs_f64(n as f64 / self.bytes_per_s);
            *due = Some(next);
            next.checked_sub(BURST)
        };
        if let Some(t) = wait_until
            && t > Instant::now()
        {
            tokio::time::sleep_until(t).await;
        }
    }
}

/// The run's cap: one per process, shared by every file (set once at setup).
static CAP: std::sync::OnceLock<RateLimiter> = std::sync::OnceLock::new();

/// Sets the process-wide cap; later calls keep the first.
pub fn set_cap(rate_mbit: f64) {
    let _ = CAP.set(RateLimiter::new(rate_mbit));
}

/// The run's cap in bytes per second, if there is one: the link's pace for the
/// compressor (`wire::Meter`) is never above it.
pub fn cap_bytes_per_s() -> Option<f64> {
    CAP.get().map(|c| c.bytes_per_s)
}

/// Takes the next piece of `rest` to write, once the cap allows it: all of it at
/// once without a cap, at most `PIECE` bytes with one.
pub async fn next_piece(rest: &mut bytes::Bytes) -> bytes::Bytes {
    let Some(cap) = CAP.get() else {
        return std::mem::take(rest);
    };
    let piece = rest.split_to(rest.len().min(PIECE));
    cap.take(piece.len()).await;
    piece
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paused tokio time: the schedule, not the machine's speed, is what is checked.
    #[tokio::test(start_paused = true)]
    async fn holds_writers_to_the_rate() {
        let limiter = std::sync::Arc::new(RateLimiter::new(8.0)); // 1 MB/s
        let t0 = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let l = limiter.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..16 {
                    l.take(PIECE).await;
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        // 4 × 16 × 16 KiB = 1 MiB at 1 MB/s: 1.049 s, less one burst.
        let took = t0.elapsed().as_secs_f64();
        assert!((1.03..=1.06).contains(&took), "{took}");
    }
}
