//! Giving memory back once a watch goes quiet.
//!
//! A watch runs for months and is idle most of that time. While files move,
//! its buffers (chunks read ahead, QUIC send buffers, TLS records) come from
//! the allocator's per-thread arenas; once freed, glibc keeps those pages
//! mapped for reuse, so an idle watcher would keep what its last burst
//! needed for as long as nothing happened next.
//! When nothing has been waiting or in flight for `QUIET` the watch drops the
//! zstd contexts it keeps between files (`wire::drop_spare_compressors`, up
//! to 50 MB) and asks the allocator to return its free pages
//! (`malloc_trim`), once per quiet spell:
//! the next burst pays a few page faults, never a delay per file.

use std::time::{Duration, Instant};

/// How long nothing waits or moves before free memory is given back: long
/// enough that a steady trickle of files never triggers it between files.
pub const QUIET: Duration = Duration::from_secs(30);

/// Decides when a quiet spell has begun (pure: the caller says what it saw).
#[derive(Debug)]
pub struct Quiet {
    last_busy: Instant,
    given_back: bool,
}

impl Quiet {
    pub fn new(now: Instant) -> Self {
        // The start is busy (the first scan, the link's set-up).
        Self {
            last_busy: now,
            given_back: false,
        }
    }

    /// Called on each check tick with whether anything is waiting to settle,
    /// in flight or being scanned; true once per quiet spell, when memory
    /// should be given back.
    pub fn tick(&mut self, now: Instant, busy: bool) -> bool {
        if busy {
            self.last_busy = now;
            self.given_back = false;
            return false;
        }
        if self.given_back || now.saturating_duration_since(self.last_busy) < QUIET {
            return false;
        }
        self.given_back = true;
        true
    }
}

/// Returns the allocator's free pages to the system (glibc only; other
/// allocators and libcs give memory back on their own or not at all).
pub fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases pages the
    // allocator holds free, under the allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_once_per_quiet_spell() {
        let t0 = Instant::now();
        let mut q = Quiet::new(t0);
        assert!(!q.tick(t0 + QUIET / 2, false), "not quiet long enough yet");
        assert!(q.tick(t0 + QUIET, false), "quiet for QUIET since the start");
        assert!(!q.tick(t0 + QUIET * 3, false), "once per spell");
        // Activity starts a new spell, counted from its last busy tick.
        assert!(!q.tick(t0 + QUIET * 4, true));
        assert!(!q.tick(t0 + QUIET * 4 + QUIET / 2, false));
        assert!(q.tick(t0 + QUIET * 5, false));
    }

    #[test]
    fn a_steady_trickle_never_counts_as_quiet() {
        let t0 = Instant::now();
        let mut q = Quiet::new(t0);
        // A file every 20 s: each busy tick restarts the count.
        for i in 1..100u32 {
            let at = t0 + Duration::from_secs(20) * i;
            assert!(!q.tick(at, i % 2 == 0));
        }
    }
}
