//! `relay-client watch`: the real binary watching a real directory (inotify),
//! a real relay on loopback QUIC, a real Azurite. Nothing here waits a fixed
//! time for an outcome: each step waits (generously bounded) for what can be
//! observed (a blob, an event line), and every committed blob is downloaded
//! and hashed against the file's final content.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use relay_tests::blobs::blob_exists;
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::watch::{Watch, assert_blob};

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
