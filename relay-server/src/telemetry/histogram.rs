//! A Prometheus histogram of durations (the commit-latency series), apart from
//! `metrics`, which owns one, and `exposition`, which renders its snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A Prometheus histogram of durations, lock-free. Each observation lands in one
/// bucket (the first whose bound it does not exceed, or the overflow bucket);
/// counts are made cumulative only when rendered. Kept in whole microseconds so
/// the sum is an integer counter too.
#[derive(Debug)]
pub struct Histogram {
    bounds_us: &'static [u64],
    /// One per bound, then the overflow (+Inf) bucket; not cumulative.
    counts: Box<[AtomicU64]>,
    sum_us: AtomicU64,
}

/// A consistent-enough copy of a histogram: `cumulative` ends with +Inf, whose
/// count is `count` by construction (the sum may lag by observations in progress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// `(upper bound in µs, observations <= bound)`; the last entry is +Inf (`None`).
    pub cumulative: Vec<(Option<u64>, u64)>,
    pub count: u64,
    pub sum_us: u64,
}

impl Histogram {
    /// `bounds_us` must be increasing.
    pub fn new(bounds_us: &'static [u64]) -> Self {
        debug_assert!(bounds_us.windows(2).all(|w| w[0] < w[1]));
        Self {
            bounds_us,
            counts: (0..=bounds_us.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        // Prometheus buckets are "less than or equal": a value on a bound counts in it.
        let i = self
            .bounds_us
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(self.bounds_us.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut acc = 0u64;
        let bounds = self.bounds_us.iter().map(|&b| Some(b)).chain([None]);
        let cumulative = bounds
            .zip(self.counts.iter())
            .map(|(b, c)| {
                acc += c.load(Ordering::Relaxed);
                (b, acc)
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            count: acc,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: [u64; 3] = [100_000, 1_000_000, 2_500_000];

    #[test]
    fn observations_land_in_the_first_bucket_they_fit() {
        let h = Histogram::new(&B);
        for ms in [0, 100, 101, 999, 1000, 1001, 2500, 2501, 60_000] {
            h.observe(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        // <= 0.1 s: 0, 100 (on the bound); <= 1 s: + 101, 999, 1000; <= 2.5 s: + 1001, 2500.
        assert_eq!(
            s.cumulative,
            vec![
                (Some(100_000), 2),
                (Some(1_000_000), 5),
                (Some(2_500_000), 7),
                (None, 9)
            ]
        );
        assert_eq!(s.count, 9);
        assert_eq!(
            s.sum_us,
            [0u64, 100, 101, 999, 1000, 1001, 2500, 2501, 60_000]
                .iter()
                .sum::<u64>()
                * 1000
        );
    }

    #[test]
    fn sub_microsecond_and_huge_durations_are_counted() {
        let h = Histogram::new(&B);
        h.observe(Duration::from_nanos(1));
        h.observe(Duration::MAX);
        let s = h.snapshot();
        assert_eq!(s.cumulative.first(), Some(&(Some(100_000), 1)));
        assert_eq!(s.cumulative.last(), Some(&(None, 2)));
    }
}
