//! The watch's memory and journal with many files (up to
//! 1,000,000): ignored by default, run by hand; the numbers and commands are
//! in docs/bench/watch/README.md.
//!
//! ```sh
//! WATCH_BENCH_FILES=100000 cargo test -p relay-tests --test it bench::watch_memory -- --ignored --nocapture
//! # 1,000,000 files already committed (journal rows written directly, nothing uploaded):
//! WATCH_BENCH_FILES=1000000 WATCH_BENCH_SEED_JOURNAL=1 cargo test -p relay-tests --test it bench::watch_memory -- --ignored --nocapture
//! # 1,000,000 files none of which is committed: the first 300 s of uploading them:
//! WATCH_BENCH_FILES=1000000 WATCH_BENCH_UPLOAD_SECONDS=300 cargo test -p relay-tests --test it bench::watch_memory -- --ignored --nocapture
//! ```
//!
//! Phase 1 (unless seeded): the watch uploads every file, found by its start
//! scan. Phase 2: the same watch restarted over the same files with its
//! journal: it must send nothing and make no request. Then a few files change
//! and must be committed (events still work over that many watched files).
//! Each phase prints its time, the watcher's peak RSS (VmHWM) and the
//! journal's size. With `WATCH_BENCH_UPLOAD_SECONDS`, phase 1 is cut short
//! after that long (a clean stop) and phase 2 is not run: the watcher's
//! memory while it works through a backlog of N files, sampled every 10 s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use relay_client::watch::journal::{Entry, Journal};
use relay_client::watch::settle::Stat;
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::watch::{Watch, wait_all_blobs};

const PER_DIR: u64 = 1000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rel(i: u64) -> String {
    format!("d{}/f{i}", i / PER_DIR)
}

/// Tiny files, written without hashing (their blobs are checked by the
/// watch's own SHA-256 through the relay in phase 1; here only size matters).
fn make_files(inbox: &Path, n: u64) {
    for d in 0..n.div_ceil(PER_DIR) {
        std::fs::create_dir_all(inbox.join(format!("d{d}"))).unwrap_or_else(|e| panic!("{e}"));
    }
    for i in 0..n {
        std::fs::write(inbox.join(rel(i)), format!("file {i}\n")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Journal rows for every file, as the watch writes them after a commit.
fn seed_journal(journal: &Path, inbox: &Path, container: &str, n: u64) {
    let j = Journal::open(journal).unwrap_or_else(|e| panic!("{e}"));
    let root = std::fs::canonicalize(inbox).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..n {
        let path = root.join(rel(i));
        let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{e}"));
        j.record(&Entry {
            path: path.display().to_string(),
            container: container.to_string(),
            blob: format!("b/inbox/{}", rel(i)),
            stat: Stat::of(&meta),
            sha256: "0".repeat(64),
            etag: "\"seeded\"".into(),
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn journal_bytes(journal: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .map(|s| {
            let mut f = journal.as_os_str().to_owned();
            f.push(s);
            std::fs::metadata(PathBuf::from(f)).map_or(0, |m| m.len())
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: minutes, and disk for many files; run by hand"]
async fn watch_memory_and_journal_with_many_files() {
    let n = env_u64("WATCH_BENCH_FILES", 100_000);
    let seeded = std::env::var_os("WATCH_BENCH_SEED_JOURNAL").is_some();
    let upload_for = env_u64("WATCH_BENCH_UPLOAD_SECONDS", 0);
    let (relay, container) =
        RelayHandle::with_container("watchbench", RelayOptions::default()).await;
    let scratch = Scratch::new("watchbench");
    let inbox = scratch.path("inbox");
    let journal = scratch.path("journal.sqlite");
    let j = journal.display().to_string();
    let to = format!("{container}/b");
    // A changed file replaces its blob (phase 1 committed one).
    let args = [
        "--journal",
        &j,
        "--parallel",
        "64",
        "--overwrite=if-different",
    ];
    let t = Instant::now();
    make_files(&inbox, n);
    eprintln!(
        "bench: {n} files written in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    if seeded {
        let t = Instant::now();
        seed_journal(&journal, &inbox, &container, n);
        eprintln!(
            "bench: journal seeded with {n} rows in {:.1} s ({} bytes)",
            t.elapsed().as_secs_f64(),
            journal_bytes(&journal)
        );
    } else if upload_for > 0 {
        backlog(&relay, &to, &inbox, &args, n, upload_for).await;
        relay.stop().await;
        return;
    } else {
        let t = Instant::now();
        let w = Watch::start(&relay, &to, &[&inbox], &args);
        w.wait_status("every file committed", |v| v["committed"] == n)
            .await;
        let (peak, rss) = w.memory_kib();
        let s = w.stop().await;
        assert_eq!(s["totals"]["failed"], 0, "{s}");
        eprintln!(
            "bench: phase 1: {n} files uploaded in {:.1} s; watcher peak RSS {peak} KiB, \
             RSS at the end {rss} KiB; journal {} bytes",
            t.elapsed().as_secs_f64(),
            journal_bytes(&journal)
        );
    }

    // Restart over every file: the journal answers, nothing is sent.
    let t = Instant::now();
    let w = Watch::start(&relay, &to, &[&inbox], &args);
    w.wait_status("every file known", |v| v["known"] == n).await;
    let scanned = t.elapsed().as_secs_f64();
    let (peak, rss) = w.memory_kib();
    // Then a few files change: committed by events, as ever.
    let mut want = Vec::new();
    for i in (0..n).step_by((n / 10).max(1) as usize) {
        let sha = write_random(&inbox.join(rel(i)), 3000, i);
        want.push((format!("b/inbox/{}", rel(i)), sha));
    }
    wait_all_blobs(&container, &want, &w).await;
    let (peak_after, _) = w.memory_kib();
    let s = w.stop().await;
    eprintln!(
        "bench: phase 2: restart over {n} files: all known after {scanned:.1} s; watcher peak RSS \
         {peak} KiB, RSS {rss} KiB; {} changed files then committed, peak RSS {peak_after} KiB; \
         journal {} bytes; sent {} bytes for {} files",
        want.len(),
        journal_bytes(&journal),
        s["totals"]["bytes_sent"],
        s["totals"]["files"],
    );
    assert_eq!(
        s["totals"]["files"].as_u64(),
        Some(want.len() as u64),
        "{s}"
    );
    relay.stop().await;
}

/// A watch started over `n` files none of which is committed, stopped
/// (cleanly) after `seconds`: its memory as it works through the backlog.
async fn backlog(relay: &RelayHandle, to: &str, inbox: &Path, args: &[&str], n: u64, seconds: u64) {
    let t = Instant::now();
    let w = Watch::start(relay, to, &[inbox], args);
    let mut rss_max = 0;
    while t.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (peak, rss) = w.memory_kib();
        rss_max = rss_max.max(rss);
        eprintln!(
            "bench: t={:.0} s: {} of {n} committed; watcher RSS {rss} KiB, peak {peak} KiB",
            t.elapsed().as_secs_f64(),
            w.commits()
        );
    }
    let (peak, _) = w.memory_kib();
    let committed = w.commits();
    let s = w.stop().await;
    assert_eq!(s["totals"]["failed"], 0, "{s}");
    eprintln!(
        "bench: backlog of {n}: {committed} committed in {:.1} s; watcher RSS at most {rss_max} KiB \
         (sampled), peak {peak} KiB",
        t.elapsed().as_secs_f64()
    );
}
