//! A running `relay-client watch` as the watch tests see it: its JSON-lines
//! events as they come, its stderr, its memory, and ways to end it (SIGTERM,
//! or SIGKILL at an exact point of its output). Nothing here waits a fixed time
//! for an outcome: each wait is for something observable, bounded generously.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::blobs::{blob_exists, blob_sha};
use crate::client_command;
use crate::files::sha256_file;
use crate::relay::RelayHandle;

/// How long a wait goes on with nothing happening (a guard against hangs, not
/// a timing assert: the waits for many files count from their last progress).
pub const BOUND: Duration = Duration::from_secs(180);

/// A running watch.
pub struct Watch {
    child: tokio::process::Child,
    pid: u32,
    events: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
    /// `committed` file events read so far.
    committed: Arc<AtomicU64>,
    /// The stdout reader: ends at the pipe's end, once every line is read.
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// Options of a watch start beyond folders and destination.
#[derive(Default)]
pub struct Start<'a> {
    pub extra: &'a [&'a str],
    /// SIGKILL the watch as soon as its output shows this many committed files
    /// (the reader sends it on reading that line: a point in the watch's own
    /// progress, not a time).
    pub kill_after_commits: Option<u64>,
}

impl Watch {
    /// `watch DIRS --to TO` through `relay`, settling after 0.5 s, with
    /// JSON-lines events and a status line every 0.5 s.
    pub fn start(relay: &RelayHandle, to: &str, dirs: &[&Path], extra: &[&str]) -> Self {
        Self::start_with(
            relay,
            to,
            dirs,
            Start {
                extra,
                ..Start::default()
            },
        )
    }

    pub fn start_with(relay: &RelayHandle, to: &str, dirs: &[&Path], how: Start<'_>) -> Self {
        let mut args: Vec<String> = vec!["watch".into()];
        args.extend(dirs.iter().map(|d| d.display().to_string()));
        args.extend(relay.client_args(to));
        args.extend(
            [
                "--settle",
                "0.5",
                "--json-lines",
                "--status-interval",
                "0.5",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        args.extend(how.extra.iter().map(|s| s.to_string()));
        let mut cmd = client_command(&args, &[]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
        let pid = child.id().unwrap_or_else(|| panic!("no pid"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let committed = Arc::new(AtomicU64::new(0));
        let out = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
        let err = child.stderr.take().unwrap_or_else(|| panic!("stderr"));
        let (ev, n, kill_at) = (events.clone(), committed.clone(), how.kill_after_commits);
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let is_commit = v["event"] == "file" && v["file"]["status"] == "committed";
                ev.lock().unwrap_or_else(|p| p.into_inner()).push(v);
                if is_commit {
                    let seen = n.fetch_add(1, Ordering::SeqCst) + 1;
                    if kill_at == Some(seen) {
                        // SAFETY: signalling our own child, which has not been
                        // reaped (the test waits for it only after this).
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    }
                }
            }
        });
        let se = stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut s = se.lock().unwrap_or_else(|p| p.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
        Self {
            child,
            pid,
            events,
            stderr,
            committed,
            reader: Some(reader),
        }
    }

    /// Waits until every line the process wrote is read (after its end).
    async fn drain(&mut self) {
        if let Some(r) = self.reader.take() {
            let _ = tokio::time::timeout(BOUND, r).await;
        }
    }

    pub fn events(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Committed file events read so far.
    pub fn commits(&self) -> u64 {
        self.committed.load(Ordering::SeqCst)
    }

    /// The first event at or after index `from` that satisfies `pred`, the
    /// number of events looked at (events only grow: a wait looks at each
    /// once, without copying the lot on every poll), and whether any of them
    /// was work (anything but the periodic status line).
    fn find_from(
        &self,
        from: usize,
        pred: &impl Fn(&Value) -> bool,
    ) -> (Option<Value>, usize, bool) {
        let ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let new = || ev.iter().skip(from);
        let found = new().find(|v| pred(v)).cloned();
        let worked = new().any(|v| v["event"] != "watch_status");
        (found, ev.len(), worked)
    }

    fn last_events(&self) -> Vec<Value> {
        let ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        ev.iter().rev().take(3).cloned().collect()
    }

    /// Waits until some event (from the start) satisfies `pred`.
    pub async fn wait_event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_from(0, what, pred).await
    }

    /// Waits for a status line (printed after this call) that satisfies `pred`.
    pub async fn wait_status(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let from = self.events.lock().unwrap_or_else(|p| p.into_inner()).len();
        self.wait_from(from, &format!("a status with {what}"), |v| {
            v["event"] == "watch_status" && pred(v)
        })
        .await
    }

    /// Waits for an event from index `from` on that satisfies `pred`. A hang
    /// guard, not a timing assertion: it fails only after `BOUND` in which the
    /// watcher reported no work at all (a loaded machine commits a burst more
    /// slowly, and that is not a failure).
    async fn wait_from(&self, mut from: usize, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut last_work = std::time::Instant::now();
        loop {
            let (found, seen, worked) = self.find_from(from, &pred);
            if let Some(v) = found {
                return v;
            }
            if worked {
                last_work = std::time::Instant::now();
            }
            from = seen;
            assert!(
                last_work.elapsed() < BOUND,
                "no {what}, and no work reported for {BOUND:?}; last events: {:?}\nstderr:\n{}",
                self.last_events(),
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// File events with this status, by blob.
    pub fn files(&self, status: &str) -> HashMap<String, Value> {
        self.events()
            .into_iter()
            .filter(|v| v["event"] == "file" && v["file"]["status"] == status)
            .map(|v| {
                (
                    v["file"]["blob"].as_str().unwrap_or_default().to_string(),
                    v["file"].clone(),
                )
            })
            .collect()
    }

    /// Blobs of every file event, whatever its status.
    pub fn touched(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|v| v["event"] == "file")
            .map(|v| v["file"]["blob"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Peak and current resident memory of the watch process, KiB
    /// (`VmHWM`, `VmRSS` of /proc/PID/status).
    pub fn memory_kib(&self) -> (u64, u64) {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .unwrap_or_else(|e| panic!("/proc/{}/status: {e}", self.pid));
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/PID/status"))
        };
        (field("VmHWM:"), field("VmRSS:"))
    }

    /// Waits for the SIGKILL sent at `kill_after_commits` to end the process;
    /// returns the committed events it printed.
    pub async fn killed(mut self) -> Vec<Value> {
        let status = tokio::time::timeout(BOUND, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("watch was not killed; stderr:\n{}", self.stderr()))
            .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        // What it wrote before the kill is still in the pipe: read to its end.
        self.drain().await;
        self.events()
    }

    /// SIGTERM, then the summary event (after a clean exit).
    pub async fn stop(self) -> Value {
        let (status, summary, stderr) = self.stop_with_status().await;
        assert!(status.success(), "exit {status:?}; stderr:\n{stderr}");
        summary.unwrap_or_else(|| panic!("no summary; stderr:\n{stderr}"))
    }

    /// SIGTERM, then the exit status, the summary event if any, and stderr.
    pub async fn stop_with_status(mut self) -> (std::process::ExitStatus, Option<Value>, String) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        self.exit().await
    }

    /// Waits for the process to end by itself: its status, summary and stderr.
    pub async fn exit(&mut self) -> (std::process::ExitStatus, Option<Value>, String) {
        let status = tokio::time::timeout(BOUND, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("watch did not end; stderr:\n{}", self.stderr()))
            .unwrap_or_else(|e| panic!("{e}"));
        self.drain().await;
        let summary = self.events().into_iter().find(|v| v["event"] == "summary");
        (status, summary, self.stderr())
    }
}

/// Waits until the blob exists.
pub async fn wait_blob(container: &str, blob: &str) {
    let t0 = std::time::Instant::now();
    while !blob_exists(container, blob).await {
        assert!(
            t0.elapsed() < BOUND,
            "blob {blob} not committed within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for the blob, then checks it holds exactly `file`'s bytes.
pub async fn assert_blob(container: &str, blob: &str, file: &Path) {
    wait_blob(container, blob).await;
    let (n, sha) = blob_sha(container, blob).await;
    assert_eq!(
        sha,
        sha256_file(file),
        "{blob} holds other bytes than {}",
        file.display()
    );
    assert_eq!(
        n,
        std::fs::metadata(file).map(|m| m.len()).unwrap_or(u64::MAX)
    );
}

/// Reads of one blob before `blobs_differing` reports it unreadable.
const READS: usize = 3;

/// Downloads every blob (a few at a time) and checks its SHA-256 against
/// `want` (blob name, SHA-256 hex); returns the blobs that differ or are
/// missing, as `(blob, what it holds)`. A missing blob is a failed download.
pub async fn blobs_differing(container: &str, want: &[(String, String)]) -> Vec<(String, String)> {
    // One account for every blob of the call: an account per blob built an HTTP
    // client (its TLS root store) and a connection for each: in the 10,000-file
    // watch test the test process's CPU fell from 139 s to 50 s with one
    // account. (Its wall time is Azurite's, one core, either way.)
    let storage = &crate::azurite::shared_azurite().storage();
    futures::stream::iter(want.iter().cloned())
        .map(|(blob, sha)| async move {
            let writer = match storage.writer(container, &blob) {
                Ok(w) => w,
                Err(e) => return Some((blob, format!("no writer: {e}"))),
            };
            // A read that fails (Azurite, one Node thread, stalled or reset
            // under a loaded machine) says nothing about the blob: read again,
            // a bounded number of times. Only bytes read whole are judged.
            let mut failed = String::new();
            for _ in 0..READS {
                match writer.content_sha256().await {
                    Ok((_, got)) if hex::encode(got) == sha => return None,
                    Ok((_, got)) => return Some((blob, hex::encode(got))),
                    Err(e) => failed = format!("not downloaded: {e}"),
                }
            }
            Some((blob, failed))
        })
        .buffer_unordered(16)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

/// Waits until every blob of `want` holds its SHA-256 (polling Azurite, with
/// the checks of `blobs_differing`); fails with the ones still wrong.
pub async fn wait_all_blobs(container: &str, want: &[(String, String)], watch: &Watch) {
    // A hang guard like `wait_from`'s: BOUND with no blob coming right.
    let mut last_progress = std::time::Instant::now();
    let mut left: Vec<(String, String)> = want.to_vec();
    loop {
        let wrong = blobs_differing(container, &left).await;
        if wrong.is_empty() {
            return;
        }
        if wrong.len() < left.len() {
            last_progress = std::time::Instant::now();
        }
        assert!(
            last_progress.elapsed() < BOUND,
            "{} blob(s) not as their files, none coming right for {BOUND:?}, e.g. {:?}; stderr:\n{}",
            wrong.len(),
            &wrong[..wrong.len().min(5)],
            watch.stderr()
        );
        let wrong: std::collections::HashSet<String> = wrong.into_iter().map(|(b, _)| b).collect();
        left.retain(|(b, _)| wrong.contains(b));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
