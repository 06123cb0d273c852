//! The pure link model: one direction of an emulated WAN path.
//!
//! Why a separate module: like `quinn-proto`, this holds no sockets and reads
//! no clocks. Time comes in as `now`, packets come in as lengths, and the
//! answer is a `Verdict`. The forwarder (`forwarder.rs`) is the I/O shell that
//! owns the TUN devices; here the delay, rate, queue and loss rules are unit
//! tested with simulated time in microseconds of run time.
//!
//! Order on the path: random loss (the "wire" drops it), then the bottleneck
//! (a serialization clock at `rate_bytes_per_sec` behind a drop-tail queue of
//! `queue_limit_bytes`), then the one-way propagation delay.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Configuration of one direction.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay (RTT / 2 for a symmetric path).
    pub delay: Duration,
    /// Bottleneck rate in IP bytes per second; 0 means unlimited (no queue).
    pub rate_bytes_per_sec: u64,
    /// Drop-tail limit of the bottleneck queue, in bytes.
    pub queue_limit_bytes: u64,
    /// Bernoulli loss probability per packet, 0.0 ..= 1.0.
    pub loss: f64,
    /// Seed of the loss RNG, so that a run can be repeated exactly.
    pub seed: u64,
}

/// What happens to one packet offered to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it to the far side at `release_at`.
    Forward { release_at: Instant },
    /// Lost on the wire (random loss).
    DropLoss,
    /// Dropped at the tail of a full bottleneck queue (self-inflicted loss).
    DropQueue,
}

/// Counters of one direction. `forwarded_*` counts packets accepted for
/// delivery; the shell adds `dropped_no_buffer`, `write_errors`,
/// `max_late_us` (worst lateness of a release, i.e. the emulator's own jitter)
/// and, with NIC offloads on, `gso_batches` (sender batches cut into
/// datagrams), `gro_batches` (coalesced writes) and `malformed` (packets
/// whose offload header was refused).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub forwarded_packets: u64,
    pub forwarded_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_no_buffer: u64,
    pub write_errors: u64,
    pub max_queue_bytes: u64,
    pub max_late_us: u64,
    pub gso_batches: u64,
    pub gro_batches: u64,
    pub malformed: u64,
}

impl LinkStats {
    /// One JSON object; hand-written because the shape is tiny and fixed.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"forwarded_packets\":{},\"forwarded_bytes\":{},\"dropped_loss\":{},\
             \"dropped_queue\":{},\"dropped_no_buffer\":{},\"write_errors\":{},\
             \"max_queue_bytes\":{},\"max_late_us\":{},\"gso_batches\":{},\"gro_batches\":{},\"malformed\":{}}}",
            self.forwarded_packets,
            self.forwarded_bytes,
            self.dropped_loss,
            self.dropped_queue,
            self.dropped_no_buffer,
            self.write_errors,
            self.max_queue_bytes,
            self.max_late_us,
            self.gso_batches,
            self.gro_batches,
            self.malformed
        )
    }
}

/// One direction of the path: decides the fate and release time of packets.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: StdRng,
    /// When the bottleneck finishes serializing everything accepted so far.
    busy_until: Option<Instant>,
    stats: LinkStats,
}

impl Link {
    pub fn new(config: LinkConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (0.0..=1.0).contains(&config.loss),
            "loss must be within 0.0..=1.0, got {}",
            config.loss
        );
        let rng = StdRng::seed_from_u64(config.seed);
        Ok(Self {
            config,
            rng,
            busy_until: None,
            stats: LinkStats::default(),
        })
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Mutable counters, for the shell's own drop causes.
    pub fn stats_mut(&mut self) -> &mut LinkStats {
        &mut self.stats
    }

    /// Bytes waiting in (or being serialized by) the bottleneck at `now`.
    pub fn queue_bytes(&self, now: Instant) -> u64 {
        match self.busy_until {
            Some(busy) if busy > now && self.config.rate_bytes_per_sec > 0 => {
                let backlog_ns = (busy - now).as_nanos();
                (backlog_ns * u128::from(self.config.rate_bytes_per_sec) / 1_000_000_000) as u64
            }
            _ => 0,
        }
    }

    /// Offer a packet of `len` IP bytes arriving at `now`.
    pub fn on_packet(&mut self, now: Instant, len: usize) -> Verdict {
        let len = len as u64;
        // Loss first: a packet lost on the wire never reaches the bottleneck.
        if self.config.loss > 0.0 && self.rng.random::<f64>() < self.config.loss {
            self.stats.dropped_loss += 1;
            return Verdict::DropLoss;
        }
        let departs = if self.config.rate_bytes_per_sec == 0 {
            now
        } else {
            let queued = self.queue_bytes(now);
            if queued + len > self.config.queue_limit_bytes {
                self.stats.dropped_queue += 1;
                return Verdict::DropQueue;
            }
            self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(queued + len);
            let start = match self.busy_until {
                Some(busy) if busy > now => busy,
                _ => now,
            };
            let serialize_ns =
                u128::from(len) * 1_000_000_000 / u128::from(self.config.rate_bytes_per_sec);
            let departs = start + Duration::from_nanos(serialize_ns as u64);
            self.busy_until = Some(departs);
            departs
        };
        self.stats.forwarded_packets += 1;
        self.stats.forwarded_bytes += len;
        Verdict::Forward {
            release_at: departs + self.config.delay,
        }
    }
}

/// FIFO of accepted packets waiting for their release time.
///
/// A FIFO suffices: the delay is constant and departures from the
/// serialization clock never go backwards, so release times are monotonic.
#[derive(Debug)]
pub struct DelayLine<T> {
    queue: VecDeque<(Instant, T)>,
}

impl<T> DelayLine<T> {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            queue: VecDeque::with_capacity(capacity),
        }
    }

    pub fn push(&mut self, release_at: Instant, item: T) {
        debug_assert!(
            self.queue
                .back()
                .is_none_or(|(last, _)| *last <= release_at)
        );
        self.queue.push_back((release_at, item));
    }

    /// Earliest release time, if anything is in flight.
    pub fn next_release(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }

    /// Take the next packet whose release time has come.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        match self.queue.front() {
            Some((at, _)) if *at <= now => self.queue.pop_front().map(|(_, item)| item),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(delay_ms: u64, rate_bytes_per_sec: u64, queue: u64, loss: f64) -> LinkConfig {
        LinkConfig {
            delay: Duration::from_millis(delay_ms),
            rate_bytes_per_sec,
            queue_limit_bytes: queue,
            loss,
            seed: 7,
        }
    }

    fn release(v: Verdict) -> Instant {
        match v {
            Verdict::Forward { release_at } => release_at,
            other => panic!("expected Forward, got {other:?}"),
        }
    }

    #[test]
    fn unlimited_rate_adds_only_the_delay() {
        let t0 = Instant::now();
        let mut link = Link::new(config(25, 0, 0, 0.0)).unwrap();
        assert_eq!(
            release(link.on_packet(t0, 1500)),
            t0 + Duration::from_millis(25)
        );
        assert_eq!(link.queue_bytes(t0), 0);
    }

    #[test]
    fn rate_serializes_back_to_back_packets() {
        // 1 MB/s: 1000 bytes take 1 ms.
        let t0 = Instant::now();
        let mut link = Link::new(config(10, 1_000_000, 1_000_000, 0.0)).unwrap();
        let ms = Duration::from_millis;
        assert_eq!(release(link.on_packet(t0, 1000)), t0 + ms(11));
        assert_eq!(release(link.on_packet(t0, 1000)), t0 + ms(12));
        assert_eq!(link.queue_bytes(t0), 2000);
        assert_eq!(link.queue_bytes(t0 + ms(1)), 1000);
        // After the queue drained, a new packet starts at its arrival time.
        assert_eq!(release(link.on_packet(t0 + ms(5), 1000)), t0 + ms(16));
    }

    #[test]
    fn goodput_over_a_long_run_equals_the_rate() {
        // Offer 2x the rate for 1 s; what departs in that second is the rate.
        let t0 = Instant::now();
        let rate = 12_500_000; // 100 Mbit/s
        let mut link = Link::new(config(0, rate, 125_000, 0.0)).unwrap();
        let mut line = DelayLine::with_capacity(1024);
        let gap = Duration::from_nanos(1500 * 1_000_000_000 / (2 * rate));
        let mut delivered = 0u64;
        let mut now = t0;
        while now < t0 + Duration::from_secs(1) {
            if let Verdict::Forward { release_at } = link.on_packet(now, 1500) {
                line.push(release_at, 1500u64);
            }
            while let Some(len) = line.pop_due(now) {
                delivered += len;
            }
            now += gap;
        }
        let err = (delivered as f64 - rate as f64).abs() / rate as f64;
        assert!(
            err < 0.01,
            "delivered {delivered} bytes in 1 s, rate {rate}"
        );
        assert!(link.stats().dropped_queue > 0);
        assert!(link.stats().max_queue_bytes <= 125_000);
    }

    #[test]
    fn full_queue_drops_at_the_tail() {
        let t0 = Instant::now();
        // Queue holds 3 packets of 1000 bytes.
        let mut link = Link::new(config(0, 1_000_000, 3000, 0.0)).unwrap();
        for _ in 0..3 {
            release(link.on_packet(t0, 1000));
        }
        assert_eq!(link.on_packet(t0, 1000), Verdict::DropQueue);
        assert_eq!(link.on_packet(t0, 1), Verdict::DropQueue);
        // 1 ms later one packet has left: room for exactly one more.
        let t1 = t0 + Duration::from_millis(1);
        release(link.on_packet(t1, 1000));
        assert_eq!(link.on_packet(t1, 1000), Verdict::DropQueue);
        let s = link.stats();
        assert_eq!((s.forwarded_packets, s.dropped_queue), (4, 3));
        assert_eq!(s.max_queue_bytes, 3000);
    }

    #[test]
    fn loss_rate_matches_probability_and_seed_repeats() {
        let t0 = Instant::now();
        let run = |seed| {
            let mut cfg = config(0, 0, 0, 0.02);
            cfg.seed = seed;
            let mut link = Link::new(cfg).unwrap();
            let pattern: Vec<bool> = (0..100_000)
                .map(|_| link.on_packet(t0, 100) == Verdict::DropLoss)
                .collect();
            (pattern, *link.stats())
        };
        let (a, stats) = run(1);
        let (b, _) = run(1);
        let (c, _) = run(2);
        assert_eq!(a, b, "same seed, same losses");
        assert_ne!(a, c, "other seed, other losses");
        let rate = stats.dropped_loss as f64 / 100_000.0;
        assert!((rate - 0.02).abs() < 0.002, "loss rate {rate}");
        assert_eq!(stats.dropped_loss + stats.forwarded_packets, 100_000);
    }

    #[test]
    fn lost_packets_do_not_use_the_bottleneck() {
        let t0 = Instant::now();
        let mut link = Link::new(config(0, 1_000_000, 10_000, 1.0)).unwrap();
        assert_eq!(link.on_packet(t0, 1000), Verdict::DropLoss);
        assert_eq!(link.queue_bytes(t0), 0);
    }

    #[test]
    fn delay_line_releases_in_order_at_their_time() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut line = DelayLine::with_capacity(4);
        assert_eq!(line.next_release(), None);
        line.push(t0 + ms(5), 'a');
        line.push(t0 + ms(5), 'b');
        line.push(t0 + ms(9), 'c');
        assert_eq!(line.next_release(), Some(t0 + ms(5)));
        assert_eq!(line.pop_due(t0 + ms(4)), None);
        assert_eq!(line.pop_due(t0 + ms(5)), Some('a'));
        assert_eq!(line.pop_due(t0 + ms(5)), Some('b'));
        assert_eq!(line.pop_due(t0 + ms(8)), None);
        assert_eq!(line.pop_due(t0 + ms(100)), Some('c'));
        assert!(line.is_empty());
    }

    #[test]
    fn invalid_loss_is_refused() {
        assert!(Link::new(config(0, 0, 0, 1.5)).is_err());
        assert!(Link::new(config(0, 0, 0, -0.1)).is_err());
    }
}
