//! Connection timers with microsecond resolution, for quinn's runtime
//! (`runtime`) and the socket's read ticks (`udp`).
//!
//! Why: quinn paces with a token bucket that holds ~2 ms of sending
//! and refills at 1.25 × the window per RTT; when it is empty the connection
//! sleeps until the bucket is full again, and whatever a late wake-up would have
//! added beyond full is lost. Tokio's timer rounds every deadline up to the next
//! whole millisecond, so the sender paces below the window per RTT once acks
//! come a batch at a time (`udp::policy`) and no longer wake it in between.
//! A timerfd wakes the connection when its deadline is due, not up to a
//! millisecond later.

use std::pin::Pin;
use std::time::Instant;

use quinn::AsyncTimer;

/// A timer that fires at `deadline` to the microsecond where the OS has a
/// timerfd, else Tokio's millisecond timer. Must be called inside a Tokio runtime.
pub(crate) fn precise_timer(deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
    #[cfg(target_os = "linux")]
    if let Ok(timer) = precise::PreciseTimer::new(deadline) {
        return Box::pin(timer);
    }
    Box::pin(tokio::time::sleep_until(deadline.into()))
}

#[cfg(target_os = "linux")]
mod precise {
    use std::fmt;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::pin::Pin;
    use std::task::{Context, Poll, ready};
    use std::time::{Duration, Instant};

    use quinn::AsyncTimer;
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    /// A one-shot timerfd registered with Tokio's reactor.
    pub struct PreciseTimer {
        fd: AsyncFd<OwnedFd>,
        deadline: Instant,
        /// What the timerfd is set to fire at; `None` once it fired.
        armed: Option<Instant>,
    }

    impl fmt::Debug for PreciseTimer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("PreciseTimer")
                .field("deadline", &self.deadline)
                .finish()
        }
    }

    impl PreciseTimer {
        /// Must be called inside a Tokio runtime.
        pub fn new(deadline: Instant) -> io::Result<Self> {
            // SAFETY: plain syscall; the result is checked before use.
            let raw = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a descriptor we just opened and own alone.
            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: the AsyncFd owns `owned`, which stays open until it is dropped.
            let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            let mut timer = Self {
                fd,
                deadline,
                armed: None,
            };
            timer.arm()?;
            Ok(timer)
        }

        /// Sets the timerfd to fire at `deadline` (at once if it has passed).
        fn arm(&mut self) -> io::Result<()> {
            // std's Instant is CLOCK_MONOTONIC on Linux, but opaque: arm with
            // the time left, at least 1 ns (zero would disarm).
            let left = self
                .deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                },
            };
            // SAFETY: valid descriptor and a fully initialised itimerspec.
            let rc = unsafe {
                libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            self.armed = Some(self.deadline);
            Ok(())
        }
    }

    impl AsyncTimer for PreciseTimer {
        fn reset(self: Pin<&mut Self>, deadline: Instant) {
            let this = self.get_mut();
            this.deadline = deadline;
            // A later deadline needs no syscall now: the timerfd fires early
            // and `poll` sets it again. quinn moves deadlines later far more
            // often than earlier (every ack pushes the loss and idle timers).
            if this.armed.is_some_and(|armed| armed <= deadline) {
                return;
            }
            // Arming a valid timerfd cannot fail; if it did, `poll` still
            // reports the deadline by the clock whenever the task is polled.
            let _ = this.arm();
        }

        fn poll(self: Pin<&mut Self>, cx: &mut Context) -> Poll<()> {
            let this = self.get_mut();
            loop {
                if Instant::now() >= this.deadline {
                    return Poll::Ready(());
                }
                if this.armed.is_none() {
                    let _ = this.arm();
                }
                let Ok(mut guard) = ready!(this.fd.poll_read_ready(cx)) else {
                    // The reactor is gone (runtime shutting down): nothing will
                    // ever wake us; report the timer as fired.
                    return Poll::Ready(());
                };
                // Consume the expiry count so the next expiry is a new event; an
                // expiry of an earlier deadline (reset since) just loops.
                let mut count = [0u8; 8];
                let fired = guard.try_io(|fd| {
                    // SAFETY: reading 8 bytes into an 8-byte buffer.
                    let n = unsafe {
                        libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len())
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
                if matches!(fired, Ok(Ok(()))) {
                    this.armed = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Waits until `timer` fires; returns when that was.
    async fn fired(timer: &mut Pin<Box<dyn AsyncTimer>>) -> Instant {
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
        Instant::now()
    }

    fn after_ms(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn a_timer_fires_at_its_deadline_not_before() {
        let start = Instant::now();
        let mut timer = precise_timer(after_ms(start, 3));
        assert!(fired(&mut timer).await >= after_ms(start, 3));
    }

    #[tokio::test]
    async fn a_reset_timer_fires_at_its_new_deadline() {
        let start = Instant::now();
        let mut timer = precise_timer(after_ms(start, 3_600_000));
        timer.as_mut().reset(after_ms(start, 2));
        assert!(fired(&mut timer).await >= after_ms(start, 2));
        // A deadline in the past fires at once.
        timer.as_mut().reset(start);
        fired(&mut timer).await;
    }

    #[tokio::test]
    async fn a_deadline_moved_later_is_waited_for() {
        let start = Instant::now();
        let mut timer = precise_timer(after_ms(start, 1));
        // Not re-armed now: the timerfd fires at 1 ms, and poll sets it again.
        timer.as_mut().reset(after_ms(start, 4));
        assert!(fired(&mut timer).await >= after_ms(start, 4));
    }
}
