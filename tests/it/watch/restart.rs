//! `relay-client watch` killed with SIGKILL in the middle of a burst, then
//! started again with its journal, killed again, and started with the journal
//! deleted. The kill points are points in the watch's own output (the N-th
//! committed file line), not times. Whatever was under way at each kill,
//! every file must end up as its blob (downloaded and hashed); the restart
//! with the journal must send nothing for, and ask storage nothing about, the
//! files the killed run had reported committed.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::new_container;
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::watch::{Start, Watch, blobs_differing, wait_all_blobs};
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// First burst: written while the first watch runs, which is killed after
/// `KILL_1` of them are committed.
const BURST_1: u64 = 240;
const KILL_1: u64 = 60;
/// Second burst (new files, and some of the first rewritten), killed after
/// `KILL_2` commits.
const BURST_2: u64 = 120;
const REWRITTEN: u64 = 30;
const KILL_2: u64 = 40;

/// A file of the test: its blob name and path.
struct Files {
    inbox: PathBuf,
    /// blob -> (path, SHA-256 of its current content)
    all: HashMap<String, (PathBuf, String)>,
}

impl Files {
    /// Small files of many sizes, and every 80th one 20 MiB (two blocks: a
    /// kill may leave a staged block the restart resumes from).
    fn write(&mut self, name: &str, i: u64, seed: u64) {
        let size = if i % 80 == 7 {
            20 * MIB + i
        } else {
            200 + (i * 131) % 6000
        };
        let path = self.inbox.join(name);
        let sha = write_random(&path, size, seed);
        self.all.insert(format!("r/inbox/{name}"), (path, sha));
    }

    fn want(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .all
            .iter()
            .map(|(b, (_, sha))| (b.clone(), sha.clone()))
            .collect();
        v.sort();
        v
    }
}

fn committed_blobs(events: &[Value]) -> HashSet<String> {
    events
        .iter()
        .filter(|v| v["event"] == "file" && v["file"]["status"] == "committed")
        .filter_map(|v| v["file"]["blob"].as_str().map(str::to_string))
        .collect()
}

/// Storage requests (after the first `from`) whose target is one of `blobs`.
fn requests_for(
    proxy: &FaultProxy,
    from: usize,
    container: &str,
    blobs: &HashSet<String>,
) -> Vec<String> {
    proxy
        .stats
        .paths()
        .into_iter()
        .skip(from)
        .filter(|p| {
            p.split_once(&format!("/{container}/"))
                .is_some_and(|(_, blob)| blobs.contains(blob))
        })
        .collect()
}

fn remove_journal(j: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut f = j.as_os_str().to_owned();
        f.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(f));
    }
    assert!(!j.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_burst_with_and_without_its_journal_every_file_ends_up_committed() {
    let container = new_container("watchkill").await;
    // Storage through a proxy that records what each request is about, and
    // slows each single-shot Put Blob (`Other`) and Put Block a little so a
    // burst is still under way when the watch is killed after the N-th line.
    let mut schedule = Schedule::seeded(1);
    schedule.delays = vec![
        (Op::Other, Duration::from_millis(30)),
        (Op::PutBlock, Duration::from_millis(30)),
    ];
    let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
    let proxy = FaultProxy::start(azurite, schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), Default::default());
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let scratch = Scratch::new("watchkill");
    let mut files = Files {
        inbox: scratch.path("inbox"),
        all: HashMap::new(),
    };
    std::fs::create_dir_all(&files.inbox).unwrap_or_else(|e| panic!("{e}"));
    let journal = scratch.path("state/journal.sqlite");
    let j = journal.display().to_string();
    let to = format!("{container}/r");
    let inbox = files.inbox.clone();
    // A few at a time, and a file rewritten in place replaces its blob.
    let extra = [
        "--journal",
        &j,
        "--parallel",
        "4",
        "--overwrite=if-different",
    ];

    // 1. A burst; SIGKILL once KILL_1 files are reported committed.
    let w1 = Watch::start_with(
        &relay,
        &to,
        &[&inbox],
        Start {
            extra: &extra,
            kill_after_commits: Some(KILL_1),
        },
    );
    w1.wait_event("the start", |v| v["event"] == "watch_status")
        .await;
    for i in 0..BURST_1 {
        files.write(&format!("a/d{}/f{i}.bin", i % 12), i, i);
    }
    let c1 = committed_blobs(&w1.killed().await);
    assert!(
        c1.len() as u64 >= KILL_1 && (c1.len() as u64) < BURST_1,
        "killed mid-burst: {} committed lines",
        c1.len()
    );

    // 2. Restart with the journal: the rest of the burst is committed; the
    // files the killed run reported are neither sent nor asked about (each
    // was journalled before its line was printed).
    let mark = proxy.stats.paths().len();
    // Bytes the killed watch had sent may still be reaching the relay: its
    // transfers end only when the relay gives the dead connection up (the
    // idle timeout). Only then is all it sent counted, apart from the restart.
    until_no_transfer_is_active(&relay).await;
    let received = relay
        .metric("blob_relay_bytes_received_total")
        .unwrap_or_default();
    let w2 = Watch::start(&relay, &to, &[&inbox], &extra);
    wait_all_blobs(&container, &files.want(), &w2).await;
    let idle = w2
        .wait_status("nothing waiting or in flight", |v| {
            v["waiting"] == 0 && v["in_flight"] == 0
        })
        .await;
    let touched: HashSet<String> = w2.touched().into_iter().collect();
    let s2 = w2.stop().await;
    assert!(
        touched.is_disjoint(&c1),
        "the restart reported files the journal had: {:?}",
        touched.intersection(&c1).take(5).collect::<Vec<_>>()
    );
    assert!(
        idle["known"].as_u64().unwrap_or(0) >= c1.len() as u64,
        "{idle}"
    );
    assert_eq!(
        s2["totals"]["files"].as_u64(),
        Some(BURST_1 - idle["known"].as_u64().unwrap_or(0)),
        "every file not in the journal went through the relay once: {s2}"
    );
    assert_eq!(s2["totals"]["failed"], 0, "{s2}");
    let asked = requests_for(&proxy, mark, &container, &c1);
    assert!(
        asked.is_empty(),
        "storage asked about journalled files: {asked:?}"
    );
    // The relay received exactly what the restart says it sent: nothing for
    // the journalled files.
    let received = relay
        .metric("blob_relay_bytes_received_total")
        .unwrap_or_default()
        - received;
    assert_eq!(Some(received), s2["totals"]["bytes_sent"].as_u64(), "{s2}");

    // 3. A second burst, new files and some of the first rewritten; killed
    // again after KILL_2 commits.
    let w3 = Watch::start_with(
        &relay,
        &to,
        &[&inbox],
        Start {
            extra: &extra,
            kill_after_commits: Some(KILL_2),
        },
    );
    w3.wait_status("every file known", |v| v["known"] == BURST_1)
        .await;
    for i in 0..BURST_2 {
        files.write(&format!("b/f{i}.bin"), i, 10_000 + i);
    }
    for i in 0..REWRITTEN {
        let k = i * 7;
        files.write(&format!("a/d{}/f{k}.bin", k % 12), k, 20_000 + i);
    }
    let c3 = committed_blobs(&w3.killed().await);
    assert!(
        (c3.len() as u64) < BURST_2 + REWRITTEN,
        "killed mid-burst: {} committed lines",
        c3.len()
    );

    // 4. The journal deleted: the skip rules decide; every file ends up as
    // its final content, each reported committed or identical.
    remove_journal(&journal);
    let w4 = Watch::start(&relay, &to, &[&inbox], &extra);
    let want = files.want();
    wait_all_blobs(&container, &want, &w4).await;
    let n = want.len() as u64;
    w4.wait_status("every file reported", |v| {
        v["committed"].as_u64().unwrap_or(0) + v["identical"].as_u64().unwrap_or(0) == n
            && v["in_flight"] == 0
    })
    .await;
    let s4 = w4.stop().await;
    assert_eq!(s4["totals"]["failed"], 0, "{s4}");
    assert_eq!(s4["totals"]["files"].as_u64(), Some(n), "{s4}");
    // Checked once more after the stop: nothing was replaced by older bytes.
    let wrong = blobs_differing(&container, &want).await;
    assert!(wrong.is_empty(), "{wrong:?}");
    relay.stop().await;
}

/// Waits until the relay has no transfer under way (bounded against hangs: a
/// dead client's connection ends at the 60 s idle timeout).
async fn until_no_transfer_is_active(relay: &RelayHandle) {
    let t0 = std::time::Instant::now();
    while relay.metric("blob_relay_transfers_active") != Some(0) {
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "transfers still active: {:?}",
            relay.metric("blob_relay_transfers_active")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
