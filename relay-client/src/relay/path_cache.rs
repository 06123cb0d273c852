//! Remembers what each relay path measured (bottleneck bandwidth, min RTT)
//! between runs, so the next connection starts warm: the relay controller jumps
//! to half the saved BDP once the first RTT sample confirms the path, instead of
//! doubling up from 14.7 KB for ~8 round trips (1.6 s at 200 ms). See
//! `relay_transport::congestion` (warm start) and docs/TRANSPORT.md.
//!
//! The file is a small JSON map; losing or corrupting it costs only a cold start,
//! so every error here is logged and ignored, never fatal to an upload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relay_transport::congestion::PathEstimate;
use serde::{Deserialize, Serialize};

/// Older estimates are ignored: paths and their load change over a day.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Relays remembered at most (the oldest go first).
const MAX_ENTRIES: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    bandwidth_bytes_per_s: u64,
    min_rtt_us: u64,
    saved_unix: u64,
}

type Entries = BTreeMap<String, Entry>;

/// The estimate saved for `key`, if recent enough to trust.
fn lookup(entries: &Entries, key: &str, now_unix: u64) -> Option<PathEstimate> {
    let e = entries.get(key)?;
    let age = now_unix.checked_sub(e.saved_unix)?;
    let estimate = PathEstimate {
        bandwidth: e.bandwidth_bytes_per_s,
        min_rtt: Duration::from_micros(e.min_rtt_us),
    };
    // Entries written before estimates were checked may hold what an idle
    // connection measured (bytes per second); those must not seed a start.
    (age <= MAX_AGE.as_secs() && estimate.plausible(initial_window())).then_some(estimate)
}

fn initial_window() -> u64 {
    relay_transport::congestion::Params::default().initial_window
}

/// Records `estimate` for `key`, keeping at most `MAX_ENTRIES` (newest win).
fn remember(entries: &mut Entries, key: &str, estimate: PathEstimate, now_unix: u64) {
    entries.insert(
        key.to_string(),
        Entry {
            bandwidth_bytes_per_s: estimate.bandwidth,
            min_rtt_us: u64::try_from(estimate.min_rtt.as_micros()).unwrap_or(u64::MAX),
            saved_unix: now_unix,
        },
    );
    while entries.len() > MAX_ENTRIES {
        let oldest = entries
            .iter()
            .min_by_key(|(_, e)| e.saved_unix)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => entries.remove(&k),
            None => break,
        };
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `$XDG_CACHE_HOME/blob-relay/paths.json`, else `~/.cache/blob-relay/paths.json`.
pub fn default_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("blob-relay").join("paths.json"))
}

/// One relay's entry in one cache file.
#[derive(Debug, Clone)]
pub struct PathCache {
    file: PathBuf,
    key: String,
}

impl PathCache {
    pub fn new(file: PathBuf, key: String) -> Self {
        Self { file, key }
    }

    pub fn load(&self) -> Option<PathEstimate> {
        lookup(&read(&self.file), &self.key, now_unix())
    }

    /// Saves `estimate` (read-modify-write; a concurrent client may win the race,
    /// which only costs it an older estimate).
    pub fn save(&self, estimate: PathEstimate) {
        if !estimate.plausible(initial_window()) {
            tracing::debug!(?estimate, "not saving an implausible path estimate");
            return;
        }
        let mut entries = read(&self.file);
        remember(&mut entries, &self.key, estimate, now_unix());
        if let Err(e) = write(&self.file, &entries) {
            tracing::debug!(file = %self.file.display(), error = %e, "cannot save path estimate");
        }
    }
}

fn read(file: &Path) -> Entries {
    match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::debug!(file = %file.display(), error = %e, "ignoring unreadable path cache");
            Entries::new()
        }),
        Err(_) => Entries::new(),
    }
}

/// Write to a temporary file and rename, so a reader never sees half a file.
fn write(file: &Path, entries: &Entries) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("tmp.{}", std::process::id()));
    let body = serde_json::to_vec_pretty(entries).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(mbit: u64, rtt_ms: u64) -> PathEstimate {
        PathEstimate {
            bandwidth: mbit * 125_000,
            min_rtt: Duration::from_millis(rtt_ms),
        }
    }

    #[test]
    fn recent_estimates_are_found_old_ones_are_not() {
        let mut m = Entries::new();
        remember(&mut m, "relay:4433", est(200, 100), 1_000);
        assert_eq!(lookup(&m, "relay:4433", 1_000), Some(est(200, 100)));
        assert_eq!(lookup(&m, "other:4433", 1_000), None);
        let late = 1_000 + MAX_AGE.as_secs() + 1;
        assert_eq!(lookup(&m, "relay:4433", late), None);
        // A clock that went backwards is not trusted either.
        assert_eq!(lookup(&m, "relay:4433", 999), None);
    }

    #[test]
    fn implausible_estimates_are_neither_used_nor_saved() {
        // What an idle connection measured (7 B/s), as older clients saved it.
        let idle = PathEstimate {
            bandwidth: 7,
            min_rtt: Duration::from_millis(200),
        };
        let mut m = Entries::new();
        remember(&mut m, "relay:4433", idle, 1_000);
        assert_eq!(lookup(&m, "relay:4433", 1_000), None);

        let dir = std::env::temp_dir().join(format!("path-cache-idle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = PathCache::new(dir.join("paths.json"), "relay".into());
        cache.save(est(150, 200));
        cache.save(idle);
        assert_eq!(cache.load(), Some(est(150, 200)), "the good estimate stays");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn keeps_the_newest_entries() {
        let mut m = Entries::new();
        for i in 0..(MAX_ENTRIES as u64 + 5) {
            remember(&mut m, &format!("r{i}"), est(100, 50), 10 + i);
        }
        assert_eq!(m.len(), MAX_ENTRIES);
        assert!(!m.contains_key("r0") && !m.contains_key("r4"));
        assert!(m.contains_key("r5") && m.contains_key(&format!("r{}", MAX_ENTRIES + 4)));
    }

    #[test]
    fn a_file_round_trips_and_garbage_is_ignored() {
        let dir = std::env::temp_dir().join(format!("path-cache-{}", std::process::id()));
        // A crashed run of an earlier process with this PID may have left it.
        let _ = std::fs::remove_dir_all(&dir);
        let file = dir.join("sub").join("paths.json");
        let cache = PathCache::new(file.clone(), "10.0.0.1:4433 relay".into());
        assert_eq!(cache.load(), None);
        cache.save(est(150, 200));
        assert_eq!(cache.load(), Some(est(150, 200)));
        std::fs::write(&file, b"{ not json").ok();
        assert_eq!(cache.load(), None);
        cache.save(est(90, 200));
        assert_eq!(cache.load(), Some(est(90, 200)));
        std::fs::remove_dir_all(&dir).ok();
    }
}
