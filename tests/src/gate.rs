//! A relay transfer held at a chosen offset until the test lets it go: the
//! relay's pace hooks (`TestHooks::pace` for uploads, `fetch_pace` for
//! downloads) block the first transfer that reaches `at` bytes. Stops a test at a chosen point without timing: what happens
//! meanwhile (a token expiring, a client killed) happens while the transfer is
//! provably mid-file.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use relay_storage::staging::Pace;

/// Holds the relay's first transfer once it has read `at` bytes, until released.
pub struct Gate {
    at: u64,
    armed: AtomicBool,
    holding: AtomicBool,
    released: AtomicBool,
    received: AtomicU64,
}

impl Gate {
    pub fn new(at: u64) -> Arc<Self> {
        Arc::new(Self {
            at,
            armed: AtomicBool::new(true),
            holding: AtomicBool::new(false),
            released: AtomicBool::new(false),
            received: AtomicU64::new(0),
        })
    }

    /// A transfer is held at the gate.
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// Lets the held transfer (and any later one) go on.
    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// Holds the next transfer that reaches `at` bytes, as the first one was.
    pub fn rearm(&self) {
        self.holding.store(false, Ordering::SeqCst);
        self.released.store(false, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// The furthest offset the relay has read in any transfer.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }

    /// Waits (polling; a bound against hangs only) until a transfer is held.
    pub async fn wait_holding(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.holding() {
            assert!(Instant::now() < deadline, "no transfer reached the gate");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The hook for `TestHooks::pace` or `TestHooks::fetch_pace`.
    pub fn pace(self: &Arc<Self>) -> Pace {
        let g = self.clone();
        Arc::new(move |offset, len| {
            let end = offset + len as u64;
            g.received.fetch_max(end, Ordering::SeqCst);
            if end >= g.at && g.armed.swap(false, Ordering::SeqCst) {
                g.holding.store(true, Ordering::SeqCst);
                // The hook is synchronous: block this thread (tokio moves other
                // work elsewhere) until released; the bound only stops a hang.
                tokio::task::block_in_place(|| {
                    let deadline = Instant::now() + Duration::from_secs(120);
                    while !g.released.load(Ordering::SeqCst) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                });
            }
            Duration::ZERO
        })
    }
}
