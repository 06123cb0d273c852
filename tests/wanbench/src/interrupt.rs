//! SIGINT / SIGTERM stop the bench between runs instead of killing it, so the
//! lab (namespaces, TUNs), Azurite, the relay and the host's
//! `tcp_allowed_congestion_control` are cleaned up by their `Drop`s. The run in
//! progress still ends by itself or at the time cap.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Installs the handlers. Handlers (unlike ignored or blocked signals) reset to
/// the default on exec, so the children keep their normal SIGTERM behaviour.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Fails once a stop was requested (checked before each run).
pub fn check() -> anyhow::Result<()> {
    if REQUESTED.load(Ordering::Relaxed) {
        anyhow::bail!("interrupted (SIGINT/SIGTERM): stopped between runs, lab cleaned up");
    }
    Ok(())
}
