//! One unit of work over the run's connection (a file's upload or download, a
//! listing), tried again until it is done or trying again cannot help.
//!
//! `Retries` is the policy, pure (time and the random draw for jitter come
//! in as arguments): a relay at its connection limit is asked again within
//! `--busy-wait` and that is no attempt; a connection lost to an outage the
//! link waited out is no attempt either; any other failure it may get past
//! waits its backoff, within `--attempts`. `Tries` is the shell that gets
//! the connection, tells how a try ended, and sleeps.

use std::time::{Duration, Instant};

use quinn::Connection;
use relay_storage::retry::Backoff;

use crate::relay::backoff;
use crate::relay::connect::is_busy;
use crate::relay::link::{RelayLink, out_of_patience};
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// How one try ended, as far as trying again goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The relay closed the connection because every slot was taken:
    /// "later", not a failure of this work.
    Busy,
    /// The connection was lost to an outage the link waited out: not an
    /// attempt, and no backoff (the link waited already).
    Weathered,
    /// A failure of this work; another try may get past it if `retryable`.
    Failed { retryable: bool },
}

/// What to do after a try that did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again at once.
    Now,
    /// Try again after this wait.
    After(Duration),
    /// The relay stayed at its connection limit past `--busy-wait`.
    BusyTooLong,
    /// Stop with the last failure.
    GiveUp,
}

/// The retry state of one unit of work.
#[derive(Debug, Clone)]
pub struct Retries {
    backoff: Backoff,
    busy_wait: Duration,
    /// Tries that count as attempts so far.
    pub attempts: u32,
    /// Times the work went on over a new connection after an outage.
    pub reconnects: u32,
    /// Since when (on the caller's clock) and how often the relay was busy.
    busy: Option<(Duration, u32)>,
}

impl Retries {
    /// `attempts` tries in all (at least one); a busy relay is waited for up
    /// to `busy_wait`.
    pub fn new(attempts: u32, busy_wait: Duration) -> Self {
        Self {
            backoff: backoff::attempts(attempts.max(1)),
            busy_wait,
            attempts: 0,
            reconnects: 0,
            busy: None,
        }
    }

    /// A try begins.
    pub fn begin(&mut self) {
        self.attempts += 1;
    }

    /// A try ended as `ended` at `now` (any clock that started with the
    /// work); `draw` is uniform in [0, 1), the jitter.
    pub fn after(&mut self, ended: Ended, now: Duration, draw: f64) -> Next {
        match ended {
            Ended::Weathered => {
                self.attempts -= 1;
                self.reconnects += 1;
                Next::Now
            }
            Ended::Busy => {
                let (since, times) = self.busy.get_or_insert((now, 0));
                *times += 1;
                let delay = backoff::BUSY.delay(*times, draw);
                if now.saturating_sub(*since) + delay > self.busy_wait {
                    return Next::BusyTooLong;
                }
                // Not an attempt: it never reached the relay's pipeline.
                self.attempts -= 1;
                Next::After(delay)
            }
            Ended::Failed { retryable: true } if self.backoff.allows(self.attempts) => {
                Next::After(self.backoff.delay(self.attempts, draw))
            }
            Ended::Failed { .. } => Next::GiveUp,
        }
    }

    /// The failure that ends a wait for a busy relay.
    fn busy_too_long(&self) -> FileError {
        FileError::new(
            ErrorCode::Connection,
            format!(
                "the relay stayed at its connection limit for {} s (--busy-wait)",
                self.busy_wait.as_secs()
            ),
            true,
        )
    }
}

/// A unit of work `Tries::drive` tries again: one try on the connection it
/// is given (none in direct mode), keeping in `self` what a later try takes
/// up (a listing's cursor).
pub trait Work {
    type Done;
    fn attempt(
        &mut self,
        conn: Option<&Connection>,
    ) -> impl Future<Output = Result<Self::Done, FileError>> + Send;
}

/// The tries of one unit of work over `link`'s connection (got anew for
/// each try; while the relay cannot be reached the link waits within
/// `--patience`, and once it gave up this waits to be dropped: the run stops
/// resumably), or with no connection (direct mode). `drive` is the loop
/// of a unit of work; a caller whose try needs more than the connection
/// writes it with `begin` and `failed`:
///
/// ```ignore
/// loop {
///     let conn = tries.begin().await?;
///     match work(conn.as_ref()).await {
///         Ok(v) => break v,
///         Err(e) => tries.failed(e, conn.as_ref()).await?,
///     }
/// }
/// ```
pub struct Tries<'a> {
    link: Option<&'a RelayLink>,
    pub retries: Retries,
    /// Outages the link had seen when the current try began.
    outages: u64,
    t0: Instant,
    /// The work, in the log.
    what: String,
}

impl<'a> Tries<'a> {
    pub fn new(link: Option<&'a RelayLink>, attempts: u32, what: String) -> Self {
        let busy_wait = link.map_or(Duration::ZERO, |l| l.busy_wait);
        Self {
            link,
            retries: Retries::new(attempts, busy_wait),
            outages: 0,
            t0: Instant::now(),
            what,
        }
    }

    /// `work` on each try's connection (none in direct mode) until it
    /// succeeds, or the failure that ends it.
    pub async fn drive<W: Work>(&mut self, work: &mut W) -> Result<W::Done, FileError> {
        loop {
            let conn = self.begin().await?;
            match work.attempt(conn.as_ref()).await {
                Ok(v) => return Ok(v),
                Err(e) => self.failed(e, conn.as_ref()).await?,
            }
        }
    }

    /// Tries that counted as attempts so far.
    pub fn attempts(&self) -> u32 {
        self.retries.attempts
    }

    /// A try begins: the connection to make it on (none in direct mode), or
    /// why no try can be made any more.
    pub async fn begin(&mut self) -> Result<Option<Connection>, FileError> {
        loop {
            self.retries.begin();
            let Some(link) = self.link else {
                return Ok(None);
            };
            match link.get().await {
                Ok(conn) => {
                    self.outages = link.outages();
                    return Ok(Some(conn));
                }
                Err(_) if link.gave_up() => match out_of_patience().await {},
                Err(e) => {
                    let retryable = e.retryable;
                    self.wait(e, Ended::Failed { retryable }).await?;
                }
            }
        }
    }

    /// The try on `conn` failed with `e`: after the wait the policy asks
    /// for, `Ok` to try again; else the failure that ends the work.
    pub async fn failed(
        &mut self,
        e: FileError,
        conn: Option<&Connection>,
    ) -> Result<(), FileError> {
        let ended = match (self.link, conn) {
            (Some(link), Some(conn)) => self.ended(link, conn, &e).await,
            _ => Ended::Failed {
                retryable: e.retryable,
            },
        };
        self.wait(e, ended).await
    }

    /// How a failed try on `link`'s `conn` ended: lost to an outage the link
    /// waited out, closed by a busy relay, or a failure of this work.
    async fn ended(&self, link: &RelayLink, conn: &Connection, e: &FileError) -> Ended {
        let reason = conn.close_reason();
        let busy = reason.as_ref().is_some_and(is_busy);
        let lost = e.retryable && reason.is_some() && !busy;
        if lost && link.patient() && link.weathered(self.outages).await {
            Ended::Weathered
        } else if busy {
            Ended::Busy
        } else {
            Ended::Failed {
                retryable: e.retryable,
            }
        }
    }

    async fn wait(&mut self, e: FileError, ended: Ended) -> Result<(), FileError> {
        let what = self.what.as_str();
        match self
            .retries
            .after(ended, self.t0.elapsed(), rand::random::<f64>())
        {
            Next::Now => {
                tracing::info!(what, "going on after the network came back");
            }
            Next::After(delay) if ended == Ended::Busy => {
                tracing::warn!(what, ?delay, "relay busy; waiting for a free slot");
                tokio::time::sleep(delay).await;
            }
            Next::After(delay) => {
                let attempt = self.retries.attempts;
                tracing::warn!(what, attempt, ?delay, error = %e.message, "retrying");
                tokio::time::sleep(delay).await;
            }
            Next::BusyTooLong => return Err(self.retries.busy_too_long()),
            Next::GiveUp => return Err(e),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_retryable_failure_waits_its_backoff_within_the_attempts() {
        let mut r = Retries::new(3, 10 * S);
        let failed = Ended::Failed { retryable: true };
        r.begin();
        assert_eq!(r.after(failed, S, 0.0), Next::After(backoff::INITIAL / 2));
        r.begin();
        assert_eq!(r.after(failed, S, 0.0), Next::After(backoff::INITIAL));
        r.begin();
        assert_eq!(r.after(failed, S, 0.0), Next::GiveUp);
        assert_eq!(r.attempts, 3);
    }

    #[test]
    fn a_failure_no_try_can_get_past_ends_at_once() {
        let mut r = Retries::new(6, 10 * S);
        r.begin();
        assert_eq!(
            r.after(Ended::Failed { retryable: false }, S, 0.5),
            Next::GiveUp
        );
        assert_eq!(r.attempts, 1);
    }

    #[test]
    fn an_outage_waited_out_is_no_attempt() {
        let mut r = Retries::new(1, 10 * S);
        for _ in 0..5 {
            r.begin();
            assert_eq!(r.after(Ended::Weathered, S, 0.5), Next::Now);
        }
        assert_eq!((r.attempts, r.reconnects), (0, 5));
        r.begin();
        assert_eq!(
            r.after(Ended::Failed { retryable: true }, S, 0.5),
            Next::GiveUp
        );
    }

    #[test]
    fn a_busy_relay_is_waited_for_up_to_busy_wait_and_is_no_attempt() {
        let mut r = Retries::new(1, 10 * S);
        let mut now = Duration::ZERO;
        let mut waits = 0;
        loop {
            r.begin();
            match r.after(Ended::Busy, now, 0.99) {
                Next::After(d) => {
                    assert!(d <= backoff::BUSY_CAP);
                    now += d;
                    waits += 1;
                }
                Next::BusyTooLong => break,
                other => panic!("{other:?}"),
            }
        }
        assert!(now <= 10 * S, "{now:?}");
        assert!(waits >= 3, "{waits}");
        // The try that found it still busy counts; the waits before did not.
        assert_eq!(r.attempts, 1);
        assert!(r.busy_too_long().message.contains("10 s (--busy-wait)"));
    }
}
