//! Storage that says one thing and does another (through the fault proxy, in
//! front of real Azurite): a Put Block acknowledged and not kept, a commit that
//! landed though its answer was lost. Real QUIC, the real client binary; every
//! committed blob is downloaded and hashed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use relay_storage::blob::WriterOptions;
use relay_storage::retry::Backoff;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr, summary};

const MIB: u64 = 1 << 20;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(120);

fn azurite_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], shared_azurite().port))
}

/// Quick retries, as in the fault tests.
fn quick_writer(attempts: u32) -> WriterOptions {
    WriterOptions {
        backoff: Backoff {
            initial: Duration::from_millis(20),
            cap: Duration::from_millis(300),
            max_attempts: attempts,
        },
        connect_timeout: Duration::from_secs(10),
        patience: relay_storage::watch::Patience::both(Duration::from_secs(10)),
        ..WriterOptions::default()
    }
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
    // Both attempts' bytes and requests: all of the file, then from the lost
    // block on; three Put Blocks and a refused Put Block List, then the rest.
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(resumed > 0 && resumed < size, "{s}");
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
