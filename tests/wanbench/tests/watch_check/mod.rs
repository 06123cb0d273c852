//! Checking the watch bench's blobs as the run goes: every committed blob is
//! downloaded and hashed against its Receipt's SHA-256 (the test checks each
//! Receipt against its file's), then deleted.
//!
//! Why delete: a storage account's cost per request does not grow with the
//! blobs it holds; in-memory Azurite's does (docs/BENCHMARKS.md, "Per
//! profile"). In run 3 of docs/bench/watch/ it spent a whole core from the
//! sixth minute on (about 15,000 blobs, 4 GB held), committed 25 files a
//! second where 50 were written, and set every latency after that. Deleting
//! what was checked keeps Azurite's store small, as a real account behaves;
//! the checking itself costs Azurite a download and a delete per file.
//! `WATCH_WAN_KEEP_BLOBS=1` keeps every blob and checks them all at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use linklab::Lab;

use super::Seen;
use super::cloud::{self, Verdict};

/// What the checks found.
#[derive(Default)]
pub struct Checked {
    /// Downloaded, hashed to the Receipt's SHA-256, then deleted.
    pub same: usize,
    /// Downloaded and hashed to something else (kept for the report).
    pub differs: Vec<String>,
    /// No download succeeded: kept, and looked at again at the end.
    pub unread: Vec<(String, String)>,
}

/// Checks what was committed every `every`, until `stop`; then one last round.
pub fn checker(
    lab: Arc<Lab>,
    container: &'static str,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    every: Duration,
) -> std::thread::JoinHandle<Checked> {
    std::thread::spawn(move || {
        let mut out = Checked::default();
        let mut next = 0;
        loop {
            let last_round = stop.load(Ordering::Relaxed);
            let batch: Vec<(String, String)> = {
                let s = seen.lock().unwrap_or_else(|p| p.into_inner());
                s.commits[next..].to_vec()
            };
            next += batch.len();
            if !batch.is_empty() {
                let verdicts = cloud::check_blobs(&lab, container, batch.clone())
                    .unwrap_or_else(|e| panic!("check: {e:#}"));
                let mut gone = Vec::new();
                for ((blob, sha), v) in batch.into_iter().zip(verdicts) {
                    match v {
                        Verdict::Same => {
                            out.same += 1;
                            gone.push(blob);
                        }
                        Verdict::Differs => out.differs.push(blob),
                        Verdict::Unread(_) => out.unread.push((blob, sha)),
                    }
                }
                cloud::delete_blobs(&lab, container, gone)
                    .unwrap_or_else(|e| panic!("delete: {e:#}"));
            }
            if last_round {
                return out;
            }
            let until = Instant::now() + every;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}
