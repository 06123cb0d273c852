//! `relay-client watch` while its relay goes away: the relay is stopped while
//! files arrive, the watch says it is waiting (`--patience`) and holds them
//! (none fails), and once the relay is back on the same address every file is
//! committed (downloaded and hashed). When the relay stays away longer than
//! `--patience`, the watch stops with exit 130 and the same watch started
//! again commits what was left.

use std::path::PathBuf;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::new_container;
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::Revivable;
use relay_tests::watch::{Watch, wait_all_blobs};

const MIB: u64 = 1 << 20;

fn write_files(inbox: &std::path::Path, dir: &str, n: u64, seed: u64) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            // One file of several blocks among small ones.
            let size = if i == 3 { 20 * MIB } else { 500 + i * 911 };
            let rel = format!("{dir}/f{i}.bin");
            let sha = write_random(&inbox.join(&rel), size, seed + i);
            (format!("o/inbox/{rel}"), sha)
        })
        .collect()
}

fn network(state: &'static str) -> impl Fn(&serde_json::Value) -> bool {
    move |v| v["event"] == "network" && v["state"] == state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_that_arrive_while_the_relay_is_away_are_committed_when_it_returns() {
    let container = new_container("watchoutage").await;
    let relay = Revivable::new(shared_azurite().storage());
    let handle = relay.start().await;
    let scratch = Scratch::new("watchoutage");
    let inbox: PathBuf = scratch.path("inbox");
    let journal = scratch.path("journal.sqlite");
    let j = journal.display().to_string();
    let mut want = write_files(&inbox, "before", 5, 0);
    let w = Watch::start(
        &handle,
        &format!("{container}/o"),
        &[&inbox],
        &["--journal", &j, "--patience", "10m"],
    );
    wait_all_blobs(&container, &want, &w).await;

    // The relay goes away; files keep arriving.
    handle.stop().await;
    let during = write_files(&inbox, "during", 12, 100);
    w.wait_event("the relay reported unreachable", network("unreachable"))
        .await;
    // Every file settled and waits on the link: none failed, none committed.
    let held = w
        .wait_status("every new file held", |v| v["in_flight"] == 12)
        .await;
    assert_eq!(held["failed"], 0, "{held}");
    assert_eq!(held["committed"], 5, "{held}");

    let handle = relay.start().await;
    want.extend(during);
    wait_all_blobs(&container, &want, &w).await;
    w.wait_event("the relay reported back", network("reachable"))
        .await;
    w.wait_status("all committed", |v| {
        v["committed"] == 17 && v["in_flight"] == 0
    })
    .await;
    let s = w.stop().await;
    assert_eq!(s["totals"]["failed"], 0, "{s}");
    assert_eq!(s["totals"]["committed"], 17, "{s}");
    handle.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_away_longer_than_patience_stops_the_watch_and_a_restart_goes_on() {
    let container = new_container("watchpatience").await;
    let relay = Revivable::new(shared_azurite().storage());
    let handle = relay.start().await;
    let scratch = Scratch::new("watchpatience");
    let inbox: PathBuf = scratch.path("inbox");
    std::fs::create_dir_all(&inbox).unwrap_or_else(|e| panic!("{e}"));
    let journal = scratch.path("journal.sqlite");
    let j = journal.display().to_string();
    let args = ["--journal", &j, "--patience", "2s"];
    let to = format!("{container}/o");
    let mut w = Watch::start(&handle, &to, &[&inbox], &args);
    w.wait_event("the start", |v| v["event"] == "watch_status")
        .await;
    handle.stop().await;
    let want = write_files(&inbox, "late", 4, 200);
    let (status, summary, stderr) = w.exit().await;
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("stayed unreachable for 2 s (--patience)"),
        "{stderr}"
    );
    let summary = summary.unwrap_or_else(|| panic!("no summary; stderr:\n{stderr}"));
    assert_eq!(summary["stopped_by"], "patience", "{summary}");
    assert!(w.events().iter().any(network("gave_up")));

    // Back, and the same watch again: what was left is committed.
    let handle = relay.start().await;
    let w = Watch::start(&handle, &to, &[&inbox], &args);
    wait_all_blobs(&container, &want, &w).await;
    let s = w.stop().await;
    assert_eq!(s["totals"]["failed"], 0, "{s}");
    handle.stop().await;
}
