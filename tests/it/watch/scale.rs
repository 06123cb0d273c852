//! `relay-client watch` under many files: a burst of 10,000 small files
//! written while it watches (more events than its queue holds: the overflow
//! becomes a reconcile scan), then a tree of 2,000 files renamed into the
//! folder at once (no event for any of its files). Every blob is downloaded
//! and hashed, and the watcher's peak memory stays under a bound set by its
//! configuration, not by the number of files.

use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::watch::{Watch, wait_all_blobs};

const BURST: u64 = 10_000;
const TREE: u64 = 2_000;
/// Peak resident memory allowed to the watch process, KiB. What it holds is
/// bounded by its options (`--max-pending` files waiting, `--parallel` in
/// flight with a read buffer each, 8,192 queued events), none of them by the
/// number of files seen. Measured peaks were about 26 MiB here (debug build),
/// the same at 10,000 and 12,000 files; docs/bench/watch/.
const PEAK_KIB: u64 = 96 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_10000_files_and_a_tree_renamed_in_are_committed_whole() {
    let (relay, container) =
        RelayHandle::with_container("watchscale", RelayOptions::default()).await;
    let scratch = Scratch::new("watchscale");
    let inbox = scratch.path("inbox");
    std::fs::create_dir_all(&inbox).unwrap_or_else(|e| panic!("{e}"));
    let journal = scratch.path("journal.sqlite");
    let j = journal.display().to_string();
    // --parallel as a service would set it: a bound, not the upload default.
    let extra = ["--journal", &j, "--parallel", "64"];
    let w = Watch::start(&relay, &format!("{container}/s"), &[&inbox], &extra);
    w.wait_event("the start", |v| v["event"] == "watch_status")
        .await;
    // Phase times are printed (not asserted): where a slow run spends them.
    let t0 = std::time::Instant::now();
    let mut want = Vec::new();
    for i in 0..BURST {
        let rel = format!("d{}/f{i}.bin", i % 100);
        let sha = write_random(&inbox.join(&rel), 100 + (i * 37) % 2000, i);
        want.push((format!("s/inbox/{rel}"), sha));
    }
    let written = t0.elapsed();
    w.wait_status("the burst committed", |v| v["committed"] == BURST)
        .await;
    let burst = t0.elapsed();
    let (burst_peak, _) = w.memory_kib();

    // A tree built outside, then renamed in whole.
    let outside = scratch.path("tree");
    for i in 0..TREE {
        let rel = format!("a{}/b{}/t{i}.bin", i % 4, i % 10);
        let sha = write_random(&outside.join(&rel), 50 + i % 700, 100_000 + i);
        want.push((format!("s/inbox/tree/{rel}"), sha));
    }
    std::fs::rename(&outside, inbox.join("tree")).unwrap_or_else(|e| panic!("{e}"));
    let n = BURST + TREE;
    w.wait_status("the tree committed", |v| v["committed"] == n)
        .await;
    let tree = t0.elapsed();
    wait_all_blobs(&container, &want, &w).await;
    eprintln!(
        "watch scale: burst written {written:?}, committed {burst:?}; tree committed {tree:?}; \
         {n} blobs checked {:?}",
        t0.elapsed()
    );
    let (peak, rss) = w.memory_kib();
    let s = w.stop().await;
    eprintln!(
        "watch peak RSS: {burst_peak} KiB after {BURST} files, {peak} KiB after {n} (now {rss} KiB)"
    );
    assert_eq!(s["totals"]["committed"].as_u64(), Some(n), "{s}");
    assert_eq!(s["totals"]["failed"], 0, "{s}");
    assert!(peak < PEAK_KIB, "peak RSS {peak} KiB over {PEAK_KIB} KiB");
    relay.stop().await;
}
