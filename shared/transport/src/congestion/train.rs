//! Cold start's measurement: one short packet train right after the handshake,
//! whose acks, spread out by the bottleneck, tell its rate one round trip in.
//!
//! Why: doubling from RFC 9002's 14.7 KB to a 5 MB BDP (200 Mbit/s × 200 ms)
//! takes ~8 round trips, 1.3–1.6 s of a 1 GiB upload at 200 ms (docs/TRANSPORT.md,
//! "Fixed costs"), and warm start only helps a path seen before. Packets sent
//! back to back leave the bottleneck one serialisation time apart, and their
//! acks come back as far apart (packet-pair/train dispersion, as in Keshav's
//! packet-pair). Two readings of the same acks:
//! - from the earliest moment the train's first ack could arrive (the train's
//!   start plus min RTT) to the latest ack: every delay on the way (a busy receiver,
//!   delayed or bunched acks, an application slow to fill the train) only
//!   lengthens this spread, so this rate errs low (`low`);
//! - from the first ack that came to the latest (`spread`): closer to the
//!   bottleneck when the receiver acks promptly, but a receiver busy when the
//!   train arrives (here: the relay accepting the connection) acks its first
//!   packets late and in a lump, and then it reads high.
//!
//! The reported estimate is the second, capped at twice the first. Startup
//! jumps to the whole BDP of the *smaller* reading: each reading errs high in
//! one case only, and the other bounds it there. The first errs low unless the
//! min RTT is inflated (a relay that answered the handshake late: its sample is
//! the only one before the train's), and then the second, which does not use
//! the min RTT, is the smaller (an estimate floored at the first would then
//! overfill the queue). The second errs high only with a lump, and then the first is
//! the smaller. So one error puts at most one BDP in flight; only both at once
//! (a late handshake and a lump) can put more, at most the lump's factor, and
//! the round after the jump is validated (heavy loss: retreat to what was
//! delivered). Until 2026-12-04 the jump was half of the capped estimate, i.e.
//! half the second reading or the whole first, whichever is smaller: with
//! prompt acks that left half a BDP of the second round trip unsent
//! (docs/bench/cold-start/README.md, `200ms-7-jump`). Startup keeps doubling
//! from there (HyStart still ends it).
//!
//! What keeps an error cheap:
//! - the train is `TRAIN_BYTES` (128 full packets), once per connection, only
//!   on paths of `TRAIN_MIN_RTT` and more (shorter ones leave Startup in a few
//!   milliseconds anyway), never under `--max-rate` or `--fair`;
//! - the bound above; spreads count as at least `MIN_SPREAD`; with one ack
//!   batch only the first reading exists, and it is the estimate and the jump;
//! - a train the application could not fill (too little to send) spreads out
//!   by the application's pace and only underestimates;
//! - a jump the next round contradicts (heavy loss) ends Startup on what was
//!   delivered.
//!
//! Pure: the model feeds it events with their times.

use std::time::{Duration, Instant};

/// Bytes of the train: 128 packets of 1472 (a 1500-byte path).
pub const TRAIN_BYTES: u64 = 128 * 1472;
/// Paths shorter than this skip the train.
pub const TRAIN_MIN_RTT: Duration = Duration::from_millis(10);
/// The shortest spread the estimate believes: 188 KB in 2 ms is 750 Mbit/s, so
/// faster paths are underestimated (still a jump of ~7 doublings).
const MIN_SPREAD: Duration = Duration::from_millis(2);
/// A pause this long in the train's first quarter means the application had
/// not started yet (the handshake's last packets go out before the first
/// stream data): the train starts over at the next send, so the pause does not
/// count as spread.
const RESTART_GAP: Duration = Duration::from_millis(1);
/// quinn's pacer lets a burst of window × 2 ms / RTT go out at once: the train's
/// window is sized so its whole train is one burst.
const PACER_BURST_INTERVAL: Duration = Duration::from_millis(2);

/// What the train's acks say, bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// The spread reading capped at twice the low one: the estimate reported.
    pub rate: u64,
    /// The smaller of the two readings: Startup jumps to its whole BDP.
    pub jump_rate: u64,
}

/// Acks of the train so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Acks {
    /// Train bytes acknowledged.
    acked: u64,
    /// The first ack batch: when, and train bytes acked by then.
    first: Option<(Instant, u64)>,
    /// The latest ack batch.
    last: Option<(Instant, u64)>,
    batches: u32,
    /// The batch under way acknowledged train packets.
    in_batch: bool,
    /// A packet sent after the train was acknowledged: the train's acks are in.
    after_train: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Train {
    /// Not used: warm start, a rate cap, a short path, or switched off.
    Off,
    /// Waiting for the handshake's RTT sample and the first send after it.
    Ready,
    /// Sent since `start`, `sent` bytes so far.
    Sending {
        start: Instant,
        last_send: Instant,
        sent: u64,
        acks: Acks,
    },
    /// All sent by `end`; acks coming in.
    Measuring {
        start: Instant,
        end: Instant,
        sent: u64,
        acks: Acks,
    },
    /// Measured: the bottleneck rate in bytes per second, if the acks allowed
    /// it. The train's span stays known: its last acks may still come in.
    Done {
        rate: Option<u64>,
        span: Option<(Instant, Instant)>,
    },
}

impl Train {
    pub fn new(enabled: bool) -> Self {
        if enabled { Self::Ready } else { Self::Off }
    }

    /// The train is going out.
    pub fn sending(&self) -> bool {
        matches!(self, Self::Sending { .. })
    }

    /// The window while the train goes out: big enough that neither the window
    /// nor quinn's pacer holds back any of its packets.
    pub fn window(&self, rtt: Duration) -> Option<u64> {
        match *self {
            Self::Sending { sent, .. } => {
                let burst = rtt.as_secs_f64() / PACER_BURST_INTERVAL.as_secs_f64();
                Some((TRAIN_BYTES as f64 * burst.max(2.0)) as u64 + sent)
            }
            _ => None,
        }
    }

    /// A batch of `bytes` left at `now`; `min_rtt` is what the model knows.
    pub fn on_sent(&mut self, now: Instant, bytes: u64, min_rtt: Option<Duration>) {
        match self {
            Self::Ready => match min_rtt {
                None => {} // still the handshake
                Some(rtt) if rtt < TRAIN_MIN_RTT => *self = Self::Off,
                Some(_) => {
                    *self = Self::Sending {
                        start: now,
                        last_send: now,
                        sent: bytes,
                        acks: Acks::default(),
                    };
                    self.end_if_full(now);
                }
            },
            Self::Sending {
                start,
                sent,
                last_send,
                acks,
            } => {
                if *sent < TRAIN_BYTES / 4
                    && now.saturating_duration_since(*last_send) > RESTART_GAP
                    && acks.acked == 0
                {
                    *start = now;
                    *sent = 0;
                }
                *sent += bytes;
                *last_send = now;
                self.end_if_full(now);
            }
            _ => {}
        }
    }

    fn end_if_full(&mut self, now: Instant) {
        if let Self::Sending {
            start, sent, acks, ..
        } = *self
            && sent >= TRAIN_BYTES
        {
            *self = Self::Measuring {
                start,
                end: now,
                sent,
                acks,
            };
        }
    }

    /// A packet sent at `sent` was acknowledged. Returns whether it was one of
    /// the train's (whose RTT includes the train's own queue, so Startup's queue
    /// signal must not read it).
    pub fn on_ack(&mut self, sent: Instant, bytes: u64) -> bool {
        // The first ack of a train the application could not fill ends it: what
        // was sent until then is the train.
        if let Self::Sending {
            start,
            last_send,
            sent: total,
            acks,
        } = *self
            && sent >= start
        {
            *self = Self::Measuring {
                start,
                end: last_send,
                sent: total,
                acks,
            };
        }
        match self {
            Self::Measuring {
                start, end, acks, ..
            } => {
                if sent < *start {
                    false
                } else if sent <= *end {
                    acks.acked += bytes;
                    acks.in_batch = true;
                    true
                } else {
                    acks.after_train = true;
                    false
                }
            }
            Self::Done {
                span: Some((start, end)),
                ..
            } => sent >= *start && sent <= *end,
            _ => false,
        }
    }

    /// The end of one ack batch at `now`; `min_rtt` is what the model knows.
    /// Returns what it measured once, when the train's acks are in.
    pub fn on_end_acks(&mut self, now: Instant, min_rtt: Option<Duration>) -> Option<Measured> {
        let Self::Measuring {
            start,
            end,
            sent,
            acks,
        } = self
        else {
            return None;
        };
        if acks.in_batch {
            acks.in_batch = false;
            acks.batches += 1;
            acks.first.get_or_insert((now, acks.acked));
            acks.last = Some((now, acks.acked));
        }
        // Done when most of the train is acked (the rest was lost, and waiting
        // for it measures nothing), or when later packets are acked and a
        // quarter of a round trip has passed since the train's acks could
        // begin (a packet quinn sends right behind the train, a MAX_DATA say,
        // is acked among the train's first acks: that alone ends nothing).
        let rtt = min_rtt?;
        let earliest = *start + rtt;
        let waited = now >= earliest + rtt / 4;
        if !(acks.acked * 4 >= *sent * 3 || (acks.after_train && waited)) {
            return None;
        }
        let measured = acks.measure(earliest);
        *self = Self::Done {
            rate: measured.map(|m| m.rate),
            span: Some((*start, *end)),
        };
        measured
    }

    /// What the train measured, bytes per second (for metrics and reports).
    pub fn rate(&self) -> Option<u64> {
        match self {
            Self::Done { rate, .. } => *rate,
            _ => None,
        }
    }
}

impl Acks {
    /// Both readings of the module docs: `low` from `earliest` (when the first
    /// packet's ack could have come back at the soonest) to the latest ack
    /// batch, and the spread between the first and the latest batch. With a
    /// single batch only `low` exists.
    fn measure(&self, earliest: Instant) -> Option<Measured> {
        let (t1, a1) = self.last?;
        if a1 == 0 {
            return None;
        }
        let per_second =
            |bytes: u64, spread: Duration| bytes as f64 / spread.max(MIN_SPREAD).as_secs_f64();
        let low = per_second(a1, t1.saturating_duration_since(earliest));
        let (rate, jump_rate) = match self.first {
            Some((t0, a0)) if self.batches >= 2 => {
                let spread = per_second(a1.saturating_sub(a0), t1.saturating_duration_since(t0));
                (spread.min(2.0 * low), spread.min(low))
            }
            _ => (low, low),
        };
        Some(Measured {
            rate: rate as u64,
            jump_rate: jump_rate as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Sends a train in batches of 10 packets starting one RTT after `t0` (the
    /// handshake), then acks batch `i` at `ack_at(i)` after the earliest
    /// moment (train start + RTT). Returns the train and its measured rate.
    fn measure(
        t0: Instant,
        rtt: Duration,
        ack_at: impl Fn(u32) -> Duration,
    ) -> (Train, Option<Measured>) {
        measure_with(t0, rtt, Duration::ZERO, ack_at)
    }

    /// As `measure`, with the model's min RTT `late` above the path's.
    fn measure_with(
        t0: Instant,
        rtt: Duration,
        late: Duration,
        ack_at: impl Fn(u32) -> Duration,
    ) -> (Train, Option<Measured>) {
        let mut train = Train::new(true);
        let packet = 1472;
        train.on_sent(t0, 1200, None); // the handshake: no RTT yet
        assert_eq!(train, Train::Ready);
        let start = t0 + rtt;
        let mut sends = Vec::new();
        let mut t = start;
        while !matches!(train, Train::Measuring { .. }) {
            train.on_sent(t, 10 * packet, Some(rtt));
            sends.push(t);
            t += Duration::from_micros(20);
            if train.sending() {
                // Room for the rest of the train in one pacer burst.
                assert!(train.window(rtt).is_some_and(|w| w >= 100 * TRAIN_BYTES));
            }
        }
        let mut measured = None;
        for (i, s) in (0u32..).zip(sends) {
            if matches!(train, Train::Done { .. }) {
                break; // measured once most of the train is acked
            }
            for _ in 0..10 {
                assert!(train.on_ack(s, packet));
            }
            measured = train.on_end_acks(start + rtt + ack_at(i), Some(rtt + late));
        }
        (train, measured)
    }

    /// A bottleneck that takes `gap` per batch of 10 packets.
    fn paced_by(gap: Duration) -> impl Fn(u32) -> Duration {
        move |i| gap * (i + 1)
    }

    #[test]
    fn the_spread_of_the_acks_is_the_bottleneck_rate() {
        // 10 packets per 0.6 ms: 14720 B / 0.6 ms = 24.5 MB/s (196 Mbit/s).
        let gap = Duration::from_micros(600);
        let (train, measured) = measure(Instant::now(), 200 * MS, paced_by(gap));
        let Measured { rate, jump_rate } = measured.expect("measured");
        assert!((rate as f64 / 24.53e6 - 1.0).abs() < 0.01, "rate {rate}");
        assert_eq!(train.rate(), Some(rate));
        // Both readings agree: Startup jumps to the whole BDP.
        assert!(
            (jump_rate as f64 / 24.53e6 - 1.0).abs() < 0.01,
            "jump {jump_rate}"
        );
        assert!(train.window(200 * MS).is_none(), "the train is over");
    }

    #[test]
    fn a_receiver_that_acks_late_and_in_a_lump_reads_at_most_twice_the_rate() {
        // The same 196 Mbit/s link, but the receiver was busy: nothing acked
        // for 6.5 ms, then every batch at once. Measured from the first ack
        // that came, this would look infinitely fast; the jump of half the
        // BDP must still stay within one BDP.
        let lump = Duration::from_micros(6500);
        let (_, measured) = measure(Instant::now(), 200 * MS, |_| lump);
        let rate = measured.expect("measured").rate;
        assert!(rate as f64 <= 2.0 * 24.53e6, "rate {rate}");
    }

    #[test]
    fn a_lump_jumps_no_further_than_the_link() {
        // The train (188 KB, 7.7 ms at 196 Mbit/s) all in by 8 ms, acked at
        // once: the spread reads the 2 ms floor (94 MB/s), the low reading
        // 8 ms. Startup jumps by the low one: within one BDP.
        let lump = Duration::from_micros(8000);
        let (_, measured) = measure(Instant::now(), 200 * MS, |_| lump);
        let Measured { rate, jump_rate } = measured.expect("measured");
        assert!(rate > jump_rate, "rate {rate}, jump {jump_rate}");
        assert!(jump_rate as f64 <= 24.53e6, "jump {jump_rate}");
    }

    #[test]
    fn a_receiver_slow_to_start_acking_is_read_by_the_spread_after() {
        // Busy for 3 ms, then acking at the bottleneck's pace: the first ack
        // marks the start, so the rate is the link's, not 3 ms lower.
        let gap = Duration::from_micros(600);
        let late = Duration::from_micros(3000);
        let (_, measured) = measure(Instant::now(), 200 * MS, move |i| late + gap * i);
        let Measured { rate, jump_rate } = measured.expect("measured");
        assert!((rate as f64 / 24.53e6 - 1.0).abs() < 0.02, "rate {rate}");
        // The low reading counts the 3 ms: the jump stays below the link.
        assert!(jump_rate < rate, "jump {jump_rate}");
    }

    #[test]
    fn a_late_handshake_does_not_inflate_the_estimate() {
        // The relay answered the handshake 5 ms late, so the model's min RTT
        // is 5 ms above the path's when the train's acks come, at the
        // bottleneck's pace. Measured from train start + that min RTT, the
        // train would look 2.4 times faster than the link.
        let gap = Duration::from_micros(600);
        let (_, measured) = measure_with(Instant::now(), 200 * MS, 5 * MS, paced_by(gap));
        let Measured { rate, jump_rate } = measured.expect("measured");
        assert!((rate as f64 / 24.53e6 - 1.0).abs() < 0.02, "rate {rate}");
        // The spread, which does not use the min RTT, bounds the jump.
        assert!(jump_rate as f64 <= 24.53e6 * 1.02, "jump {jump_rate}");
    }

    #[test]
    fn a_short_spread_never_looks_faster_than_the_floor() {
        // 10 packets per 0.1 ms (1.2 Gbit/s): the floor bounds the estimate.
        let (_, measured) = measure(
            Instant::now(),
            200 * MS,
            paced_by(Duration::from_micros(100)),
        );
        let rate = measured.expect("measured").rate;
        let ceiling = TRAIN_BYTES as f64 / MIN_SPREAD.as_secs_f64();
        assert!(rate as f64 <= ceiling, "rate {rate} above {ceiling}");
    }

    #[test]
    fn the_handshakes_last_packets_are_not_the_train() {
        // After the RTT sample: the handshake's Finished and a few small
        // packets, a pause while the application opens its stream, then data.
        let t0 = Instant::now();
        let mut train = Train::new(true);
        let rtt = Some(200 * MS);
        train.on_sent(t0, 1200, rtt);
        train.on_sent(t0 + Duration::from_micros(100), 118, rtt);
        train.on_sent(t0 + Duration::from_micros(1300), 376, rtt);
        let data = t0 + Duration::from_micros(4500);
        train.on_sent(data, 12_000, rtt);
        assert!(matches!(train, Train::Sending { start, sent: 12_000, .. } if start == data));
        // The Finished's ack is not the train's: its pause is no spread.
        assert!(!train.on_ack(t0, 1200));
    }

    #[test]
    fn a_packet_sent_behind_the_train_does_not_end_it_early() {
        let t0 = Instant::now();
        let rtt = 200 * MS;
        let mut train = Train::new(true);
        train.on_sent(t0, TRAIN_BYTES, Some(rtt));
        let behind = t0 + Duration::from_micros(50);
        train.on_sent(behind, 100, Some(rtt));
        // Its ack comes with the train's first: the train goes on.
        assert!(train.on_ack(t0, 14_720));
        assert!(!train.on_ack(behind, 100));
        assert_eq!(train.on_end_acks(t0 + rtt + MS, Some(rtt)), None);
        assert!(matches!(train, Train::Measuring { .. }));
        assert!(train.on_ack(t0, 14_720));
        assert_eq!(train.on_end_acks(t0 + rtt + 2 * MS, Some(rtt)), None);
        // A quarter of a round trip on, with later packets acked, it is over.
        let rate = train.on_end_acks(t0 + rtt + rtt / 4, Some(rtt));
        assert!(rate.is_some());
        assert!(matches!(train, Train::Done { .. }));
    }

    #[test]
    fn a_short_path_skips_the_train() {
        let mut train = Train::new(true);
        train.on_sent(Instant::now(), 1200, Some(2 * MS));
        assert_eq!(train, Train::Off);
        assert!(train.window(2 * MS).is_none());
    }

    #[test]
    fn one_ack_batch_gives_the_low_reading() {
        let t0 = Instant::now();
        let mut train = Train::new(true);
        train.on_sent(t0, TRAIN_BYTES, Some(200 * MS));
        assert!(matches!(train, Train::Measuring { .. }));
        // The whole train in one ack, 5 ms after it could have begun.
        assert!(train.on_ack(t0, TRAIN_BYTES));
        let low = (TRAIN_BYTES as f64 / 0.005) as u64;
        let measured = train.on_end_acks(t0 + 205 * MS, Some(200 * MS));
        assert_eq!(
            measured,
            Some(Measured {
                rate: low,
                jump_rate: low
            })
        );
        // Its late acks are still the train's.
        assert!(train.on_ack(t0, 1472));
    }

    #[test]
    fn a_train_the_application_could_not_fill_ends_at_its_first_ack() {
        let t0 = Instant::now();
        let mut train = Train::new(true);
        train.on_sent(t0, 4 * 1472, Some(200 * MS));
        // Its first ack arrives before the train is full: the train is what was sent.
        assert!(train.on_ack(t0, 1472));
        assert!(matches!(train, Train::Measuring { end, .. } if end == t0));
        // An ack of a packet from before the train changes nothing.
        // A packet sent later is not part of it.
        train.on_sent(t0 + 201 * MS, 1472, Some(200 * MS));
        assert!(!train.on_ack(t0 + 201 * MS, 1472));
    }
}
