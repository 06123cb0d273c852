//! Resume on loopback, made deterministic: an interrupted upload is finished by a
//! plain rerun whatever moment the relay's Plan (a redirect: it has staged blocks)
//! reaches the eager client. With `hold_plan_until_received` the relay sends its
//! Plan only after the client has sent the whole eager body and its Trailer, which
//! is what every rerun over a 200 ms path saw; without it the Plan arrives early.
//!
//! The first blocks are staged the honest way: the real client uploads to a relay
//! whose pace hook stalls the transfer right after block `k` is complete, the test
//! waits until Azurite lists `k` uncommitted blocks and SIGKILLs the client. The
//! rerun goes to a second relay with the same block-ID key (another process of the
//! same deployment), with or without the hold.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_proto::id_key::IdKey;
use relay_server::{Config, TestHooks};
use relay_storage::staging::Pace;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, writer};
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{binary, run_client, stderr, summary, unique_container};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 5 * MIB;
const T: Duration = Duration::from_secs(60);

/// The harness's relay (`RelayHandle`) with a given block-ID key and hooks.
struct TestRelay {
    relay: RelayHandle,
}

impl TestRelay {
    /// A relay with `key`; `stall_from`: the transfer stalls (long) at the first
    /// chunk at or past that offset; `hold`: the Plan waits for that many bytes.
    fn start(key: &IdKey, stall_from: Option<u64>, hold: Option<u64>) -> Self {
        let pace: Option<Pace> = stall_from.map(|at| -> Pace {
            Arc::new(move |offset, _len| {
                if offset >= at {
                    // Long enough for the test to see the blocks and kill the client.
                    Duration::from_secs(120)
                } else {
                    Duration::ZERO
                }
            })
        });
        let key = key.clone();
        let relay = RelayHandle::start(
            shared_azurite().storage(),
            RelayOptions {
                hooks: TestHooks {
                    pace,
                    hold_plan_until_received: hold,
                    ..TestHooks::default()
                },
                configure: Some(Box::new(move |cfg: &mut Config| cfg.storage.id_key = key)),
                ..RelayOptions::default()
            },
        );
        Self { relay }
    }

    fn upload(&self, file: &std::path::Path, container: &str) -> Vec<String> {
        Upload::file(file)
            .to(container)
            .json()
            .arg("--quiet")
            .block_size("5MiB")
            .via(&self.relay)
            .args()
    }

    async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.relay.stop()).await;
    }

    /// A relay whose transfer is stalled: not waited for (the runtime drops it).
    fn abandon(self) {
        self.relay.abandon();
    }
}

async fn uncommitted(container: &str, blob: &str) -> usize {
    writer(container, blob)
        .uncommitted_blocks()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .len()
}

/// Stages exactly the first `k` blocks of `file` through a real relay and a real
/// client, then SIGKILLs the client.
async fn stage_first_blocks(key: &IdKey, file: &std::path::Path, container: &str, k: u64) {
    let relay = TestRelay::start(key, Some(k * BLOCK), None);
    let mut child = tokio::process::Command::new(binary("relay-client"))
        .args(relay.upload(file, container))
        .env_remove("RELAY_TOKEN")
        .env(
            "RELAY_PATH_CACHE",
            std::env::temp_dir().join(format!("blob-relay-eager-{}.json", std::process::id())),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run relay-client: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = uncommitted(container, "f.bin").await as u64;
        if n >= k {
            assert_eq!(n, k, "the stalled relay staged more than {k} blocks");
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("client ended ({status}) before {k} blocks were staged");
        }
        assert!(Instant::now() < deadline, "{k} blocks never staged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().await.unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(
        writer(container, "f.bin")
            .properties()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "a killed run must not commit"
    );
    relay.abandon();
}

/// One row of the table: a file of `size`, `k` blocks staged by a killed run, a
/// rerun whose Plan arrives late (`hold`) or early.
async fn rerun_finishes(tag: &str, size: u64, k: u64, hold: bool) {
    assert!(
        size < 32 * MIB,
        "the whole eager body must fit the stream window"
    );
    let container = unique_container(tag);
    shared_azurite()
        .storage()
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = Scratch::new(tag);
    let file = dir.path("f.bin");
    let sha = write_random(&file, size, size ^ k);
    let key = IdKey::random();
    stage_first_blocks(&key, &file, &container, k).await;

    // The Plan only once the connection has carried at least the whole file: the
    // client has sent Offer, Start, every byte and the Trailer by then.
    let relay = TestRelay::start(&key, None, hold.then_some(size));
    let out = run_client(&relay.upload(&file, &container), &[], T).await;
    assert!(
        out.status.success(),
        "rerun failed ({:?}): {}\n{}",
        out.status.code(),
        stderr(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    let s = summary(&out);
    let f = &s["files"][0];
    assert_eq!(f["status"], "committed", "{s}");
    let resumed = k * BLOCK;
    assert_eq!(f["bytes_resumed"], resumed, "{f}");
    assert_eq!(f["bytes_sent"], size - resumed, "{f}");
    assert_eq!(f["attempts"], 1, "a redirect must not cost a retry: {f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    assert_eq!(uncommitted(&container, "f.bin").await, 0);
    relay.stop().await;
}

// Remainder of several blocks: 1 of 4 blocks staged, 2 blocks and a tail to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_blocks_left_plan_after_trailer() {
    rerun_finishes("eagerseverallate", 3 * BLOCK + 777_777, 1, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_blocks_left_plan_early() {
    rerun_finishes("eagerseveralearly", 3 * BLOCK + 777_777, 1, false).await;
}

// Remainder smaller than one block: every full block staged, the tail to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn less_than_a_block_left_plan_after_trailer() {
    rerun_finishes("eagertaillate", 3 * BLOCK + 777_777, 3, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn less_than_a_block_left_plan_early() {
    rerun_finishes("eagertailearly", 3 * BLOCK + 777_777, 3, false).await;
}

// Nothing resumable left: every block but the last (never reused) is staged; the
// prefix ends at the last block's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_resumable_left_plan_after_trailer() {
    rerun_finishes("eagerzerolate", 3 * BLOCK, 2, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_resumable_left_plan_early() {
    rerun_finishes("eagerzeroearly", 3 * BLOCK, 2, false).await;
}
