//! Small files (one block, published with one conditional Put Blob) keep every
//! promise large files keep: nothing unverified is published, a killed upload
//! reruns cleanly (or finds its file already committed), overwrite rules hold,
//! errors are per file, and the `--json` report has the same shape. Plus the
//! relay's side of "many small files": it admits many streams on one connection,
//! each by its own size against the memory budget, and a file's bytes never wait
//! for an earlier file's Receipt.
//!
//! Real client binary, real relay on loopback QUIC, real Azurite, real files;
//! every outcome is checked by downloading and hashing the blob, or by its absence.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use relay_proto::id_key::Owner;
use relay_server::TestHooks;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, writer};
use relay_tests::files::{Scratch, write_random};
use relay_tests::gate::Gate;
use relay_tests::paced::run_and_kill;
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, summary};
use relay_transport::quic::Windows;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(120);

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `upload PATHS --json EXTRA... <relay args>`.
fn upload(
    relay: &RelayHandle,
    to: &str,
    paths: &[&std::path::Path],
    extra: &[&str],
) -> Vec<String> {
    let mut a = vec!["upload".to_string()];
    a.extend(paths.iter().map(|p| p.display().to_string()));
    a.push("--json".into());
    a.extend(strings(extra));
    a.extend(relay.client_args(to));
    a
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `count` random files of `size` bytes, `{stem}000.bin`... in `dir`: each
/// one's path, blob name and SHA-256.
fn random_files(
    dir: &Scratch,
    stem: &str,
    count: u64,
    size: u64,
    seed: u64,
) -> Vec<(std::path::PathBuf, String, String)> {
    (0..count)
        .map(|i| {
            let name = format!("{stem}{i:03}.bin");
            let path = dir.path(&name);
            let sha = write_random(&path, size, seed + i);
            (path, name, sha)
        })
        .collect()
}

/// The client uploading `files` through `relay` (`--json`), in the background.
fn spawn_upload(
    relay: &RelayHandle,
    container: &str,
    files: &[(std::path::PathBuf, String, String)],
) -> tokio::task::JoinHandle<std::process::Output> {
    let refs: Vec<&std::path::Path> = files.iter().map(|(p, _, _)| p.as_path()).collect();
    let a = upload(relay, container, &refs, &[]);
    tokio::spawn(async move { run_client(&a, &[], T).await })
}

/// Every file's blob holds exactly its bytes.
async fn assert_all_committed(
    container: &str,
    files: &[(std::path::PathBuf, String, String)],
    size: u64,
) {
    for (_, name, sha) in files {
        assert_eq!(
            blob_sha(container, name).await,
            (size, sha.clone()),
            "{name}"
        );
    }
}

/// Storage for a relay that goes through `proxy`.
fn via(proxy: &FaultProxy) -> relay_storage::account::Storage {
    shared_azurite().storage_at(&proxy.url(), relay_storage::blob::WriterOptions::default())
}

async fn proxy() -> FaultProxy {
    FaultProxy::start(
        SocketAddr::from(([127, 0, 0, 1], shared_azurite().port)),
        Schedule::seeded(1),
    )
    .await
}

/// A relay with small windows (the client is never more than 256 KiB ahead of
/// what the relay has read) whose first transfer stops at `gate`.
fn gated_relay(gate: &Arc<Gate>) -> RelayHandle {
    RelayHandle::start(
        shared_azurite().storage(),
        RelayOptions {
            hooks: TestHooks {
                pace: Some(gate.pace()),
                ..TestHooks::default()
            },
            configure: Some(Box::new(|cfg| {
                cfg.listen.windows = Windows {
                    stream_window: 256 * KIB,
                    connection_window: MIB,
                    ..Windows::default()
                };
            })),
            ..RelayOptions::default()
        },
    )
}

fn committed(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "client failed: {}", stderr(out));
    let f = summary(out)["files"][0].clone();
    assert_eq!(f["status"], "committed", "{f}");
    f
}

async fn uncommitted_count(container: &str, blob: &str) -> usize {
    writer(container, blob)
        .uncommitted_blocks()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_report_of_a_small_file_has_the_large_files_shape() {
    let container = new_container("smalljson").await;
    let relay = RelayHandle::start(shared_azurite().storage(), RelayOptions::default());
    let dir = Scratch::new("smalljson");
    let small = dir.path("small.bin");
    let large = dir.path("large.bin");
    let small_sha = write_random(&small, 64 * KIB + 7, 1);
    let large_sha = write_random(&large, 11 * MIB + 3, 2);
    let a = upload(
        &relay,
        &container,
        &[&small, &large],
        &["--block-size", "5MiB"],
    );
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let files = s["files"].as_array().cloned().unwrap_or_default();
    let by = |name: &str| -> serde_json::Value {
        files
            .iter()
            .find(|f| f["blob"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {s}"))
    };
    let (fs, fl) = (by("small.bin"), by("large.bin"));
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&fs),
        keys(&fl),
        "same fields for small and large files"
    );
    assert_eq!(keys(&fs["relay_ms"]), keys(&fl["relay_ms"]));
    assert_eq!(fs["sha256"], small_sha.as_str());
    assert_eq!(fl["sha256"], large_sha.as_str());
    // One block: one conditional Put Blob; several blocks: more.
    let requests = |f: &serde_json::Value| f["storage_requests"].as_u64().unwrap_or(0);
    assert_eq!(requests(&fs), 1, "{fs}");
    assert!(requests(&fl) > 2, "{fl}");
    // Stored bytes and the `sha256` metadata, as for large files.
    assert_eq!(
        blob_sha(&container, "small.bin").await,
        (64 * KIB + 7, small_sha.clone())
    );
    let props = writer(&container, "small.bin")
        .properties()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("small.bin missing"));
    assert_eq!(props.sha256.as_deref(), Some(small_sha.as_str()));
    assert_eq!(
        blob_sha(&container, "large.bin").await,
        (11 * MIB + 3, large_sha)
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_file_killed_midway_leaves_nothing_and_reruns_cleanly() {
    let container = new_container("smallkill").await;
    let gate = Gate::new(512 * KIB);
    let relay = gated_relay(&gate);
    let dir = Scratch::new("smallkill");
    let file = dir.path("f.bin");
    let size = MIB + 17;
    let sha = write_random(&file, size, 3);
    let a = upload(&relay, &container, &[&file], &[]);
    run_and_kill(&a, || gate.holding()).await;
    // Held at 512 KiB with a 256 KiB stream window: the client never sent the
    // rest or a Trailer, so there is nothing the relay could publish.
    gate.release();
    assert!(
        !blob_exists(&container, "f.bin").await,
        "a killed run must not publish"
    );
    assert_eq!(
        uncommitted_count(&container, "f.bin").await,
        0,
        "one block: nothing staged"
    );

    let f = committed(&run_client(&a, &[], T).await);
    assert_eq!(f["bytes_resumed"], 0, "{f}");
    assert_eq!(f["bytes_sent"], size, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_file_killed_while_publishing_rerun_finds_it_committed() {
    let container = new_container("smallpublish").await;
    let proxy = proxy().await;
    // Put Blob is neither Put Block nor a block list or properties request.
    proxy.hold(Op::Other);
    let relay = RelayHandle::start(via(&proxy), RelayOptions::default());
    let dir = Scratch::new("smallpublish");
    let file = dir.path("f.bin");
    let size = 300 * KIB + 1;
    let sha = write_random(&file, size, 4);
    let a = upload(&relay, &container, &[&file], &[]);
    // Held Put Blob: the relay has every byte, verified the SHA-256, and is
    // publishing; the client cannot have its Receipt.
    run_and_kill(&a, || proxy.stats.held.load(Ordering::SeqCst) >= 1).await;
    assert!(!blob_exists(&container, "f.bin").await);
    proxy.release();
    let deadline = Instant::now() + T;
    while !blob_exists(&container, "f.bin").await {
        assert!(Instant::now() < deadline, "the relay never published");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The rerun finds the killed run's commit sealed with its bytes and reports
    // the file as an identical one is on any rerun. A small file is not probed
    // before it is sent: its bytes travel, and its conditional Put Blob, refused,
    // writes nothing (the refusal and one look at the blob: 2 requests).
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "client failed: {}", stderr(&out));
    let f = summary(&out)["files"][0].clone();
    assert_eq!(f["status"], "skipped", "{f}");
    assert_eq!(f["reason"], "identical", "{f}");
    assert_eq!(f["bytes_sent"], size, "{f}");
    assert_eq!(f["storage_requests"], 2, "{f}");
    assert_eq!(f["sha256"], sha.as_str());
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha.clone()));

    // Other bytes under the same name are still refused, the blob kept.
    write_random(&file, size, 5);
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("a blob with this name exists"),
        "{}",
        stderr(&out)
    );
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_file_corrupted_at_the_relay_is_never_published() {
    let container = new_container("smallcorrupt").await;
    let proxy = proxy().await;
    let hooks = TestHooks {
        mangle: Some(Arc::new(|offset: u64, chunk: &mut [u8]| {
            let target = 40 * KIB + 3;
            if (offset..offset + chunk.len() as u64).contains(&target) {
                chunk[(target - offset) as usize] ^= 0x01;
            }
        })),
        ..TestHooks::default()
    };
    let relay = RelayHandle::start(
        via(&proxy),
        RelayOptions {
            hooks,
            ..RelayOptions::default()
        },
    );
    let dir = Scratch::new("smallcorrupt");
    let file = dir.path("victim.bin");
    write_random(&file, 64 * KIB, 6);
    let out = run_client(&upload(&relay, &container, &[&file], &[]), &[], T).await;
    assert_eq!(out.status.code(), Some(1));
    let f = &summary(&out)["files"][0];
    assert_eq!(f["status"], "failed");
    assert_eq!(f["error"]["code"], "hash_mismatch");
    assert!(stderr(&out).contains("victim.bin"), "{}", stderr(&out));
    assert!(!blob_exists(&container, "victim.bin").await);
    // Verify, then publish: the mismatch stopped it before any write to storage.
    assert_eq!(
        proxy.stats.requests_of(Op::Other),
        0,
        "no Put Blob was sent"
    );
    assert_eq!(proxy.stats.requests_of(Op::PutBlock), 0);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_file_changed_during_transfer_fails_and_publishes_nothing() {
    let container = new_container("smallchanged").await;
    let gate = Gate::new(256 * KIB);
    let relay = gated_relay(&gate);
    let dir = Scratch::new("smallchanged");
    let file = dir.path("f.bin");
    write_random(&file, MIB, 7);
    let a = upload(&relay, &container, &[&file], &[]);
    let client = tokio::spawn({
        let a = a.clone();
        async move { run_client(&a, &[], T).await }
    });
    let deadline = Instant::now() + T;
    while !gate.holding() {
        assert!(Instant::now() < deadline, "transfer never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Same size, a byte past what the client can have read (≤ 512 KiB) changes.
    let mut bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
    bytes[900 * 1024] ^= 0xff;
    let before = std::fs::metadata(&file).and_then(|m| m.modified()).ok();
    std::fs::write(&file, &bytes).unwrap_or_else(|e| panic!("{e}"));
    if let Some(before) = before {
        // A coarse clock must still see a new mtime.
        let _ = std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(before + Duration::from_secs(1)));
    }
    gate.release();
    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(1));
    let f = &summary(&out)["files"][0];
    assert_eq!(f["status"], "failed");
    assert_eq!(f["error"]["code"], "source_changed", "{f}");
    assert_eq!(f["attempts"], 1, "a changed source is not retried");
    assert!(!blob_exists(&container, "f.bin").await);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_files_overwrite_rules_and_per_file_errors() {
    let container = new_container("smalloverwrite").await;
    let relay = RelayHandle::start(shared_azurite().storage(), RelayOptions::default());
    let dir = Scratch::new("smalloverwrite");
    let paths: Vec<_> = (0..5).map(|i| dir.path(&format!("f{i}.bin"))).collect();
    let mut shas: Vec<String> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| write_random(p, 4 * KIB + i as u64, 10 + i as u64))
        .collect();
    // f2 exists first (other bytes).
    let first = run_client(&upload(&relay, &container, &[&paths[2]], &[]), &[], T).await;
    let etag = committed(&first)["etag"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let old_sha = shas[2].clone();
    shas[2] = write_random(&paths[2], 5 * KIB, 99);

    // One run of five: f2 is refused on its own, the four others commit.
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let out = run_client(&upload(&relay, &container, &refs, &[]), &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(
        (
            s["totals"]["committed"].as_u64(),
            s["totals"]["failed"].as_u64()
        ),
        (Some(4), Some(1)),
        "{s}"
    );
    for f in s["files"].as_array().into_iter().flatten() {
        if f["blob"] == "f2.bin" {
            assert_eq!(f["status"], "failed", "{f}");
            assert_eq!(f["error"]["code"], "exists", "{f}");
        } else {
            assert_eq!(f["status"], "committed", "{f}");
        }
    }
    assert!(
        stderr(&out).contains("f2.bin: refused: a blob with this name exists (add --overwrite)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(blob_sha(&container, "f2.bin").await.1, old_sha, "kept");
    for i in [0, 1, 3, 4] {
        assert_eq!(blob_sha(&container, &format!("f{i}.bin")).await.1, shas[i]);
    }

    // --if-match: a stale ETag is refused, the current one replaces.
    let stale = upload(
        &relay,
        &container,
        &[&paths[2]],
        &["--if-match", "\"0x8DEADBEEF\""],
    );
    let out = run_client(&stale, &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(summary(&out)["files"][0]["status"], "failed");
    assert_eq!(blob_sha(&container, "f2.bin").await.1, old_sha, "kept");
    let fresh = upload(&relay, &container, &[&paths[2]], &["--if-match", &etag]);
    committed(&run_client(&fresh, &[], T).await);
    assert_eq!(
        blob_sha(&container, "f2.bin").await,
        (5 * KIB, shas[2].clone())
    );

    // --overwrite replaces unconditionally.
    let newest = write_random(&paths[2], 3 * KIB, 100);
    let over = upload(&relay, &container, &[&paths[2]], &["--overwrite"]);
    committed(&run_client(&over, &[], T).await);
    assert_eq!(blob_sha(&container, "f2.bin").await, (3 * KIB, newest));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_files_stream_at_once_within_the_budget() {
    let container = new_container("smallmany").await;
    let proxy = proxy().await;
    // Every Put Blob waits: a file that reaches it was received whole and verified.
    proxy.hold(Op::Other);
    const FILES: u64 = 48;
    const SIZE: u64 = 64 * KIB;
    // One token may hold half the budget: 32 files' buffers.
    let share_bytes = 32 * SIZE;
    let relay = RelayHandle::start(
        via(&proxy),
        RelayOptions {
            memory_budget: 2 * share_bytes,
            configure: Some(Box::new(|cfg| cfg.limits.token_share_percent = 50)),
            ..RelayOptions::default()
        },
    );
    let dir = Scratch::new("smallmany");
    let files = random_files(&dir, "m", FILES, SIZE, 200);
    let client = spawn_upload(&relay, &container, &files);
    // 32 files publishing at once on one connection: none waited for another's
    // Receipt (none has one), and the relay admitted far more than 8 streams.
    let deadline = Instant::now() + T;
    while proxy.stats.held.load(Ordering::SeqCst) < 32 {
        assert!(
            !client.is_finished(),
            "the client ended before 32 files were publishing"
        );
        assert!(Instant::now() < deadline, "no 32 files publishing at once");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The rest wait for budget, not for a stream: each file took its own size.
    let share = relay.shared.share_of(&Owner::of_token(TOKEN));
    let deadline = Instant::now() + T;
    while share.waiting() == 0 {
        assert!(Instant::now() < deadline, "no file waits for the budget");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // /metrics (blob_relay_budget_waiting_blocks) counts the waits on a
    // token's share too; it used to show only the shared budget's, 0 here.
    // Nothing is released while the proxy holds, so waits only grow: read
    // the share's first.
    let on_share = share.waiting();
    assert!(
        relay.shared.blocks_waiting() >= on_share,
        "blob_relay_budget_waiting_blocks misses waits on the share"
    );
    assert!(
        share.in_use_bytes() <= share_bytes,
        "{} > {share_bytes}",
        share.in_use_bytes()
    );
    let global = &relay.shared.limits.budget;
    assert!(global.in_use_bytes() <= global.total_bytes());
    assert_eq!(
        proxy.stats.held.load(Ordering::SeqCst),
        32,
        "the budget bounds files in memory"
    );
    proxy.release();
    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["totals"]["committed"], FILES);
    assert_all_committed(&container, &files, SIZE).await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_of_tiny_files_gets_streams_by_their_declared_size() {
    let container = new_container("smallcredit").await;
    let proxy = proxy().await;
    // Every Put Blob waits, so every file stays open on the connection.
    proxy.hold(Op::Other);
    // More than the 512 streams a connection had before, fewer than a
    // connection of 1 KiB files may borrow (`stream_credit`).
    const FILES: u64 = 640;
    const SIZE: u64 = KIB;
    // Storage that takes all of them at once: files waiting for it then count
    // only by their sizes (with the default 128, files queued beyond what
    // storage takes raise no limit: `stream_credit::tests`).
    let storage = shared_azurite().storage_at(
        &proxy.url(),
        relay_storage::blob::WriterOptions {
            max_concurrent_requests: 1024,
            max_idle_per_host: 1024,
            ..Default::default()
        },
    );
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let pool = relay.shared.admission.streams.clone();
    assert!(pool.max_per_connection() > FILES, "{pool:?}");
    let dir = Scratch::new("smallcredit");
    let files = random_files(&dir, "t", FILES, SIZE, 900);
    let client = spawn_upload(&relay, &container, &files);
    // All 640 files open on the one connection at once, none with a Receipt.
    let active = || relay.shared.metrics.transfers_active.load(Ordering::SeqCst);
    let deadline = Instant::now() + T;
    while active() < FILES {
        assert!(
            !client.is_finished(),
            "the client ended with {} files open",
            active()
        );
        assert!(
            Instant::now() < deadline,
            "only {} files open at once (pool {pool:?})",
            active()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The slots beyond the connection's base came from the pool.
    let base = relay_server::connection::stream_credit::BASE_STREAMS;
    assert!(pool.borrowed() >= FILES - base, "{pool:?}");
    assert!(pool.borrowed() <= pool.total());
    proxy.release();
    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["totals"]["committed"], FILES);
    assert_all_committed(&container, &files, SIZE).await;
    // The connection is gone: every borrowed slot is back in the pool.
    let deadline = Instant::now() + T;
    while pool.borrowed() > 0 {
        assert!(Instant::now() < deadline, "slots not returned: {pool:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.stop().await;
}
