//! `--block-checksum crc64`: every Put Block and Put Blob carries
//! `x-ms-content-crc64`, and the value is Azure's CRC-64 of exactly the body
//! sent. Azurite cannot check that
//! header (in its default strict mode it refuses it: 500 FeatureNotSupported), so
//! the fault proxy checks it the way the service does (with its own
//! implementation from Microsoft's definition), refuses a mismatch with 400
//! Crc64Mismatch, and forwards the request without it; the blob is then
//! downloaded and hashed.

use std::time::Duration;

use relay_storage::blob::WriterOptions;
use relay_storage::checksum::BlockChecksum;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_content_md5, blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr, summary};

const MIB: u64 = 1 << 20;
const T: Duration = Duration::from_secs(120);

/// A relay with `--block-checksum crc64` whose storage requests pass the fault
/// proxy (with `schedule`) on their way to Azurite, and a scratch directory.
async fn crc64_relay(tag: &str, schedule: Schedule) -> (String, FaultProxy, RelayHandle, Scratch) {
    let container = new_container(tag).await;
    let az = shared_azurite();
    let upstream = format!("127.0.0.1:{}", az.port)
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let proxy = FaultProxy::start(upstream, schedule).await;
    let storage = az.storage_at(
        &proxy.url(),
        WriterOptions {
            block_checksum: BlockChecksum::Crc64,
            ..WriterOptions::default()
        },
    );
    let relay = RelayHandle::start(storage, RelayOptions::default());
    (container, proxy, relay, Scratch::new(tag))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crc64_block_checksums_are_what_azure_computes() {
    let (container, proxy, relay, dir) = crc64_relay("crc64", Schedule::seeded(1)).await;
    let file = dir.path("f.bin");
    let size = 3 * 5 * MIB + 4321;
    let sha = write_random(&file, size, 91);
    let args = Upload::file(&file)
        .json()
        .block_size("5MiB")
        .via(&relay)
        .to(&container)
        .args();
    let out = run_client(&args, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["files"][0]["sha256"], sha.as_str());
    let (matched, mismatched) = proxy.stats.crc64_checks();
    assert_eq!(mismatched, 0, "a Put Block's CRC-64 did not match its body");
    assert_eq!(
        matched,
        proxy.stats.requests_of(Op::PutBlock),
        "every Put Block carried x-ms-content-crc64"
    );
    assert_eq!(matched, 4, "four blocks of 5 MiB or less");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

/// Direct mode takes the same flag: its Put Blocks carry Azure's CRC-64 of
/// exactly their bodies (the proxy checks each as the service would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_sends_crc64_when_asked() {
    let container = new_container("crc64d").await;
    let az = shared_azurite();
    let upstream = format!("127.0.0.1:{}", az.port)
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let proxy = FaultProxy::start(upstream, Schedule::seeded(1)).await;
    let dir = Scratch::new("crc64d");
    let file = dir.path("d.bin");
    let size = 2 * 5 * MIB + 77;
    let sha = write_random(&file, size, 92);
    let mut args = Upload::file(&file)
        .json()
        .block_size("5MiB")
        .to(&container)
        .args();
    args.extend(
        [
            "--direct",
            "--block-checksum",
            "crc64",
            "--storage-url",
            &proxy.url(),
            "--account-key",
            relay_tests::DEV_KEY,
            "--id-key-file",
            &dir.path("direct.key").display().to_string(),
        ]
        .map(str::to_string),
    );
    let out = run_client(&args, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["files"][0]["sha256"], sha.as_str());
    let (matched, mismatched) = proxy.stats.crc64_checks();
    assert_eq!(mismatched, 0, "a Put Block's CRC-64 did not match its body");
    assert_eq!(matched, 3, "three blocks, each with x-ms-content-crc64");
    assert_eq!(matched, proxy.stats.requests_of(Op::PutBlock));
    assert_eq!(blob_sha(&container, "d.bin").await, (size, sha));
}

/// A body corrupted on its way to storage (one bit flipped by the proxy, as a
/// faulty path would) is refused by the service with 400 Crc64Mismatch; the
/// relay still holds the block, so it sends it again and the blob verifies.
/// Found by the deployment rehearsal (scripts/rehearse): the relay used to
/// treat that 400 like any other refusal and fail the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_corrupted_in_transit_is_sent_again() {
    let schedule = Schedule {
        corrupt: vec![Op::PutBlock],
        ..Schedule::seeded(5)
    };
    let (container, proxy, relay, dir) = crc64_relay("crc64bad", schedule).await;
    let file = dir.path("f.bin");
    let size = 2 * 5 * MIB + 99;
    let sha = write_random(&file, size, 92);
    let args = Upload::file(&file)
        .json()
        .block_size("5MiB")
        .via(&relay)
        .to(&container)
        .args();
    let out = run_client(&args, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let (matched, mismatched) = proxy.stats.crc64_checks();
    assert_eq!(mismatched, 1, "the corrupted body was refused");
    assert_eq!(
        proxy.stats.requests_of(Op::PutBlock),
        matched + 1,
        "the refused block was sent again"
    );
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

/// A file small enough for one Put Blob: under CRC-64 the request carries the
/// body's CRC-64 and no MD5 (the relay no longer hashes the body with MD5), the
/// service checks it, and the blob still gets a Content-MD5, the one storage
/// computes for a Put Blob. A body corrupted on its way is refused (400
/// Crc64Mismatch) and sent again; nothing wrong is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_blob_under_crc64_is_checked_and_still_gets_a_content_md5() {
    use md5::{Digest, Md5};
    // Op::Other: Put Blob has no `comp`; the first body-carrying one is hit.
    let schedule = Schedule {
        corrupt: vec![Op::Other],
        ..Schedule::seeded(7)
    };
    let (container, proxy, relay, dir) = crc64_relay("crc64pb", schedule).await;
    let file = dir.path("small.bin");
    let size = 64 * 1024 + 5;
    let sha = write_random(&file, size, 93);
    let args = Upload::file(&file).json().via(&relay).to(&container).args();
    let out = run_client(&args, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let (matched, mismatched) = proxy.stats.crc64_checks();
    assert_eq!(proxy.stats.requests_of(Op::PutBlock), 0, "one Put Blob");
    assert_eq!(mismatched, 1, "the corrupted Put Blob was refused");
    assert_eq!(matched, 1, "and sent again with its CRC-64");
    assert_eq!(blob_sha(&container, "small.bin").await, (size, sha));
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        blob_content_md5(&container, "small.bin").await,
        Some(hex::encode(Md5::digest(&bytes))),
        "storage set the Put Blob's Content-MD5 itself"
    );
    relay.stop().await;
}
