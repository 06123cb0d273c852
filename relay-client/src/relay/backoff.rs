//! How long the client waits before it tries again, in one place: a file
//! (or a listing) after a failure it may get past, a relay at its connection
//! limit, and a relay that cannot be reached (`patience`).

use std::time::Duration;

use relay_storage::retry::Backoff;

/// The first wait after a failed try; doubled each time.
pub const INITIAL: Duration = Duration::from_millis(500);
/// The longest wait between tries of one piece of work: a relay or storage
/// that comes back is noticed within this.
pub const CAP: Duration = Duration::from_secs(15);
/// The longest wait between two asks of a relay at its connection limit:
/// it answers "busy", meaning later, and a slot frees whenever another
/// client ends, so it is asked more often than a failure is retried.
pub const BUSY_CAP: Duration = Duration::from_secs(8);

/// The backoff of one piece of work (a file, a listing) over `attempts`
/// tries in all.
pub fn attempts(attempts: u32) -> Backoff {
    Backoff {
        initial: INITIAL,
        cap: CAP,
        max_attempts: attempts,
    }
}

/// How a relay at its connection limit is asked again (up to `--busy-wait`).
pub const BUSY: Backoff = Backoff {
    initial: INITIAL,
    cap: BUSY_CAP,
    max_attempts: u32::MAX,
};
