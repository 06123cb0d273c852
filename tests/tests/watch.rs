//! `relay-client watch`: the real binary watching a real directory (inotify),
//! a real relay on loopback QUIC, a real Azurite. Nothing here waits a fixed
//! time for an outcome: each step waits (generously bounded) for what can be
//! observed (a blob, an event line), and every committed blob is downloaded
//! and hashed against the file's final content.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_tests::blobs::{blob_exists, blob_sha};
use relay_tests::client_command;
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

const BOUND: Duration = Duration::from_secs(120);

/// A running watch: its stdout events as they come.
struct Watch {
    child: tokio::process::Child,
    events: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
}

impl Watch {
    fn start(relay: &RelayHandle, to: &str, dirs: &[&Path], extra: &[&str]) -> Self {
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
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = client_command(&args, &[]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
        let err = child.stderr.take().unwrap_or_else(|| panic!("stderr"));
        let ev = events.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    ev.lock().unwrap_or_else(|p| p.into_inner()).push(v);
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
            events,
            stderr,
        }
    }

    fn events(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until some event satisfies `pred`.
    async fn wait_event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(v) = self.events().into_iter().find(|v| pred(v)) {
                return v;
            }
            assert!(
                t0.elapsed() < BOUND,
                "no {what} within {BOUND:?}; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// File events with this status, by blob.
    fn files(&self, status: &str) -> HashMap<String, Value> {
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

    /// SIGTERM, then the exit status and the summary event.
    async fn stop(mut self) -> Value {
        let pid = self.child.id().unwrap_or_else(|| panic!("no pid"));
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        let status = tokio::time::timeout(BOUND, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("watch did not stop"))
            .unwrap_or_else(|e| panic!("{e}"));
        // The reader may still be draining the last lines.
        let summary = self
            .wait_event("summary", |v| v["event"] == "summary")
            .await;
        assert!(
            status.success(),
            "exit {status:?}; stderr:\n{}",
            self.stderr()
        );
        summary
    }
}

async fn wait_blob(container: &str, blob: &str) {
    let t0 = std::time::Instant::now();
    while !blob_exists(container, blob).await {
        assert!(
            t0.elapsed() < BOUND,
            "blob {blob} not committed within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn assert_blob(container: &str, blob: &str, file: &Path) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn present_appearing_slow_writer_tree_and_restarts() {
    let (relay, container) = RelayHandle::with_container("watch", RelayOptions::default()).await;
    let scratch = Scratch::new("watch");
    let inbox = scratch.path("inbox");
    let journal = scratch.path("state/journal.sqlite");
    let mut all: Vec<(String, PathBuf)> = Vec::new();
    for i in 0..20u64 {
        let rel = format!("start/f{i}.bin");
        write_random(&inbox.join(&rel), 1000 + i * 500, i);
        all.push((format!("w/inbox/{rel}"), inbox.join(rel)));
    }
    let j = journal.display().to_string();
    let w = Watch::start(
        &relay,
        &format!("{container}/w"),
        &[&inbox],
        &["--journal", &j],
    );
    for (blob, file) in &all {
        assert_blob(&container, blob, file).await;
    }

    // Files that appear while it runs; a temporary name renamed to its final one.
    for i in 0..10u64 {
        let rel = format!("new/g{i}.bin");
        write_random(&inbox.join(&rel), 70_000 + i, 100 + i);
        all.push((format!("w/inbox/{rel}"), inbox.join(rel)));
    }
    write_random(&inbox.join("report.csv.part"), 5000, 7);
    std::fs::rename(inbox.join("report.csv.part"), inbox.join("report.csv"))
        .unwrap_or_else(|e| panic!("{e}"));
    all.push(("w/inbox/report.csv".into(), inbox.join("report.csv")));
    for (blob, file) in &all {
        assert_blob(&container, blob, file).await;
    }
    assert!(!blob_exists(&container, "w/inbox/report.csv.part").await);

    // A slow writer: appends over many settle periods, open throughout. Its
    // blob must not exist while it is open, and must hold the final content.
    let slow = inbox.join("run/slow.dat");
    std::fs::create_dir_all(slow.parent().unwrap_or(&inbox)).unwrap_or_else(|e| panic!("{e}"));
    let mut f = std::fs::File::create(&slow).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..6u8 {
        f.write_all(&vec![i; 64 * 1024])
            .unwrap_or_else(|e| panic!("{e}"));
        f.flush().unwrap_or_else(|e| panic!("{e}"));
        // Longer than --settle: a watcher settling on time alone would upload now.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            !blob_exists(&container, "w/inbox/run/slow.dat").await,
            "uploaded while still open for writing (after write {i})"
        );
    }
    drop(f);
    assert_blob(&container, "w/inbox/run/slow.dat", &slow).await;
    all.push(("w/inbox/run/slow.dat".into(), slow));

    // A whole tree renamed into the folder: no events of its own files.
    let outside = scratch.path("tree");
    for i in 0..15u64 {
        write_random(
            &outside.join(format!("a/b{}/t{i}.bin", i % 3)),
            3000 + i,
            200 + i,
        );
    }
    std::fs::rename(&outside, inbox.join("tree")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..15u64 {
        let rel = format!("tree/a/b{}/t{i}.bin", i % 3);
        all.push((format!("w/inbox/{rel}"), inbox.join(&rel)));
    }
    for (blob, file) in &all {
        assert_blob(&container, blob, file).await;
    }
    let committed = w.files("committed");
    assert_eq!(committed.len(), all.len(), "one committed line per file");
    for (blob, file) in &all {
        assert_eq!(
            committed[blob]["sha256"],
            sha256_file(file).as_str(),
            "{blob}"
        );
    }
    let first = w.stop().await;
    assert_eq!(first["totals"]["committed"], all.len());

    // Restart with the journal: nothing is sent and nothing is asked of the
    // relay (no file reaches it at all: the summary counts none).
    let w = Watch::start(
        &relay,
        &format!("{container}/w"),
        &[&inbox],
        &["--journal", &j],
    );
    let n = all.len() as u64;
    w.wait_event("a status with every file known", |v| {
        v["event"] == "watch_status" && v["known"] == n
    })
    .await;
    let again = w.stop().await;
    assert_eq!(again["totals"]["files"], 0, "{again}");
    assert_eq!(again["totals"]["bytes_sent"], 0);

    // Without the journal: the skip rules decide (the relay's seal): every
    // file identical. A one-block file (4 MiB or less) travels before the
    // relay looks at the blob (docs/CLIENT.md, "identical"), so its bytes are
    // sent again; a larger one is checked first and sends nothing.
    let w = Watch::start(
        &relay,
        &format!("{container}/w"),
        &[&inbox],
        &["--no-journal"],
    );
    w.wait_event("a status with every file identical", |v| {
        v["event"] == "watch_status" && v["identical"] == n
    })
    .await;
    let cold = w.stop().await;
    assert_eq!(cold["totals"]["skipped"], all.len(), "{cold}");
    assert_eq!(cold["totals"]["committed"], 0);
    let one_block: u64 = all
        .iter()
        .map(|(_, f)| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .filter(|&n| n <= 4 << 20)
        .sum();
    assert_eq!(cold["totals"]["bytes_sent"], one_block, "{cold}");
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_2000_files_is_committed_whole() {
    let (relay, container) =
        RelayHandle::with_container("watchburst", RelayOptions::default()).await;
    let scratch = Scratch::new("watchburst");
    let inbox = scratch.path("inbox");
    std::fs::create_dir_all(&inbox).unwrap_or_else(|e| panic!("{e}"));
    let w = Watch::start(
        &relay,
        &format!("{container}/b"),
        &[&inbox],
        &["--no-journal"],
    );
    w.wait_event("the start", |v| v["event"] == "watch_status")
        .await;
    let mut want = HashMap::new();
    for i in 0..2000u64 {
        let rel = format!("d{}/f{i}.bin", i % 20);
        let sha = write_random(&inbox.join(&rel), 100 + (i * 37) % 4000, 1000 + i);
        want.insert(format!("b/inbox/{rel}"), sha);
    }
    w.wait_event("2000 committed", |v| {
        v["event"] == "watch_status" && v["committed"] == 2000
    })
    .await;
    let committed = w.files("committed");
    assert_eq!(committed.len(), 2000);
    for (blob, sha) in &want {
        assert_eq!(committed[blob]["sha256"], sha.as_str(), "{blob}");
        let (_, got) = blob_sha(&container, blob).await;
        assert_eq!(&got, sha, "{blob}");
    }
    let s = w.stop().await;
    assert_eq!(s["totals"]["failed"], 0, "{s}");
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_upload_move_moves_only_verified_files() {
    let (relay, container) =
        RelayHandle::with_container("watchmove", RelayOptions::default()).await;
    let scratch = Scratch::new("watchmove");
    let inbox = scratch.path("inbox");
    let done = scratch.path("done");
    let good = inbox.join("good.bin");
    let bad = inbox.join("bad.bin");
    let good_sha = write_random(&good, 20_000, 1);
    write_random(&bad, 20_000, 2);
    // bad.bin's listed hash is not its content: the relay refuses its commit.
    let sums = scratch.path("SHA256SUMS");
    std::fs::write(
        &sums,
        format!(
            "{good_sha}  inbox/good.bin\n{}  inbox/bad.bin\n",
            "0".repeat(64)
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (s, d) = (sums.display().to_string(), done.display().to_string());
    let w = Watch::start(
        &relay,
        &format!("{container}/m"),
        &[&inbox],
        &[
            "--no-journal",
            "--checksums",
            &s,
            "--after-upload",
            "move",
            &d,
        ],
    );
    w.wait_event("bad.bin failed", |v| {
        v["event"] == "file"
            && v["file"]["status"] == "failed"
            && v["file"]["blob"] == "m/inbox/bad.bin"
    })
    .await;
    w.wait_event("good.bin committed", |v| {
        v["event"] == "file"
            && v["file"]["status"] == "committed"
            && v["file"]["blob"] == "m/inbox/good.bin"
    })
    .await;
    let s = w.stop().await;
    assert_eq!(s["totals"]["committed"], 1, "{s}");
    let moved = done.join("inbox/good.bin");
    assert_eq!(sha256_file(&moved), good_sha);
    assert!(!good.exists(), "good.bin was moved");
    assert!(bad.exists(), "bad.bin's blob did not verify: it must stay");
    assert!(!done.join("inbox/bad.bin").exists());
    assert!(!blob_exists(&container, "m/inbox/bad.bin").await);
    let (_, got) = blob_sha(&container, "m/inbox/good.bin").await;
    assert_eq!(got, good_sha);
    relay.stop().await;
}
