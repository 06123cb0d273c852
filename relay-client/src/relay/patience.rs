//! Patience is time, not a count: a relay that cannot be reached is asked again
//! with capped backoff until `--patience` has passed since it went away, and the
//! person is told at once and then periodically. Links to remote sites drop for
//! a minute or more as a matter of course (a VPN reconnecting, a route flap, a
//! lid closed on a train); that is weather, not a failure of any file.
//!
//! Pure: time comes in as an argument (quinn-proto style) and so does the random
//! draw for jitter; `link.rs` is the shell that connects, sleeps and prints, and
//! what the person is told is `ui::weather`.

use std::time::Duration;

// The first wait after a failed try, doubled each time up to
// `Patience::cap`; and the longest wait between tries, whatever the
// patience: a link that returns is noticed within it.
use crate::relay::backoff::{CAP, INITIAL};

/// The longest time between two "still trying" notices.
const NOTICE_EVERY: Duration = Duration::from_secs(30);

/// What to do after a failed try to reach the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Try again after `delay`. `notice` is set when it is time to tell the
    /// person (the first failure of an outage, then every `notice_every`).
    Retry {
        delay: Duration,
        notice: Option<Notice>,
    },
    /// Patience ran out `waited` after the relay went away: stop, resumably.
    GiveUp { waited: Duration },
}

/// "relay unreachable for `waited`, still trying for `left`".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    /// The first notice of this outage (it carries the reason).
    pub first: bool,
    pub waited: Duration,
    pub left: Duration,
}

/// One outage: since when, how many tries failed, when to speak next. `T` is
/// the clock (`std::time::Instant` in the shell, a `Duration` in tests).
#[derive(Debug, Clone, Copy)]
struct Outage<T> {
    since: T,
    failures: u32,
    next_notice: T,
}

/// The waiting state of one relay link.
#[derive(Debug, Clone)]
pub struct Patience<T> {
    limit: Duration,
    outage: Option<Outage<T>>,
}

/// A clock the machine can add durations to and subtract.
pub trait Clock: Copy + Ord {
    fn plus(self, d: Duration) -> Self;
    fn since(self, earlier: Self) -> Duration;
}

impl Clock for std::time::Instant {
    fn plus(self, d: Duration) -> Self {
        self + d
    }
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Clock for Duration {
    fn plus(self, d: Duration) -> Self {
        self + d
    }
    fn since(self, earlier: Self) -> Duration {
        self.saturating_sub(earlier)
    }
}

impl<T: Clock> Patience<T> {
    /// `limit` zero: no waiting (every failure is the caller's to handle, as
    /// before patience existed).
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            outage: None,
        }
    }

    pub fn enabled(&self) -> bool {
        !self.limit.is_zero()
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Waiting for the network right now.
    pub fn waiting(&self) -> bool {
        self.outage.is_some()
    }

    /// The longest wait between tries: a tenth of the patience (so a short
    /// patience still gets several tries), at most `CAP`, at least `INITIAL`.
    pub fn cap(&self) -> Duration {
        (self.limit / 10).clamp(INITIAL, CAP)
    }

    /// Time between notices: a tenth of the patience, 1 s to `NOTICE_EVERY`.
    pub fn notice_every(&self) -> Duration {
        (self.limit / 10).clamp(Duration::from_secs(1), NOTICE_EVERY)
    }

    /// A try failed because the relay could not be reached (no answer, lost
    /// connection, no name resolution). `unit` is a uniform draw in [0, 1) for
    /// jitter, so many clients behind one broken link do not come back in step.
    pub fn unreachable(&mut self, now: T, unit: f64) -> Step {
        let every = self.notice_every();
        let cap = self.cap();
        let limit = self.limit;
        let outage = self.outage.get_or_insert(Outage {
            since: now,
            failures: 0,
            next_notice: now,
        });
        outage.failures += 1;
        let waited = now.since(outage.since);
        if limit.is_zero() || waited >= limit {
            self.outage = None;
            return Step::GiveUp { waited };
        }
        let left = limit - waited;
        let exp = INITIAL.saturating_mul(1u32 << (outage.failures - 1).min(16));
        let ceiling = exp.min(cap);
        // Half to all of the ceiling; never past the deadline, so the last try
        // is made when patience runs out, not a whole backoff before.
        let delay = ceiling.mul_f64(0.5 + unit.clamp(0.0, 1.0) / 2.0).min(left);
        let notice = (now >= outage.next_notice).then(|| {
            outage.next_notice = now.plus(every);
            Notice {
                first: outage.failures == 1,
                waited,
                left,
            }
        });
        Step::Retry { delay, notice }
    }

    /// The relay answered: the outage (if any) is over. Returns how long it
    /// lasted, for a "reachable again" line.
    pub fn reachable(&mut self, now: T) -> Option<Duration> {
        self.outage.take().map(|o| now.since(o.since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn retry(step: &Step) -> (Duration, Option<Notice>) {
        match step {
            Step::Retry { delay, notice } => (*delay, *notice),
            Step::GiveUp { waited } => panic!("gave up after {waited:?}"),
        }
    }

    /// Drives the machine the way the shell does: each failed try is followed
    /// by its delay plus the time the try itself took.
    fn run(p: &mut Patience<Duration>, start: Duration, try_takes: Duration) -> Vec<Step> {
        let mut now = start;
        let mut steps = Vec::new();
        loop {
            let step = p.unreachable(now, 0.5);
            steps.push(step.clone());
            match step {
                Step::Retry { delay, .. } => now += delay + try_takes,
                Step::GiveUp { .. } => return steps,
            }
        }
    }

    #[test]
    fn zero_patience_gives_up_at_the_first_failure() {
        let mut p = Patience::<Duration>::new(Duration::ZERO);
        assert!(!p.enabled());
        assert_eq!(
            p.unreachable(5 * S, 0.3),
            Step::GiveUp {
                waited: Duration::ZERO
            }
        );
    }

    #[test]
    fn waits_until_patience_has_passed_then_gives_up() {
        let limit = 600 * S;
        let mut p = Patience::new(limit);
        let steps = run(&mut p, 100 * S, 5 * S);
        let Some(Step::GiveUp { waited }) = steps.last() else {
            panic!("no give-up: {steps:?}");
        };
        // Gives up at the first failure at or after the deadline, never before.
        assert!(*waited >= limit && *waited <= limit + 5 * S, "{waited:?}");
        // Many tries, each wait within the cap; the last lands on the deadline.
        assert!(steps.len() > 30, "{}", steps.len());
        for s in &steps[..steps.len() - 1] {
            assert!(retry(s).0 <= CAP);
        }
        assert!(!p.waiting(), "a new outage starts afresh");
    }

    #[test]
    fn backoff_doubles_up_to_a_tenth_of_the_patience() {
        let mut p = Patience::new(20 * S);
        assert_eq!(p.cap(), 2 * S);
        let delays: Vec<Duration> = (0..6)
            .map(|i| retry(&p.unreachable(Duration::from_millis(i * 10), 0.999_999)).0)
            .collect();
        let ms: Vec<u128> = delays.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![499, 999, 1999, 1999, 1999, 1999]);
        // A long patience keeps the wait at 15 s, so a returning link is seen soon.
        assert_eq!(Patience::<Duration>::new(3600 * S).cap(), CAP);
        assert_eq!(
            Patience::<Duration>::new(Duration::from_secs(2)).cap(),
            INITIAL
        );
    }

    #[test]
    fn the_wait_never_passes_the_deadline() {
        let mut p = Patience::new(10 * S);
        let _ = p.unreachable(Duration::ZERO, 0.0);
        let (delay, _) = retry(&p.unreachable(Duration::from_millis(9_700), 0.99));
        assert_eq!(delay, Duration::from_millis(300));
    }

    #[test]
    fn announces_at_once_then_periodically() {
        let mut p = Patience::new(600 * S);
        let steps = run(&mut p, Duration::ZERO, S);
        let notices: Vec<Notice> = steps.iter().filter_map(retry_notice).collect();
        assert!(notices[0].first && notices[0].waited.is_zero());
        assert_eq!(notices[0].left, 600 * S);
        assert!(notices[1..].iter().all(|n| !n.first));
        // Then about every 30 s (a notice comes with the first try after its time).
        for pair in notices.windows(2) {
            let gap = pair[1].waited - pair[0].waited;
            assert!(gap >= 30 * S && gap <= 30 * S + CAP + S, "{gap:?}");
        }
        assert!(notices.len() >= 15, "{}", notices.len());
    }

    fn retry_notice(s: &Step) -> Option<Notice> {
        match s {
            Step::Retry { notice, .. } => *notice,
            Step::GiveUp { .. } => None,
        }
    }

    #[test]
    fn an_answer_ends_the_outage_and_the_next_one_starts_afresh() {
        let mut p = Patience::new(60 * S);
        assert_eq!(p.reachable(S), None, "no outage, nothing to say");
        let _ = p.unreachable(10 * S, 0.5);
        let _ = p.unreachable(12 * S, 0.5);
        assert!(p.waiting());
        assert_eq!(p.reachable(50 * S), Some(40 * S));
        // The next outage gets the whole patience again, and a first notice.
        let (delay, notice) = retry(&p.unreachable(100 * S, 0.0));
        assert_eq!(delay, INITIAL / 2);
        assert_eq!(
            notice,
            Some(Notice {
                first: true,
                waited: Duration::ZERO,
                left: 60 * S
            })
        );
    }
}
