//! Pinning TCP congestion control for clients we cannot change.
//!
//! relay-client --direct and the Python SDK open sockets with the namespace's
//! default controller, so each run sets the site namespace's
//! `net.ipv4.tcp_congestion_control`. The kernel lets a non-initial namespace
//! default only to controllers in the host-wide
//! `net.ipv4.tcp_allowed_congestion_control` list (EPERM otherwise), so
//! `AllowGuard` adds what the bench needs to that list for the bench's
//! lifetime and restores the previous list on drop.

use anyhow::Context;
use linklab::{Lab, Side};

const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// Restores the host's allowed list when dropped.
pub struct AllowGuard {
    previous: Option<String>,
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
        let current = std::fs::read_to_string(ALLOWED).context("read allowed controllers")?;
        let mut list: Vec<&str> = current.split_whitespace().collect();
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|cc| !list.contains(cc))
            .collect();
        if missing.is_empty() {
            return Ok(Self { previous: None });
        }
        list.extend(missing);
        std::fs::write(ALLOWED, list.join(" ")).context("extend tcp_allowed_congestion_control")?;
        Ok(Self {
            previous: Some(current.trim().to_string()),
        })
    }
}

impl Drop for AllowGuard {
    fn drop(&mut self) {
        if let Some(prev) = &self.previous
            && let Err(e) = std::fs::write(ALLOWED, prev)
        {
            eprintln!(
                "wanbench: could not restore tcp_allowed_congestion_control to {prev:?}: {e}"
            );
        }
    }
}

/// Set the site namespace's default controller and read it back.
pub fn pin_site(lab: &Lab, cc: &'static str) -> anyhow::Result<()> {
    let got = lab.run_in(Side::Site, move || {
        linklab::netns::write_sysctl("net.ipv4.tcp_congestion_control", cc)?;
        Ok(std::fs::read_to_string(
            "/proc/sys/net/ipv4/tcp_congestion_control",
        )?)
    })?;
    anyhow::ensure!(
        got.trim() == cc,
        "site namespace kept congestion control {:?}, not {cc}",
        got.trim()
    );
    Ok(())
}
