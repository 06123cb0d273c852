//! Storage that says one thing and does another (through the fault proxy, in
//! front of real Azurite): a Put Block acknowledged and not kept, a commit that
//! landed though its answer was lost. Real QUIC, the real client binary; every
//! committed blob is downloaded and hashed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::log_capture::LogCapture;
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule, quick_writer};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr, summary};

const MIB: u64 = 1 << 20;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(120);

fn azurite_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], shared_azurite().port))
}

fn upload_args(file: &Path, to: &str, relay: &RelayHandle) -> Vec<String> {
    Upload::file(file)
        .to(to)
        .json()
        .block_size("5MiB")
        .extend(&Upload::default().via(relay).flags())
        .args()
}

/// The second Put Block is answered 201 and never reaches Azurite. The commit
/// is refused (400 InvalidBlockList); the relay finds the lost block in the
/// block list and fails the file retryably; the client's retry resumes from
/// the blocks storage kept and commits. The report counts both attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_storage_lost_is_sent_again_and_the_file_commits() {
    let container = new_container("lostblock").await;
    let schedule = Schedule {
        script: vec![
            (Op::PutBlock, Fault::Delay(Duration::ZERO)),
            (Op::PutBlock, Fault::Swallowed),
        ],
        ..Schedule::seeded(5)
    };
    let proxy = FaultProxy::start(azurite_addr(), schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), quick_writer(20));
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let dir = Scratch::new("lostblock");
    let file = dir.path("f.bin");
    let size = 12 * MIB + 123;
    let sha = write_random(&file, size, 31);

    let out = run_client(&upload_args(&file, &container, &relay), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let f = &s["files"][0];
    assert_eq!(f["status"], "committed", "{s}");
    assert_eq!(f["sha256"], sha.as_str());
    assert_eq!(f["attempts"], 2, "one retry after the lost block: {s}");
    let err = stderr(&out);
    assert!(err.contains("storage lost 1 of 3 staged blocks"), "{err}");
    // Which block is lost is the one that reached storage second, and the
    // three are staged concurrently: the retry resumes from that one, which
    // the relay names.
    let lost: u64 = err
        .split("a rerun resumes from block ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no block named: {err}"));
    assert!(lost < 3, "{err}");
    // Both attempts' bytes and requests: all of the file, then from the lost
    // block on; three Put Blocks and a refused Put Block List, then the rest.
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(u64::MAX);
    assert!(resumed < size, "{s}");
    assert_eq!(resumed == 0, lost == 0, "resumed from the lost block: {s}");
    assert_eq!(
        f["bytes_sent"].as_u64(),
        Some(size + (size - resumed)),
        "{s}"
    );
    let requests = f["storage_requests"].as_u64().unwrap_or(0);
    let seen = proxy.stats.requests_of(Op::PutBlock) + proxy.stats.requests_of(Op::PutBlockList);
    assert!(requests >= seen, "{requests} < {seen}: {s}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

/// When recovery is impossible (the lost block keeps being lost and the
/// client's attempts run out), the file fails retryably, says nothing was
/// committed and that a rerun resumes, and the report counts what went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_lost_every_time_says_a_rerun_resumes() {
    let container = new_container("lostalways").await;
    let schedule = Schedule {
        chances: vec![(Op::PutBlock, 1.0, Fault::Swallowed)],
        ..Schedule::seeded(6)
    };
    let proxy = FaultProxy::start(azurite_addr(), schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), quick_writer(20));
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let dir = Scratch::new("lostalways");
    let file = dir.path("f.bin");
    let size = 12 * MIB;
    write_random(&file, size, 32);

    let mut args = upload_args(&file, &container, &relay);
    args.extend(["--attempts".to_string(), "2".to_string()]);
    let out = run_client(&args, &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = &summary(&out)["files"][0];
    assert_eq!(f["error"]["code"], "storage", "{f}");
    let message = f["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("nothing committed; a rerun resumes"),
        "{message}"
    );
    assert!(f["attempts"].as_u64() > Some(1), "retried: {f}");
    assert!(f["bytes_sent"].as_u64() >= Some(size), "{f}");
    assert!(f["storage_requests"].as_u64() >= Some(4), "{f}");
    assert!(!blob_exists(&container, "f.bin").await);
    drop(proxy);
    relay.stop().await;
}

/// A commit's first attempt lands but its answer is lost, then storage
/// answers 503 until the relay gives up. The relay does not know whether the
/// blob was published and says so ("outcome unknown"), never "nothing
/// committed"; the client's retry finds the blob sealed and reports the file
/// committed. Both commits: Put Block List (a file of blocks) and Put Blob
/// (one block).
#[test]
fn a_commit_whose_answer_was_lost_is_never_called_nothing_committed() {
    // Its own runtime: the relays' log lines are captured on this test's
    // threads only, whatever runs beside it.
    let log = LogCapture::default();
    log.block_on(async {
        // Put Blob has no `comp=`: the proxy counts it among `Op::Other`.
        for (tag, size, op) in [
            ("lostanswer-blocks", 12 * MIB + 5, Op::PutBlockList),
            ("lostanswer-putblob", 100_000, Op::Other),
        ] {
            let container = new_container(tag).await;
            let schedule = Schedule {
                script: vec![
                    (op, Fault::LostResponse),
                    (op, Fault::ServerBusy),
                    (op, Fault::ServerBusy),
                ],
                ..Schedule::seeded(7)
            };
            let proxy = FaultProxy::start(azurite_addr(), schedule).await;
            // Three attempts: lost, 503, 503, then the relay gives up.
            let storage = shared_azurite().storage_at(&proxy.url(), quick_writer(3));
            let relay = RelayHandle::start(storage, RelayOptions::default());
            let dir = Scratch::new(tag);
            let file = dir.path("f.bin");
            let sha = write_random(&file, size, 33);

            let out = run_client(&upload_args(&file, &container, &relay), &[], T).await;
            assert!(out.status.success(), "{tag}: {}", stderr(&out));
            let s = summary(&out);
            let f = &s["files"][0];
            assert_eq!(f["status"], "committed", "{tag}: {s}");
            assert_eq!(f["attempts"], 2, "{tag}: {s}");
            assert_eq!(blob_sha(&container, "f.bin").await, (size, sha), "{tag}");
            // The relay's first stream may still be retrying storage when the
            // client's second attempt has found the commit by its seal (a
            // loaded machine: the client gave the first attempt up first), so
            // its one "failed;" line is waited for; `T` only guards a hang.
            let deadline = tokio::time::Instant::now() + T;
            let lines = loop {
                let lines = log.lines_about(&container);
                if lines.iter().any(|l| l.contains("failed;"))
                    || tokio::time::Instant::now() >= deadline
                {
                    break lines;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let failed: Vec<&String> = lines.iter().filter(|l| l.contains("failed;")).collect();
            assert_eq!(failed.len(), 1, "{tag}: {lines:#?}");
            assert!(
                failed[0].contains("failed; outcome unknown")
                    && failed[0].contains("checks the seal"),
                "{tag}: {}",
                failed[0]
            );
            assert!(
                !lines.iter().any(|l| l.contains("nothing committed")),
                "{tag}: {lines:#?}"
            );
            drop(proxy);
            relay.stop().await;
        }
    });
}
