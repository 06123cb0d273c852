//! Windowed filters the model needs: the largest delivery rate over the last few
//! round trips (the bottleneck bandwidth) and the smallest RTT over the last few
//! seconds (the propagation delay). Kept apart so each is unit-tested alone.

use std::time::{Duration, Instant};

/// Number of round trips a bandwidth sample is remembered. It must span one whole
/// gain cycle (8 phases of about one round each) so the probe phase's higher
/// sample survives until the next probe.
pub const BW_WINDOW_ROUNDS: usize = 10;

/// Maximum of per-round values over the last `BW_WINDOW_ROUNDS` rounds.
#[derive(Debug, Clone)]
pub struct RoundMax {
    slots: [u64; BW_WINDOW_ROUNDS],
    round: u64,
}

impl Default for RoundMax {
    fn default() -> Self {
        Self {
            slots: [0; BW_WINDOW_ROUNDS],
            round: 0,
        }
    }
}

impl RoundMax {
    /// Offers `value` measured in `round` (rounds only move forward).
    pub fn update(&mut self, round: u64, value: u64) {
        self.advance(round);
        let slot = &mut self.slots[(round % BW_WINDOW_ROUNDS as u64) as usize];
        *slot = (*slot).max(value);
    }

    /// Forgets slots of rounds that fell out of the window by the time `round` began.
    pub fn advance(&mut self, round: u64) {
        if round <= self.round {
            return;
        }
        let gap = (round - self.round).min(BW_WINDOW_ROUNDS as u64);
        for r in 0..gap {
            let idx = ((round - r) % BW_WINDOW_ROUNDS as u64) as usize;
            self.slots[idx] = 0;
        }
        self.round = round;
    }

    pub fn get(&self) -> u64 {
        self.slots.iter().copied().max().unwrap_or(0)
    }

    /// Forgets everything and starts again from one value (after a heavy-loss round
    /// showed the old maximum is no longer deliverable).
    pub fn reset(&mut self, round: u64, value: u64) {
        self.slots = [0; BW_WINDOW_ROUNDS];
        self.round = round;
        self.update(round, value);
    }
}

/// Minimum RTT over a sliding window of between `window` and `2 × window`: two
/// buckets, the current one and the one before. A single all-time minimum would
/// never notice a longer route; a pure "latest sample when expired" (BBRv1 without
/// ProbeRTT) would inflate with our own queue.
#[derive(Debug, Clone)]
pub struct MinRtt {
    window: Duration,
    current: Option<(Instant, Duration)>,
    previous: Option<Duration>,
}

impl MinRtt {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            current: None,
            previous: None,
        }
    }

    pub fn update(&mut self, now: Instant, sample: Duration) {
        match self.current {
            None => self.current = Some((now, sample)),
            Some((start, min)) => {
                if now.saturating_duration_since(start) >= self.window {
                    self.previous = Some(min);
                    self.current = Some((now, sample));
                } else if sample < min {
                    self.current = Some((start, sample));
                }
            }
        }
    }

    pub fn get(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some((_, c)), Some(p)) => Some(c.min(p)),
            (Some((_, c)), None) => Some(c),
            (None, p) => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_max_remembers_ten_rounds() {
        let mut f = RoundMax::default();
        f.update(1, 100);
        f.update(2, 50);
        assert_eq!(f.get(), 100);
        f.update(10, 60);
        assert_eq!(f.get(), 100, "round 1 is still inside rounds 1..=10");
        f.update(11, 40);
        assert_eq!(f.get(), 60, "round 1 fell out");
        f.advance(100);
        assert_eq!(f.get(), 0, "a long gap forgets everything");
        f.reset(101, 7);
        assert_eq!(f.get(), 7);
    }

    #[test]
    fn min_rtt_expires_after_two_windows() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut f = MinRtt::new(Duration::from_secs(5));
        assert_eq!(f.get(), None);
        f.update(t0, ms(100));
        f.update(t0 + ms(1000), ms(150));
        assert_eq!(f.get(), Some(ms(100)));
        // New bucket at 5 s: the old minimum is still remembered.
        f.update(t0 + ms(5000), ms(180));
        assert_eq!(f.get(), Some(ms(100)));
        // Another bucket: 100 ms is now more than one window old and gone.
        f.update(t0 + ms(10_000), ms(190));
        assert_eq!(f.get(), Some(ms(180)));
    }
}
