//! When to read received datagrams on a timer tick instead of on every arrival
//! (pure logic; time is passed in).
//!
//! A NIC's interrupt moderation does the same in hardware: at a high packet rate
//! it stops interrupting per packet and hands the driver a batch every few tens
//! of microseconds. A socket in the kernel's epoll set wakes its thread once per
//! datagram; at 200 Mbit/s that is ~16,000 wake-ups a second, each with its own
//! `epoll_wait` and `recvmmsg` returning one packet. Reading on a 1 ms tick
//! instead costs ~1,000 wake-ups and reads the same datagrams in batches.
//!
//! The price is up to one tick of added delay before a datagram is processed,
//! so ticks are used only while arrivals are that frequent anyway: when the
//! socket has woken its reader at least `BUSY_WAKES` times in a row less than a
//! tick apart. Two ticks in a row that find nothing return to per-arrival
//! wake-ups, so an idle or slow connection (a handshake, a control exchange, a
//! few acks a second) never waits for a tick.

use std::time::{Duration, Instant};

/// How often a busy socket is read. Tokio's timer rounds up to whole
/// milliseconds, so the effective period is 1–2 ms; either is far below the
/// round trips this product is built for and within the acknowledgement delay
/// peers already allow each other (2 ms, `quic::Windows::transport_with`).
pub const TICK: Duration = Duration::from_millis(1);

/// Consecutive wake-ups less than a tick apart before reading on ticks.
const BUSY_WAKES: u32 = 8;

/// Consecutive ticks that read nothing before going back to per-arrival wake-ups.
const IDLE_TICKS: u32 = 2;

/// How the socket's reader waits for the next datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Registered with the reactor: woken as soon as a datagram arrives.
    PerArrival,
    /// Not registered for reading; read on the next tick.
    Tick,
}

/// Counts wake-ups and empty ticks and decides `Wait` from them.
#[derive(Debug, Clone)]
pub struct ReceivePolicy {
    wait: Wait,
    /// When the socket was last read empty.
    last_drain: Option<Instant>,
    /// Datagrams read since then.
    since_drain: usize,
    /// Busy wake-ups (per arrival) or empty ticks (on ticks) in a row.
    streak: u32,
    /// Never leave `PerArrival` (tests of the per-arrival path).
    pinned: bool,
}

impl Default for ReceivePolicy {
    fn default() -> Self {
        Self {
            wait: Wait::PerArrival,
            last_drain: None,
            since_drain: 0,
            streak: 0,
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

    /// A policy that starts reading on ticks (tests of the tick path).
    #[cfg(test)]
    pub fn on_ticks() -> Self {
        Self {
            wait: Wait::Tick,
            ..Self::default()
        }
    }

    pub fn wait(&self) -> Wait {
        self.wait
    }

    /// `datagrams` were read (one `recvmmsg`).
    pub fn on_received(&mut self, datagrams: usize) {
        self.since_drain = self.since_drain.saturating_add(datagrams);
    }

    /// The socket was read until empty at `now`; returns how to wait next.
    pub fn on_drained(&mut self, now: Instant) -> Wait {
        let read = std::mem::take(&mut self.since_drain);
        let previous = self.last_drain.replace(now);
        match self.wait {
            Wait::PerArrival => {
                // A wake-up that found nothing (a readiness event without data)
                // says nothing about the arrival rate.
                if read == 0 || self.pinned {
                    return self.wait;
                }
                let busy = previous.is_some_and(|p| now.saturating_duration_since(p) < TICK);
                self.streak = if busy { self.streak + 1 } else { 0 };
                if self.streak >= BUSY_WAKES {
                    self.switch(Wait::Tick);
                }
            }
            Wait::Tick => {
                self.streak = if read == 0 { self.streak + 1 } else { 0 };
                if self.streak >= IDLE_TICKS {
                    self.switch(Wait::PerArrival);
                }
            }
        }
        self.wait
    }

    fn switch(&mut self, wait: Wait) {
        self.wait = wait;
        self.streak = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drains at `gap` intervals, each after reading `datagrams`.
    fn drains(
        policy: &mut ReceivePolicy,
        start: Instant,
        gap: Duration,
        n: u32,
        datagrams: usize,
    ) -> Vec<Wait> {
        (1..=n)
            .map(|i| {
                policy.on_received(datagrams);
                policy.on_drained(start + gap * i)
            })
            .collect()
    }

    #[test]
    fn frequent_arrivals_switch_to_ticks_after_a_streak() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        // 16,000 datagrams/s, one per wake-up: 62.5 µs apart.
        let waits = drains(&mut p, t0, Duration::from_micros(62), 9, 1);
        // The first drain has nothing to compare with; the next 8 are busy.
        assert!(
            waits[..8].iter().all(|w| *w == Wait::PerArrival),
            "{waits:?}"
        );
        assert_eq!(waits[8], Wait::Tick);
    }

    #[test]
    fn slow_arrivals_keep_per_arrival_wakeups() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        // 500 datagrams/s: every wake-up 2 ms after the last.
        let waits = drains(&mut p, t0, Duration::from_millis(2), 100, 1);
        assert!(waits.iter().all(|w| *w == Wait::PerArrival));
    }

    #[test]
    fn one_slow_gap_restarts_the_streak() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        drains(&mut p, t0, Duration::from_micros(100), 7, 1);
        p.on_received(1);
        assert_eq!(
            p.on_drained(t0 + Duration::from_millis(5)),
            Wait::PerArrival
        );
        let waits = drains(
            &mut p,
            t0 + Duration::from_millis(5),
            Duration::from_micros(100),
            7,
            1,
        );
        assert!(waits.iter().all(|w| *w == Wait::PerArrival), "{waits:?}");
        p.on_received(1);
        assert_eq!(p.on_drained(t0 + Duration::from_millis(6)), Wait::Tick);
    }

    #[test]
    fn empty_wakeups_do_not_count_as_busy() {
        let mut p = ReceivePolicy::default();
        let t0 = Instant::now();
        let waits = drains(&mut p, t0, Duration::from_micros(10), 50, 0);
        assert!(waits.iter().all(|w| *w == Wait::PerArrival));
    }

    #[test]
    fn two_empty_ticks_return_to_per_arrival() {
        let mut p = ReceivePolicy::on_ticks();
        let t0 = Instant::now();
        // Busy ticks stay on ticks.
        let waits = drains(&mut p, t0, TICK, 20, 16);
        assert!(waits.iter().all(|w| *w == Wait::Tick));
        // One empty tick between busy ones does not leave.
        assert_eq!(p.on_drained(t0 + TICK * 21), Wait::Tick);
        p.on_received(3);
        assert_eq!(p.on_drained(t0 + TICK * 22), Wait::Tick);
        assert_eq!(p.on_drained(t0 + TICK * 23), Wait::Tick);
        assert_eq!(p.on_drained(t0 + TICK * 24), Wait::PerArrival);
    }

    #[test]
    fn a_pinned_policy_never_ticks() {
        let mut p = ReceivePolicy::per_arrival_only();
        let t0 = Instant::now();
        let waits = drains(&mut p, t0, Duration::from_micros(10), 100, 4);
        assert!(waits.iter().all(|w| *w == Wait::PerArrival));
    }
}
