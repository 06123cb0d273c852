//! `--relay-connections N`: how a run's files are spread over its N QUIC
//! connections, and how one path estimate is shared between them. Pure: the
//! loads and estimates come in as arguments (`links.rs` holds the state).
//!
//! Why several connections at all: a load balancer that spreads flows by their
//! 5-tuple (Azure's does) sends one connection to one relay for its whole life.
//! Each connection here has its own UDP socket, so its own source port, so its
//! own 5-tuple: N connections land on several relays, and each has its own
//! flow control (windows) and congestion control.

use relay_transport::congestion::PathEstimate;

/// Picks the connection for the next file: the one with the fewest bytes of
/// files on it now; among equals, the first at or after the one after the
/// last pick (round robin), so files that each finish before the next starts
/// still go round all connections rather than all to the first.
#[derive(Debug, Default)]
pub struct Spread {
    next: usize,
}

impl Spread {
    /// Index into `loads` (bytes of the files each connection carries now).
    /// `loads` must not be empty; with one connection the answer is always 0.
    pub fn pick(&mut self, loads: &[u64]) -> usize {
        let n = loads.len().max(1);
        let start = self.next % n;
        // `min_by_key` keeps the first of equal minima: the round-robin order.
        let best = (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| loads.get(i).copied().unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.next = (best + 1) % n;
        best
    }
}

/// What each of `n` connections starts warm from, given what one connection
/// measured on the path (the path cache): an even share of the bandwidth, the
/// same round trip. Every connection starting from the whole estimate would
/// together send n times what the path carries.
pub fn share(estimate: PathEstimate, n: usize) -> PathEstimate {
    let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
    PathEstimate {
        bandwidth: (estimate.bandwidth / n).max(1),
        min_rtt: estimate.min_rtt,
    }
}

/// What the run's connections measured together, as the path cache keeps it
/// for the next run: their bandwidths add up (they shared the path), the round
/// trip is the smallest any saw. `None` when none measured anything.
pub fn combined(estimates: &[PathEstimate]) -> Option<PathEstimate> {
    let min_rtt = estimates.iter().map(|e| e.min_rtt).min()?;
    let bandwidth = estimates
        .iter()
        .fold(0u64, |sum, e| sum.saturating_add(e.bandwidth));
    Some(PathEstimate { bandwidth, min_rtt })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn one_connection_takes_every_file() {
        let mut s = Spread::default();
        for load in [0, 5, u64::MAX] {
            assert_eq!(s.pick(&[load]), 0);
        }
    }

    #[test]
    fn files_that_finish_at_once_still_go_round_every_connection() {
        // Each file is done before the next is picked: all loads are 0 each time.
        let mut s = Spread::default();
        let picks: Vec<usize> = (0..9).map(|_| s.pick(&[0, 0, 0])).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn the_least_loaded_connection_takes_the_next_file() {
        let mut s = Spread::default();
        assert_eq!(s.pick(&[100, 3, 50]), 1);
        assert_eq!(s.pick(&[100, 103, 50]), 2);
        assert_eq!(s.pick(&[100, 103, 150]), 0);
    }

    #[test]
    fn a_large_file_on_one_connection_sends_the_small_ones_to_the_others() {
        let sizes = [1u64 << 30, 1, 1, 1, 1, 1, 1];
        let mut loads = [0u64; 3];
        let mut s = Spread::default();
        let mut on = Vec::new();
        for size in sizes {
            let i = s.pick(&loads);
            loads[i] += size;
            on.push(i);
        }
        assert_eq!(on[0], 0);
        assert!(on[1..].iter().all(|&i| i != 0), "{on:?}");
        assert_eq!(loads[1], 3);
        assert_eq!(loads[2], 3);
    }

    #[test]
    fn files_in_flight_together_spread_evenly_over_the_connections() {
        // Many equal files started before any finishes: each connection gets
        // its share, give or take one.
        for n in 1..=8 {
            let mut loads = vec![0u64; n];
            let mut s = Spread::default();
            for _ in 0..100 {
                let i = s.pick(&loads);
                loads[i] += 10;
            }
            let (lo, hi) = (loads.iter().min(), loads.iter().max());
            assert!(
                hi.zip(lo).is_some_and(|(h, l)| h - l <= 10),
                "{n}: {loads:?}"
            );
            assert_eq!(loads.iter().sum::<u64>(), 1000);
        }
    }

    #[test]
    fn a_pick_is_always_a_valid_index() {
        let mut s = Spread { next: 17 };
        assert!(s.pick(&[0, 0]) < 2);
        let mut empty = Spread::default();
        assert_eq!(empty.pick(&[]), 0);
    }

    #[test]
    fn connections_share_the_saved_estimate_and_add_up_to_it() {
        let e = PathEstimate {
            bandwidth: 25_000_000,
            min_rtt: Duration::from_millis(80),
        };
        assert_eq!(share(e, 1), e);
        let each = share(e, 4);
        assert_eq!(each.bandwidth, 6_250_000);
        assert_eq!(each.min_rtt, e.min_rtt);
        assert_eq!(combined(&[each; 4]), Some(e));
        assert_eq!(share(e, 0), e);
    }

    #[test]
    fn the_combined_estimate_sums_bandwidth_and_keeps_the_smallest_rtt() {
        let a = PathEstimate {
            bandwidth: 10,
            min_rtt: Duration::from_millis(90),
        };
        let b = PathEstimate {
            bandwidth: 30,
            min_rtt: Duration::from_millis(70),
        };
        assert_eq!(
            combined(&[a, b]),
            Some(PathEstimate {
                bandwidth: 40,
                min_rtt: Duration::from_millis(70)
            })
        );
        assert_eq!(combined(&[]), None);
    }
}
