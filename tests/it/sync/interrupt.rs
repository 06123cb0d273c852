//! Ctrl-C in an upload sync stops as `upload` does (tests/it/cli/output.rs):
//! a file whose every byte is staged is given its commit, and the report
//! says what is committed. Deterministic: the big file's Put Block List is
//! held by the storage proxy, and the signal goes only once a status line
//! says every byte the sync handed on is staged (which needs the sync's
//! status totals), never after a sleep.

use relay_tests::blobs::blob_sha;
use relay_tests::child_lines::{ctrl_c_with_a_commit_held, until};
use relay_tests::download_client::{T, relay_flags, s};
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::Op;

use super::{held_relay, ok, spawn_lines, sync};

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_waits_for_a_staged_commit_and_the_rerun_finds_all_unchanged() {
    let (container, proxy, relay) = held_relay("sync-int-up", Op::PutBlockList).await;
    let dir = Scratch::new("sync-int-up");
    let root = dir.path("src");
    // One Put Blob (not held), and two blocks of the relay's 16 MiB.
    let sha_small = write_random(&root.join("small.txt"), 1000, 1);
    let sha_big = write_random(&root.join("big.bin"), 17 * MIB, 2);
    let index = dir.path("index.sqlite");
    let way = relay_flags(&relay);
    let (src, dest) = (format!("{}/", root.display()), format!("{container}/p"));
    let mut args = s(&["sync", &src, &dest, "--status-interval", "0.05", "--index"]);
    args.push(index.display().to_string());
    args.extend(way.iter().cloned());
    let (mut child, mut out, mut err) = spawn_lines(&args);
    ctrl_c_with_a_commit_held(&mut child, &mut out, &mut err, &proxy, "small.txt").await;
    let said = until(&mut err, "stopped in flight").await;
    let code = tokio::time::timeout(T, child.wait())
        .await
        .unwrap_or_else(|_| panic!("sync did not stop"))
        .unwrap_or_else(|e| panic!("{e}"))
        .code();
    assert_eq!(code, Some(130));
    // So the report is exact: both sent, nothing left in flight.
    assert!(
        said.iter()
            .any(|l| l.contains("2 sent, 0 fetched, 0 skipped, 0 failed; 0 stopped in flight")),
        "{said:?}"
    );
    assert_eq!(blob_sha(&container, "p/small.txt").await, (1000, sha_small));
    assert_eq!(blob_sha(&container, "p/big.bin").await, (17 * MIB, sha_big));
    // The wait let the send finish whole, its index row too: the same
    // command finds both unchanged and reads nothing.
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["skipped_unchanged"].as_u64()),
        (Some(0), Some(2)),
        "{v}"
    );
    assert_eq!(y["bytes_read"], 0, "{v}");
    relay.stop().await;
}
