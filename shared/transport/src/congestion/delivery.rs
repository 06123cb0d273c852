//! Delivery-rate sampling (as in BBR's draft, "Delivery Rate Estimation"): for each
//! acknowledged packet, how fast did the network deliver data between the moment
//! that packet was sent and the moment it was acknowledged. A lost packet removes
//! nothing from the delivered count, so random loss upstream of the bottleneck does
//! not lower the estimate; that is what lets the controller ignore it.
//!
//! quinn tells the controller the send time of each acknowledged packet but not its
//! packet number, so the state at send time is kept per send time (one record per
//! `on_sent` call; packets of one batch share a time and a record).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Bound on remembered sends; far above what any window here keeps in flight
/// (one record per datagram batch), so it only guards against a peer that never acks.
const MAX_RECORDS: usize = 1 << 16;

#[derive(Debug, Clone, Copy)]
struct SendRecord {
    sent: Instant,
    /// Bytes delivered (acked) when this was sent.
    delivered: u64,
    /// When `delivered` last grew, as of this send.
    delivered_time: Instant,
    /// Send time of the packet whose ack last advanced `delivered`, as of this send.
    first_sent: Instant,
}

/// One delivery-rate sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Bytes per second.
    pub rate: u64,
    /// How long the interval was; samples shorter than the min RTT are noise
    /// (ack compression) and the caller drops them.
    pub interval: Duration,
    /// `delivered` when the acknowledged packet was sent: round-trip counting.
    pub delivered_at_send: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Sampler {
    records: VecDeque<SendRecord>,
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent: Option<Instant>,
}

impl Sampler {
    /// Total bytes acknowledged so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A batch of packets left at `now`. `idle` says nothing was in flight: the
    /// sampling interval then restarts here instead of spanning the idle time.
    pub fn on_sent(&mut self, now: Instant, idle: bool) {
        if idle || self.delivered_time.is_none() {
            self.delivered_time = Some(now);
            self.first_sent = Some(now);
        }
        if self.records.back().is_some_and(|r| r.sent == now) {
            return; // same batch, same state
        }
        if self.records.len() >= MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(SendRecord {
            sent: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time.unwrap_or(now),
            first_sent: self.first_sent.unwrap_or(now),
        });
    }

    /// A packet sent at `sent` of `bytes` was acknowledged at `now`.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) -> Option<Sample> {
        self.delivered += bytes;
        self.delivered_time = Some(now);
        // Records older than this one belong to packets that were lost, acked out of
        // order, or carried no ack-eliciting frames: none will be needed again.
        while self.records.front().is_some_and(|r| r.sent < sent) {
            self.records.pop_front();
        }
        let rec = *self.records.front().filter(|r| r.sent == sent)?;
        self.first_sent = Some(rec.sent);
        let send_elapsed = rec.sent.saturating_duration_since(rec.first_sent);
        let ack_elapsed = now.saturating_duration_since(rec.delivered_time);
        // The larger of the two: a burst of acks (compression) or a burst of sends
        // alone would otherwise overstate the rate.
        let interval = send_elapsed.max(ack_elapsed);
        let nanos = interval.as_nanos();
        if nanos == 0 {
            return None;
        }
        let bytes = u128::from(self.delivered - rec.delivered);
        let rate = u64::try_from(bytes * 1_000_000_000 / nanos).unwrap_or(u64::MAX);
        Some(Sample {
            rate,
            interval,
            delivered_at_send: rec.delivered,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packets of 1000 bytes every 1 ms, each acked 50 ms later: 1 MB/s.
    #[test]
    fn steady_flow_measures_its_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Sampler::default();
        let mut last = None;
        for i in 0..200u64 {
            let now = t0 + ms(i);
            if i >= 50 {
                last = s.on_ack(now, t0 + ms(i - 50), 1000);
            }
            s.on_sent(now, i == 0);
        }
        let sample = last.expect("sample");
        let err = (sample.rate as f64 - 1_000_000.0).abs() / 1_000_000.0;
        assert!(err < 0.03, "rate {} B/s", sample.rate);
        assert!(sample.interval >= ms(49));
    }

    /// Every other packet lost before the bottleneck: the delivered rate is what got
    /// through, not what was sent, and missing acks do not break the bookkeeping.
    #[test]
    fn lost_packets_are_skipped() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Sampler::default();
        let mut last = None;
        for i in 0..200u64 {
            let now = t0 + ms(i);
            if i >= 50 && (i - 50) % 2 == 0 {
                last = s.on_ack(now, t0 + ms(i - 50), 1000);
            }
            s.on_sent(now, i == 0);
        }
        let rate = last.expect("sample").rate as f64;
        assert!((rate - 500_000.0).abs() / 500_000.0 < 0.05, "rate {rate}");
        assert!(s.records.len() <= 52);
    }

    #[test]
    fn unknown_send_time_gives_no_sample() {
        let t0 = Instant::now();
        let mut s = Sampler::default();
        s.on_sent(t0 + Duration::from_millis(5), true);
        assert_eq!(s.on_ack(t0 + Duration::from_millis(9), t0, 100), None);
        assert_eq!(s.delivered(), 100);
    }
}
