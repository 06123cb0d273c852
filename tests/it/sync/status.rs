//! A download sync's status totals: `--json-lines --status-interval` status
//! events count the files found and the bytes they are to move as the merge
//! hands them on, and reach the run's totals once the merge has ended
//! (`walk_complete`). Deterministic: the storage proxy holds every Get Blob,
//! so no fetch can finish (nor the run end) before the totals are read; the
//! status events are read, never timed.

use relay_tests::child_lines::until;
use relay_tests::download_client::{T, relay_flags, s, tree, upload};
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::Op;

use super::{held_relay, spawn_lines};

/// The blobs: (name below the prefix, size, seed); none empty, so each
/// one's fetch is a Get Blob the proxy holds.
const FILES: &[(&str, u64, u64)] = &[
    ("a.txt", 1000, 31),
    ("b/c.bin", 70_000, 32),
    ("b/d/e.bin", 5, 33),
    ("f", 300_000, 34),
    ("g.txt", 1, 35),
];

fn event(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_status_events_grow_to_the_runs_totals() {
    // The token may write the container too: the upload that makes the blobs.
    let (container, proxy, relay) = held_relay("sync-status-down", Op::GetBlob).await;
    let dir = Scratch::new("sync-status-down");
    for (name, size, seed) in FILES {
        write_random(&dir.path("src/data").join(name), *size, *seed);
    }
    upload(&relay, &dir.path("src/data"), &format!("{container}/p")).await;
    let (files, bytes) = (FILES.len() as u64, FILES.iter().map(|f| f.1).sum::<u64>());

    let out_dir = dir.path("out");
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{container}/p/data"), out_dir.display().to_string());
    let mut args = s(&[
        "sync",
        &src,
        &dest,
        "--json-lines",
        "--status-interval",
        "0.05",
    ]);
    args.extend(["--index".to_string(), index.display().to_string()]);
    args.extend(relay_flags(&relay));
    let (mut child, mut out, _err) = spawn_lines(&args);
    proxy.wait_held(1, T).await;

    // Every status event until one says the merge has ended: the totals
    // never shrink on the way (nothing found is identical or a conflict
    // here), and the last are the run's.
    let mut statuses = Vec::new();
    let last = loop {
        let said = until(&mut out, "\"status\"").await;
        let status = event(said.last().map(String::as_str).unwrap_or_default());
        statuses.push(status.clone());
        if status["walk_complete"] == true {
            break status;
        }
    };
    let totals: Vec<(u64, u64)> = statuses
        .iter()
        .map(|st| {
            let n = |k: &str| st[k].as_u64().unwrap_or_else(|| panic!("{k}: {st}"));
            (n("files_total"), n("bytes_total"))
        })
        .collect();
    assert!(
        totals
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
        "{totals:?}"
    );
    assert_eq!(
        (last["files_total"].as_u64(), last["bytes_total"].as_u64()),
        (Some(files), Some(bytes)),
        "{last}"
    );
    // A fetch is held: the run is provably not over.
    let done = last["files_done"]
        .as_u64()
        .unwrap_or_else(|| panic!("{last}"));
    assert!(done < files, "{last}");

    proxy.release();
    let said = until(&mut out, "\"summary\"").await;
    let summary = event(said.last().map(String::as_str).unwrap_or_default());
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["sync"]["direction"], "download", "{summary}");
    assert_eq!(
        summary["sync"]["fetched"].as_u64(),
        Some(files),
        "{summary}"
    );
    let code = tokio::time::timeout(T, child.wait())
        .await
        .unwrap_or_else(|_| panic!("sync did not finish"))
        .unwrap_or_else(|e| panic!("{e}"))
        .code();
    assert_eq!(code, Some(0));
    // Every file placed is byte for byte its blob (SHA-256 of each).
    assert_eq!(tree(&out_dir), tree(&dir.path("src/data")));
    relay.stop().await;
}
