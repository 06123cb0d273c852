//! Every staged block but a file's own last is above Azure's 4 MiB
//! high-throughput threshold, and so is a tail the relay cuts short for
//! latency: read back from Azurite's committed block lists (never from what
//! the client or relay reported), for sizes on and around every boundary the
//! block plan has, through the relay and in direct mode. Each blob is also
//! downloaded and hashed.

use std::time::Duration;

use relay_tests::blobs::{blob_sha, new_container, writer};
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr, summary};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const THRESHOLD: u64 = 4 * MIB;
const T: Duration = Duration::from_secs(180);

/// Files of the set, uploaded with 9 MiB blocks (the tail cut needs a last
/// stretch over 8 MiB + 64 KiB, so 9 MiB shows both sides of that boundary
/// with little data): name, size and the committed block sizes the rule
/// allows. An empty list means one Put Blob (no block list).
fn cases() -> Vec<(&'static str, u64, Vec<u64>)> {
    vec![
        ("one-block.bin", 9 * MIB, vec![]),
        ("one-byte-over.bin", 9 * MIB + 1, vec![9 * MIB, 1]),
        ("last-at-threshold.bin", 13 * MIB, vec![9 * MIB, 4 * MIB]),
        ("last-over.bin", 13 * MIB + 1, vec![9 * MIB, 4 * MIB + 1]),
        // A last stretch of 8 MiB (+ 64 KiB) is too short to cut into two
        // blocks above the threshold: it stays whole (was 4 + 4 MiB).
        ("no-cut-8m.bin", 17 * MIB, vec![9 * MIB, 8 * MIB]),
        (
            "no-cut-8m64k.bin",
            17 * MIB + 64 * KIB,
            vec![9 * MIB, 8 * MIB + 64 * KIB],
        ),
        // One byte more and it is cut, both pieces above the threshold.
        (
            "first-cut.bin",
            17 * MIB + 64 * KIB + 1,
            vec![9 * MIB, 4 * MIB + 64 * KIB, 4 * MIB + 1],
        ),
        (
            "full-stretch-cut.bin",
            18 * MIB,
            vec![9 * MIB, 5 * MIB - 64 * KIB, 4 * MIB + 64 * KIB],
        ),
        (
            "odd.bin",
            22 * MIB + 12_345,
            vec![9 * MIB, 9 * MIB, 4 * MIB + 12_345],
        ),
    ]
}

/// Uploads the set with `extra` flags and checks every blob's block list and
/// content.
async fn upload_and_check(container: &str, tag: &str, extra: impl FnOnce(Upload) -> Upload) {
    let dir = Scratch::new(tag);
    let root = dir.path("set");
    let mut shas = Vec::new();
    for (i, (name, size, _)) in cases().iter().enumerate() {
        shas.push(write_random(&root.join(name), *size, 500 + i as u64));
    }
    let args = extra(Upload::file(&root).json().block_size("9MiB").to(container)).args();
    let out = run_client(&args, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["totals"]["committed"], cases().len());
    for ((name, size, expected), sha) in cases().into_iter().zip(shas) {
        let blob = format!("set/{name}");
        let blocks: Vec<u64> = writer(container, &blob)
            .committed_blocks()
            .await
            .unwrap_or_else(|e| panic!("{blob}: {e}"))
            .into_iter()
            .map(|(_, len)| len)
            .collect();
        if let Some((_, before_last)) = blocks.split_last() {
            assert!(
                before_last.iter().all(|&n| n > THRESHOLD),
                "{blob}: a block before the last at or below 4 MiB: {blocks:?}"
            );
        }
        assert_eq!(blocks, expected, "{blob}: committed block sizes");
        assert_eq!(blob_sha(container, &blob).await, (size, sha), "{blob}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_stages_no_block_at_or_below_the_threshold_but_a_files_last() {
    let (relay, container) =
        RelayHandle::with_container("blocksizes", RelayOptions::default()).await;
    upload_and_check(&container, "blocksizes-relay", |u| u.via(&relay)).await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_stages_no_block_at_or_below_the_threshold_but_a_files_last() {
    let dir = Scratch::new("blocksizes-direct-key");
    let key = dir.path("direct.key").display().to_string();
    let storage = relay_tests::azurite::shared_azurite().url();
    let container = new_container("blocksizes-direct").await;
    upload_and_check(&container, "blocksizes-direct", |u| {
        u.arg("--direct")
            .flag("--storage-url", &storage)
            .flag("--account-key", relay_tests::DEV_KEY)
            .flag("--id-key-file", &key)
    })
    .await;
}
