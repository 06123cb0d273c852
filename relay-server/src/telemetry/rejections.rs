//! Streams the relay refused, counted by reason for `/metrics` and logged at a
//! bounded rate. Refusals are what an unauthenticated peer can make the relay do
//! as fast as it can open streams, so each costs a counter increment and, at most
//! `RATE_PER_SEC` times a second (after a burst of `BURST`), one log line. The
//! rest are counted: the next logged line says how many it follows, and when no
//! line could be logged for `SUMMARY_EVERY`, a "suppressed" line says so.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use relay_proto::logsafe::{MAX_LOG_CHARS, safe_to};
use relay_proto::protocol::Code;

use crate::telemetry::exposition::{Exposition, Kind};

/// Why a stream was refused: before its Offer was parsed (the frame layer), or
/// after (the Reject's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The first frame was too long or not a valid message.
    BadFrame,
    /// The first message was not an Offer.
    NotOffer,
    /// No complete Offer within the deadline (a slow or silent peer).
    OfferTimeout,
    /// The stream ended or was reset before a complete Offer.
    ClosedEarly,
    /// The Offer was parsed and refused with this code.
    Code(Code),
}

/// Every code, in the order `/metrics` lists them. A new code fails to compile
/// in `Code::label`'s exhaustive match first; name it here too.
const CODES: [Code; 17] = [
    Code::Unauthorized,
    Code::Forbidden,
    Code::InvalidName,
    Code::InvalidOffer,
    Code::UnsupportedVersion,
    Code::TooLarge,
    Code::Exists,
    Code::Busy,
    Code::HashMismatch,
    Code::Truncated,
    Code::Conflict,
    Code::Storage,
    Code::StorageRefused,
    Code::BadEncoding,
    Code::NotFound,
    Code::Changed,
    Code::Internal,
];

const FRAME_REASONS: [Reason; 4] = [
    Reason::BadFrame,
    Reason::NotOffer,
    Reason::OfferTimeout,
    Reason::ClosedEarly,
];

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::BadFrame => "bad_frame",
            Reason::NotOffer => "not_offer",
            Reason::OfferTimeout => "offer_timeout",
            Reason::ClosedEarly => "closed_early",
            Reason::Code(c) => c.label(),
        }
    }

    /// Index into the counters: frame reasons first, then codes.
    pub(crate) fn index(self) -> usize {
        match self {
            Reason::Code(c) => FRAME_REASONS.len() + code_index(c),
            other => FRAME_REASONS
                .iter()
                .position(|r| *r == other)
                .unwrap_or_default(),
        }
    }

    /// Every reason once, in counter order.
    pub(crate) fn all() -> impl Iterator<Item = Reason> {
        FRAME_REASONS
            .into_iter()
            .chain(CODES.into_iter().map(Reason::Code))
    }
}

pub(crate) const REASON_COUNT: usize = FRAME_REASONS.len() + CODES.len();

fn code_index(code: Code) -> usize {
    // Every code is in CODES (see `Code::label`); the fallback is never taken.
    CODES.iter().position(|c| *c == code).unwrap_or_default()
}

/// Rejection log lines per second in the long run.
pub const RATE_PER_SEC: u32 = 10;
/// Lines that may come at once after a quiet spell.
pub const BURST: u32 = 20;
/// How often, at most, a "suppressed" line sums up what was not logged.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What to log for one rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it, with how many were suppressed since the last line.
    Log { suppressed: u64 },
    /// Do not log it, but say how many were suppressed (this one included).
    Summary { suppressed: u64 },
    /// Do not log it.
    Quiet,
}

/// A token bucket for log lines, with time passed in (pure, so tests need no
/// sleeps): `rate` tokens a second up to `burst`; one token per line.
#[derive(Debug)]
pub struct LogLimiter {
    rate_per_sec: f64,
    burst: f64,
    tokens: f64,
    refilled: Option<Instant>,
    suppressed: u64,
    summarised: Option<Instant>,
    summary_every: Duration,
}

impl LogLimiter {
    pub fn new(rate_per_sec: u32, burst: u32, summary_every: Duration) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate_per_sec: f64::from(rate_per_sec),
            burst,
            tokens: burst,
            refilled: None,
            suppressed: 0,
            summarised: None,
            summary_every,
        }
    }

    pub fn admit(&mut self, now: Instant) -> Verdict {
        if let Some(then) = self.refilled {
            let earned = now.saturating_duration_since(then).as_secs_f64() * self.rate_per_sec;
            self.tokens = (self.tokens + earned).min(self.burst);
        }
        self.refilled = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.summarised = Some(now);
            return Verdict::Log {
                suppressed: std::mem::take(&mut self.suppressed),
            };
        }
        self.suppressed += 1;
        let due = self
            .summarised
            .is_none_or(|t| now.saturating_duration_since(t) >= self.summary_every);
        if due {
            self.summarised = Some(now);
            Verdict::Summary {
                suppressed: std::mem::take(&mut self.suppressed),
            }
        } else {
            Verdict::Quiet
        }
    }
}

/// The relay's rejection counters and its rejection log.
#[derive(Debug)]
pub struct Rejections {
    counts: [AtomicU64; REASON_COUNT],
    log: Mutex<LogLimiter>,
}

impl Default for Rejections {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            log: Mutex::new(LogLimiter::new(RATE_PER_SEC, BURST, SUMMARY_EVERY)),
        }
    }
}

impl Rejections {
    /// Counts one rejection and logs it if the rate allows. `message` comes from
    /// the peer's input in part; it is escaped and cut here.
    pub fn record(&self, reason: Reason, message: &str) {
        self.counts[reason.index()].fetch_add(1, Ordering::Relaxed);
        let verdict = self
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(Instant::now());
        match verdict {
            // The message is the relay's, with at most a short, escaped excerpt of
            // the peer's input (see `blob_name`); room for the excerpt and the reason.
            Verdict::Log { suppressed: 0 } => {
                tracing::info!(reason = reason.label(), detail = %safe_to(message, 3 * MAX_LOG_CHARS), "rejected");
            }
            Verdict::Log { suppressed } => {
                tracing::info!(
                    reason = reason.label(),
                    detail = %safe_to(message, 3 * MAX_LOG_CHARS),
                    not_logged_before = suppressed,
                    "rejected (rejections between this and the previous line were counted, not logged)"
                );
            }
            Verdict::Summary { suppressed } => log_suppressed(suppressed),
            Verdict::Quiet => {}
        }
    }

    pub fn get(&self, reason: Reason) -> u64 {
        self.counts[reason.index()].load(Ordering::Relaxed)
    }

    /// One labelled counter, every reason present (at 0 too) from the start.
    pub fn render(&self, out: &mut Exposition) {
        out.labelled(
            "blob_relay_rejections_total",
            Kind::Counter,
            "Streams refused before their Plan, by reason: bad_frame, not_offer, offer_timeout and closed_early before an Offer was parsed, else the Reject's code.",
            Reason::all().map(|r| ([("reason", r.label())], self.get(r))),
        );
    }
}

fn log_suppressed(n: u64) {
    tracing::warn!(
        suppressed = n,
        "rejections counted, not logged (rate limit); blob_relay_rejections_total counts every one"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_burst_is_logged_then_suppressed_then_summed_up() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(10, 3, Duration::from_secs(10));
        // The burst passes at once.
        for _ in 0..3 {
            assert_eq!(l.admit(t0), Verdict::Log { suppressed: 0 });
        }
        // Then nothing.
        for _ in 0..1000 {
            assert_eq!(l.admit(t0), Verdict::Quiet);
        }
        // 100 ms later one token is back: logged, with the count it missed.
        assert_eq!(l.admit(at(t0, 100)), Verdict::Log { suppressed: 1000 });
        assert_eq!(l.admit(at(t0, 100)), Verdict::Quiet);
    }

    #[test]
    fn a_flood_gives_a_bounded_number_of_lines() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(10, 20, Duration::from_secs(10));
        let (mut lines, mut counted) = (0u64, 0u64);
        // 100,000 rejections a second for 60 s (one every 10 µs).
        for i in 0..6_000_000u64 {
            match l.admit(t0 + Duration::from_micros(i * 10)) {
                Verdict::Log { suppressed } => {
                    lines += 1 + u64::from(suppressed > 0);
                    counted += 1 + suppressed;
                }
                Verdict::Summary { suppressed } => {
                    lines += 1;
                    counted += suppressed;
                }
                Verdict::Quiet => {}
            }
        }
        // About the burst plus 10 a second (each carrying its suppressed count),
        // never more than twice that.
        assert!(lines <= 2 * (20 + 10 * 60) + 6 + 1, "{lines} lines");
        assert!(lines >= 20 + 10 * 59, "{lines} lines");
        // Everything not yet reported is still pending, nothing is lost.
        assert_eq!(counted + l.suppressed, 6_000_000);
    }

    #[test]
    fn a_quiet_relay_logs_every_rejection() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(10, 20, Duration::from_secs(10));
        for s in 0..100 {
            assert_eq!(
                l.admit(t0 + Duration::from_secs(s)),
                Verdict::Log { suppressed: 0 }
            );
        }
    }

    #[test]
    fn summaries_come_at_most_once_per_period() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(0, 1, Duration::from_secs(10));
        assert_eq!(l.admit(t0), Verdict::Log { suppressed: 0 });
        assert_eq!(l.admit(t0), Verdict::Quiet);
        assert_eq!(l.admit(at(t0, 9_999)), Verdict::Quiet);
        assert_eq!(l.admit(at(t0, 10_000)), Verdict::Summary { suppressed: 3 });
        assert_eq!(l.admit(at(t0, 10_001)), Verdict::Quiet);
        // A clock that steps back does not panic or refill.
        assert_eq!(l.admit(t0), Verdict::Quiet);
    }

    #[test]
    fn every_reason_has_its_own_series() {
        let r = Rejections::default();
        r.record(Reason::OfferTimeout, "no Offer within 30 s");
        r.record(Reason::Code(Code::InvalidName), "bad\nname");
        r.record(Reason::Code(Code::InvalidName), "bad\nname");
        let mut e = Exposition::default();
        r.render(&mut e);
        let out = e.encode();
        assert_eq!(
            out.matches("# TYPE blob_relay_rejections counter").count(),
            1
        );
        let labels: Vec<&str> = Reason::all().map(Reason::label).collect();
        assert_eq!(labels.len(), REASON_COUNT);
        for (i, a) in labels.iter().enumerate() {
            assert!(!labels[i + 1..].contains(a), "{a} twice");
            assert!(
                out.contains(&format!("blob_relay_rejections_total{{reason=\"{a}\"}} ")),
                "{a}: {out}"
            );
        }
        assert!(out.contains("{reason=\"offer_timeout\"} 1\n"), "{out}");
        assert!(out.contains("{reason=\"invalid_name\"} 2\n"), "{out}");
        assert!(out.contains("{reason=\"bad_frame\"} 0\n"), "{out}");
        for c in CODES {
            assert_eq!(Reason::Code(c).label(), c.label());
            // Labels are the codes' wire names.
            let wire = serde_json::to_value(c).unwrap_or_default();
            assert_eq!(wire.as_str(), Some(c.label()));
        }
    }
}
