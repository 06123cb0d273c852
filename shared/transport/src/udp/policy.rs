//! When to read received datagrams on a timer tick instead of on every arrival
//! (pure logic; time is passed in).
//!
//! A NIC's interrupt moderation does the same in hardware: at a high packet rate
//! it stops interrupting per packet and hands the driver a batch every few tens
//! of microseconds. A socket in the kernel's epoll set wakes its thread once per
//! datagram; at 200 Mbit/s that is ~16,000 wake-ups a second, each with its own
//! `epoll_wait` and `recvmmsg` returning one packet. Reading on a tick instead
//! costs at most `1 s / MAX_TICK` wake-ups and reads the same datagrams in
//! batches.
//!
//! The price is up to one tick of added delay before a datagram is processed
//! (and acknowledged), so:
//! - only a socket receiving bulk data reads on ticks: at least `BUSY_RATE`
//!   over `BUSY_WAKES` wake-ups in a row. A sender's socket, which receives
//!   only acks (~60 bytes each), keeps per-arrival wake-ups and processes every
//!   ack at once: the window it may send depends on them. Two ticks in a row
//!   below `BUSY_RATE` return to per-arrival wake-ups, so an idle or slow
//!   connection (a handshake, a control exchange) never waits for a tick;
//! - a tick is as long as `TARGET_BATCH` bytes take to arrive at the rate the
//!   last interval saw, between `MIN_TICK` and `MAX_TICK`: at 200 Mbit/s a
//!   tick is 1 ms, at several Gbit/s (loopback, LAN) 100 µs, so the delay an
//!   ack gets stays small next to what the sender's window allows for.

use std::time::{Duration, Instant};

/// The longest tick (timed by a timerfd, `timer::precise_timer`). An ack is
/// at most this much later, within the 2 ms the congestion controller's window
/// allows for late acks; Tokio's timer (rounded up to whole milliseconds)
/// would make acks up to twice that late and limit the window.
pub const MAX_TICK: Duration = Duration::from_millis(1);

/// The shortest tick: below it, wake-ups cost more than batching saves.
pub const MIN_TICK: Duration = Duration::from_micros(100);

/// Bytes a tick aims to collect: one full `recvmmsg` of 32 full-size datagrams.
const TARGET_BATCH: u64 = 32 * 1452;

/// Arrival rate, bytes per second, above which a socket reads on ticks: 50
/// Mbit/s of data is ~4,300 datagrams a second; below that, per-arrival
/// wake-ups are few enough not to matter.
const BUSY_RATE: u64 = 50_000_000 / 8;

/// Consecutive busy wake-ups before reading on ticks.
const BUSY_WAKES: u32 = 8;

/// Consecutive ticks below `BUSY_RATE` before going back to per-arrival wake-ups.
const IDLE_TICKS: u32 = 2;

/// How the socket's reader waits for the next datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Registered with the reactor: woken as soon as a datagram arrives.
    PerArrival,
    /// Not registered for reading; read on the next tick.
    Tick,
}

/// Measures arrivals between drains and decides `Wait` and the tick from them.
#[derive(Debug, Clone)]
pub struct ReceivePolicy {
    wait: Wait,
    /// When the socket was last read empty.
    last_drain: Option<Instant>,
    /// Bytes read since then.
    since_drain: u64,
    /// Busy wake-ups (per arrival) or slow ticks (on ticks) in a row.
    streak: u32,
    /// The next tick's length.
    tick: Duration,
    /// Never change `wait` (tests of one path).
    pinned: bool,
}

impl Default for ReceivePolicy {
    fn default() -> Self {
        Self {
            wait: Wait::PerArrival,
            last_drain: None,
            since_drain: 0,
            streak: 0,
            tick: MAX_TICK,
            pinned: false,
        }
    }
}

impl ReceivePolicy {
    /// A policy that always wakes per arrival (tests of that path).
    #[cfg(test)]
    pub fn per_arrival_only() -> Self {
        Self {
            pinned: true,
            ..Self::default()
        }
    }

    /// A policy that always reads on ticks (tests of that path).
    #[cfg(test)]
    pub fn on_ticks_only() -> Self {
        Self {
            wait: Wait::Tick,
            pinned: true,
            ..Self::default()
        }
    }

    pub fn wait(&self) -> Wait {
        self.wait
    }

    /// How long to wait for the next tick (when `wait()` is `Tick`).
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// `bytes` were read (one `recvmmsg`).
    pub fn on_received(&mut self, bytes: usize) {
        self.since_drain = self.since_drain.saturating_add(bytes as u64);
    }

    /// The socket was read until empty at `now`; returns how to wait next.
    pub fn on_drained(&mut self, now: Instant) -> Wait {
        let read = std::mem::take(&mut self.since_drain);
        let interval = self
            .last_drain
            .replace(now)
            .map(|previous| now.saturating_duration_since(previous));
        let busy = interval.is_some_and(|i| at_least_busy_rate(read, i));
        match self.wait {
            Wait::PerArrival => {
                // A wake-up that found nothing (a readiness event without data)
                // says nothing about the arrival rate.
                if read == 0 {
                    return self.wait;
                }
                self.streak = if busy { self.streak + 1 } else { 0 };
                if self.streak >= BUSY_WAKES {
                    self.switch(Wait::Tick);
                }
            }
            Wait::Tick => {
                self.streak = if busy { 0 } else { self.streak + 1 };
                if self.streak >= IDLE_TICKS {
                    self.switch(Wait::PerArrival);
                }
            }
        }
        self.tick = tick_for(read, interval);
        self.wait
    }

    fn switch(&mut self, wait: Wait) {
        if self.pinned {
            return;
        }
        self.wait = wait;
        self.streak = 0;
    }
}

fn at_least_busy_rate(bytes: u64, interval: Duration) -> bool {
    u128::from(bytes) * 1_000_000 >= u128::from(BUSY_RATE) * interval.as_micros()
}

/// The time `TARGET_BATCH` bytes take to arrive at `read` bytes per
/// `interval`, within `MIN_TICK..=MAX_TICK`.
fn tick_for(read: u64, interval: Option<Duration>) -> Duration {
    match interval {
        Some(interval) if read > 0 => {
            let micros = interval.as_micros() * u128::from(TARGET_BATCH) / u128::from(read);
            Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
                .clamp(MIN_TICK, MAX_TICK)
        }
        _ => MAX_TICK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATAGRAM: usize = 1452;
    const ACK: usize = 60;

    /// Drains at `gap` intervals, each after reading `bytes`.
    fn drains(
        policy: &mut ReceivePolicy,
        start: Instant,
        gap: Duration,
        n: u32,
        bytes: usize,
    ) -> Vec<Wait> {
        (1..=n)
            .map(|i| {
                policy.on_received(bytes);
                policy.on_drained(start + gap * i)
            })
            .collect()
    }

    #[test]
    fn bulk_data_switches_to_ticks_after_a_streak() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        // 200 Mbit/s, one datagram per wake-up: 62 µs apart.
        let waits = drains(&mut p, t0, Duration::from_micros(62), 9, DATAGRAM);
        // The first drain has nothing to compare with; the next 8 are busy.
        assert!(
            waits[..8].iter().all(|w| *w == Wait::PerArrival),
            "{waits:?}"
        );
        assert_eq!(waits[8], Wait::Tick);
    }

    #[test]
    fn arrivals_below_the_busy_rate_keep_per_arrival_wakeups() {
        let t0 = Instant::now();
        for (what, gap, bytes) in [
            (
                "10,000 acks a second: frequent, but 4.8 Mbit/s",
                Duration::from_micros(100),
                ACK,
            ),
            (
                "500 datagrams a second: 5.8 Mbit/s",
                Duration::from_millis(2),
                DATAGRAM,
            ),
        ] {
            let mut p = ReceivePolicy::default();
            let waits = drains(&mut p, t0, gap, 1000, bytes);
            assert!(waits.iter().all(|w| *w == Wait::PerArrival), "{what}");
        }
    }

    #[test]
    fn one_slow_gap_restarts_the_streak() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        drains(&mut p, t0, Duration::from_micros(100), 7, DATAGRAM);
        p.on_received(DATAGRAM);
        assert_eq!(
            p.on_drained(t0 + Duration::from_millis(5)),
            Wait::PerArrival
        );
        let later = t0 + Duration::from_millis(5);
        let waits = drains(&mut p, later, Duration::from_micros(100), 7, DATAGRAM);
        assert!(waits.iter().all(|w| *w == Wait::PerArrival), "{waits:?}");
        p.on_received(DATAGRAM);
        assert_eq!(p.on_drained(later + Duration::from_micros(800)), Wait::Tick);
    }

    #[test]
    fn empty_wakeups_do_not_count_as_busy() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        let waits = drains(&mut p, t0, Duration::from_micros(10), 50, 0);
        assert!(waits.iter().all(|w| *w == Wait::PerArrival));
    }

    #[test]
    fn two_slow_ticks_return_to_per_arrival() {
        let mut p = ReceivePolicy {
            wait: Wait::Tick,
            ..ReceivePolicy::default()
        };
        let t0 = Instant::now();
        // Busy ticks stay on ticks.
        let waits = drains(&mut p, t0, MAX_TICK, 20, 16 * DATAGRAM);
        assert!(waits.iter().all(|w| *w == Wait::Tick));
        // One empty tick between busy ones does not leave.
        assert_eq!(p.on_drained(t0 + MAX_TICK * 21), Wait::Tick);
        p.on_received(16 * DATAGRAM);
        assert_eq!(p.on_drained(t0 + MAX_TICK * 22), Wait::Tick);
        // An empty tick and one with a single ack: two slow ticks.
        assert_eq!(p.on_drained(t0 + MAX_TICK * 23), Wait::Tick);
        p.on_received(ACK);
        assert_eq!(p.on_drained(t0 + MAX_TICK * 24), Wait::PerArrival);
    }

    #[test]
    fn pinned_policies_never_switch() {
        let t0 = Instant::now();
        let mut p = ReceivePolicy::per_arrival_only();
        let waits = drains(&mut p, t0, Duration::from_micros(10), 100, 4 * DATAGRAM);
        assert!(waits.iter().all(|w| *w == Wait::PerArrival));
        let mut p = ReceivePolicy::on_ticks_only();
        let waits = drains(&mut p, t0, Duration::from_millis(10), 100, 0);
        assert!(waits.iter().all(|w| *w == Wait::Tick));
    }

    #[test]
    fn the_tick_shortens_as_arrivals_quicken() {
        let mut p = ReceivePolicy::on_ticks_only();
        let t0 = Instant::now();
        let mut drain = |at_us: u64, datagrams: usize| {
            p.on_received(datagrams * DATAGRAM);
            p.on_drained(t0 + Duration::from_micros(at_us));
            p.tick()
        };
        drain(0, 1);
        // 16 datagrams a millisecond (200 Mbit/s): 32 take 2 ms, capped at 1 ms.
        assert_eq!(drain(1_000, 16), MAX_TICK);
        // 64 a millisecond: 32 arrive in 500 µs.
        assert_eq!(drain(2_000, 64), Duration::from_micros(500));
        // 600 a millisecond (7 Gbit/s): the floor.
        assert_eq!(drain(3_000, 600), MIN_TICK);
        // An empty tick: back to the longest.
        assert_eq!(drain(4_000, 0), MAX_TICK);
    }
}
