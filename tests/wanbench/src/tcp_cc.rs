//! Pinning TCP congestion control for clients we cannot change.
//!
//! relay-client --direct and the Python SDK open sockets with the namespace's
//! default controller, so each run sets the site namespace's
//! `net.ipv4.tcp_congestion_control`. The kernel lets a non-initial namespace
//! default only to controllers in the host-wide
//! `net.ipv4.tcp_allowed_congestion_control` list (EPERM otherwise), so
//! `AllowGuard` adds what the bench needs to that list while any bench on
//! the host runs, and the last one to end restores the host's list.

use std::io::{Read, Seek, Write};

use anyhow::Context;
use linklab::{Lab, Side};

const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// Where benches on one host agree on the allowed list: an flock held shared
/// for each bench's life, and the list as it was before the first bench
/// extended it.
const LOCK: &str = "/run/wanbench-tcp-cc.lock";

/// Keeps the controllers allowed while any bench on the host runs; the last
/// to drop restores the host's list. Each bench restoring its own view raced:
/// one ending put the list back while another still pinned CUBIC (EPERM).
pub struct AllowGuard {
    lock: std::fs::File,
}

impl AllowGuard {
    /// Make `wanted` allowed (call from the host namespace).
    pub fn ensure(wanted: &[&str]) -> anyhow::Result<Self> {
        let available = std::fs::read_to_string(AVAILABLE).context("read available controllers")?;
        for cc in wanted {
            anyhow::ensure!(
                available.split_whitespace().any(|a| a == *cc),
                "TCP congestion control {cc} is not available (have: {})",
                available.trim()
            );
        }
        let mut lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(LOCK)
            .with_context(|| format!("open {LOCK}"))?;
        // Exclusive while the list is read and extended, then shared.
        flock(&lock, libc::LOCK_EX).with_context(|| format!("lock {LOCK}"))?;
        let current = std::fs::read_to_string(ALLOWED).context("read allowed controllers")?;
        let mut list: Vec<&str> = current.split_whitespace().collect();
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|cc| !list.contains(cc))
            .collect();
        if !missing.is_empty() {
            let mut saved = String::new();
            lock.read_to_string(&mut saved)
                .context("read the saved list")?;
            if saved.trim().is_empty() {
                lock.write_all(current.trim().as_bytes())
                    .context("save the host's allowed list")?;
            }
            list.extend(missing);
            std::fs::write(ALLOWED, list.join(" "))
                .context("extend tcp_allowed_congestion_control")?;
        }
        flock(&lock, libc::LOCK_SH).with_context(|| format!("lock {LOCK} shared"))?;
        Ok(Self { lock })
    }
}

impl Drop for AllowGuard {
    fn drop(&mut self) {
        // Only the last bench on the host gets the lock to itself.
        if flock(&self.lock, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return;
        }
        let mut saved = String::new();
        let read = self
            .lock
            .seek(std::io::SeekFrom::Start(0))
            .and_then(|_| self.lock.read_to_string(&mut saved));
        if read.is_err() || saved.trim().is_empty() {
            return;
        }
        if let Err(e) = std::fs::write(ALLOWED, saved.trim()) {
            eprintln!(
                "wanbench: could not restore tcp_allowed_congestion_control to {saved:?}: {e}"
            );
            return;
        }
        let _ = self.lock.set_len(0);
    }
}

/// `flock(2)` on `file` (std's `File::lock` needs a newer Rust than our MSRV).
/// Taking another mode on a held lock converts it.
fn flock(file: &std::fs::File, op: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for as long as `file` is borrowed.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Set the site namespace's default controller and read it back.
pub fn pin_site(lab: &Lab, cc: &'static str) -> anyhow::Result<()> {
    pin(lab, Side::Site, cc.to_string())
}

/// Set `side`'s default controller and read it back. A download's sender is
/// the cloud side (storage), so direct download rows pin the cloud namespace
/// before storage starts: a listening socket keeps the default it was made with.
pub fn pin(lab: &Lab, side: Side, cc: String) -> anyhow::Result<()> {
    let want = cc.clone();
    let got = lab.run_in(side, move || {
        linklab::netns::write_sysctl("net.ipv4.tcp_congestion_control", &cc)?;
        Ok(std::fs::read_to_string(
            "/proc/sys/net/ipv4/tcp_congestion_control",
        )?)
    })?;
    anyhow::ensure!(
        got.trim() == want,
        "{side:?} namespace kept congestion control {:?}, not {want}",
        got.trim()
    );
    Ok(())
}

/// `side`'s default controller.
pub fn current(lab: &Lab, side: Side) -> anyhow::Result<String> {
    let got = lab.run_in(side, || {
        Ok(std::fs::read_to_string(
            "/proc/sys/net/ipv4/tcp_congestion_control",
        )?)
    })?;
    Ok(got.trim().to_string())
}
