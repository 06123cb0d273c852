//! Resume end-to-end: the real client killed at chosen points and run again, sources
//! changed between and during attempts, and foreign or corrupt blocks in the
//! uncommitted list. A relay in-process with small QUIC windows (so the client can
//! never run far ahead of what the relay has read) and a pacing hook that holds the
//! transfer at a chosen offset until the test lets it go (so a kill lands exactly
//! there, however slow the machine). Every outcome is checked by downloading and
//! hashing the blob, or by its absence.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use relay_proto::block_id::{BlockId, BlockState, IdSigner, TransferTag};
use relay_proto::checkpoint::Checkpoint;
use relay_proto::id_key::{IdKey, Owner};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_content_md5, blob_sha, new_container, writer};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::paced::{TestRelay, run_and_kill, uncommitted, wait_uncommitted};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::relay::TOKEN;
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr, summary, unique_container};
use sha2::Digest;

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 5 * MIB;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(120);

async fn setup(tag: &str) -> (TestRelay, String, Scratch) {
    let container = new_container(tag).await;
    (TestRelay::start(), container, Scratch::new(tag))
}

fn committed_file(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        stderr(out),
        String::from_utf8_lossy(&out.stdout)
    );
    let s = summary(out);
    let f = s["files"][0].clone();
    assert_eq!(f["status"], "committed", "{s}");
    f
}

/// Kills the client once the relay has read `at` bytes, reruns, and checks that the
/// rerun reused exactly `expect_blocks` blocks and committed the right bytes.
async fn kill_and_rerun(tag: &str, size: u64, at: u64, expect_blocks: usize) {
    let (relay, container, dir) = setup(tag).await;
    let file = dir.path("f.bin");
    let sha = write_random(&file, size, size ^ at);
    relay.control.gate_at(at);
    let args = relay.upload(&file, &container);
    run_and_kill(&args, || relay.control.holding()).await;
    assert!(relay.received() >= at);
    let staged = wait_uncommitted(&container, "f.bin", expect_blocks).await;
    // Nothing past the kill point can have been staged: the relay is held there, and
    // a partial block is never staged. (It stays held until the end: a relay that
    // staged a block from the bytes still buffered after the kill would be right
    // too, but then the count below would depend on timing.)
    assert_eq!(
        staged.len(),
        expect_blocks,
        "blocks staged before the rerun"
    );
    assert!(
        writer(&container, "f.bin")
            .properties()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "a killed run must not commit"
    );

    let f = committed_file(&run_client(&args, &[], T).await);
    let resumed = expect_blocks as u64 * BLOCK;
    assert_eq!(f["bytes_resumed"], resumed, "{f}");
    assert_eq!(f["bytes_sent"], size - resumed, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    // Hygiene: the commit dropped every uncommitted block.
    assert!(uncommitted(&container, "f.bin").await.is_empty());
    relay.stop().await;
}

/// With 10 MiB blocks a 30 MiB file is staged as 10, 10, 6 MiB less 64 KiB
/// and 4 MiB plus 64 KiB: the last stretch is cut so only a short block is left to
/// stage after the last byte (`relay_proto::plan::TAIL_BLOCK`), both pieces
/// above the 4 MiB threshold. Killed inside that tail, the rerun reuses the
/// three blocks before it, sends only the tail, and commits the right bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_ending_in_a_cut_tail_resumes_at_the_tail() {
    const CUT_ALIGN: u64 = 64 * 1024;
    let (relay, container, dir) = setup("tailcut").await;
    let file = dir.path("f.bin");
    let size = 30 * MIB;
    let tail_start = 26 * MIB - CUT_ALIGN;
    let sha = write_random(&file, size, 31);
    // Held on the chunk that reaches 2 MiB into the tail: a chunk is at most
    // the 2 MiB stream window, so that chunk starts inside the tail and the
    // block before it (which does not end on a whole MiB) is complete.
    relay.control.gate_at(tail_start + 2 * MIB);
    let args: Vec<String> = relay
        .upload(&file, &container)
        .into_iter()
        .map(|a| if a == "5MiB" { "10MiB".to_string() } else { a })
        .collect();
    run_and_kill(&args, || relay.control.holding()).await;
    let mut staged: Vec<u64> = wait_uncommitted(&container, "f.bin", 3)
        .await
        .into_iter()
        .map(|(_, size)| size)
        .collect();
    staged.sort_unstable();
    assert_eq!(
        staged,
        [6 * MIB - CUT_ALIGN, 10 * MIB, 10 * MIB],
        "blocks before the tail"
    );
    let f = committed_file(&run_client(&args, &[], T).await);
    assert_eq!(f["bytes_resumed"], tail_start, "{f}");
    assert_eq!(f["bytes_sent"], size - tail_start, "only the tail: {f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    assert!(uncommitted(&container, "f.bin").await.is_empty());
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_killed_before_first_block_restarts_cleanly() {
    kill_and_rerun("killfirst", 30 * MIB + 4321, MIB, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_killed_mid_block_resumes_at_last_staged_block() {
    // Killed inside block 3 (the client at most ~3 MiB ahead): blocks 0-2 are
    // reused, the rest is sent.
    kill_and_rerun("killmid", 40 * MIB + 999, 16 * MIB, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_killed_in_last_block_resumes_before_it() {
    // Every block but the 4.5 MiB last one is staged, nothing committed: only the
    // tail is sent again.
    kill_and_rerun("killlast", 30 * MIB + 9 * MIB / 2, 30 * MIB + MIB / 2, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_killed_after_every_byte_rerun_finds_blob_committed() {
    // The relay's storage goes through a proxy that holds its Put Block List: when
    // one is held, the relay has every byte and the Trailer and is committing, and
    // the client cannot have its Receipt yet. The client is killed right there.
    let proxy = FaultProxy::start(
        SocketAddr::from(([127, 0, 0, 1], shared_azurite().port)),
        Schedule::seeded(1),
    )
    .await;
    proxy.hold(Op::PutBlockList);
    let container = unique_container("killcommit");
    shared_azurite()
        .storage()
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let relay = TestRelay::start_on(
        shared_azurite().storage_at(&proxy.url(), relay_storage::blob::WriterOptions::default()),
    );
    let dir = Scratch::new("killcommit");
    let file = dir.path("f.bin");
    let size = 20 * MIB + 3;
    let sha = write_random(&file, size, 5);
    let args = relay.upload(&file, &container);
    run_and_kill(&args, || proxy.stats.held.load(Ordering::SeqCst) >= 1).await;
    assert_eq!(relay.received(), size, "every byte was at the relay");
    // The relay commits without the client.
    proxy.release();
    let w = writer(&container, "f.bin");
    // A bound against hangs only.
    let deadline = Instant::now() + Duration::from_secs(60);
    while w
        .properties()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .is_none()
    {
        assert!(Instant::now() < deadline, "the relay never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The re-run of the same command: the blob exists, holds exactly this file, so
    // the file is reported skipped (identical) with nothing sent (not "exists").
    let out = run_client(&args, &[], T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = summary(&out)["files"][0].clone();
    assert_eq!(f["status"], "skipped", "{f}");
    assert_eq!(f["reason"], "identical", "{f}");
    assert_eq!(f["sha256"], sha.as_str());
    assert_eq!(f["bytes_sent"], 0, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));

    // A different file under the same name is still refused.
    write_random(&file, size, 6);
    let out = run_client(&args, &[], T).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("a blob with this name exists"),
        "{}",
        stderr(&out)
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_changed_between_attempts_restarts_from_zero() {
    let (relay, container, dir) = setup("changedbetween").await;
    let file = dir.path("f.bin");
    let size = 30 * MIB + 5;
    write_random(&file, size, 11);
    relay.control.gate_at(12 * MIB);
    let args = relay.upload(&file, &container);
    run_and_kill(&args, || relay.control.holding()).await;
    assert_eq!(wait_uncommitted(&container, "f.bin", 2).await.len(), 2);

    // Same size, one byte different inside the staged prefix.
    flip_byte(&file, 4 * MIB + 17);
    let new_sha = sha256_file(&file);
    let f = committed_file(&run_client(&args, &[], T).await);
    assert_eq!(f["bytes_resumed"], 0, "{f}");
    assert_eq!(f["bytes_sent"], size, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, new_sha));
    // The old attempt's blocks were dropped by the commit.
    assert!(uncommitted(&container, "f.bin").await.is_empty());
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_changed_during_transfer_fails_and_commits_nothing() {
    let (relay, container, dir) = setup("changedduring").await;
    let file = dir.path("f.bin");
    write_random(&file, 25 * MIB, 12);
    // Held at 5 MiB: the client, never more than the windows ahead, has not read
    // the byte at 20 MiB when it changes.
    relay.control.gate_at(5 * MIB);
    let args = relay.upload(&file, &container);
    let client = tokio::spawn({
        let args = args.clone();
        async move { run_client(&args, &[], T).await }
    });
    // A bound against hangs only.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !relay.control.holding() {
        assert!(Instant::now() < deadline, "transfer never started");
        assert!(!client.is_finished(), "the client ended before 5 MiB");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Same size, a byte further on changes: only size and mtime can tell.
    flip_byte(&file, 20 * MIB);
    relay.control.release();
    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr(&out);
    assert!(stderr.contains("changed"), "{stderr}");
    let f = &summary(&out)["files"][0];
    assert_eq!(f["status"], "failed");
    assert_eq!(f["error"]["code"], "source_changed");
    assert_eq!(f["attempts"], 1, "a changed source is not retried");
    assert!(
        writer(&container, "f.bin")
            .properties()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "nothing may be committed"
    );
    relay.stop().await;
}

fn md5_hex(path: &std::path::Path) -> String {
    use md5::Digest as _;
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{e}"));
    hex::encode(md5::Md5::digest(&data))
}

/// `--put-md5` through a kill and a resume: the relay that finishes the upload
/// never saw the first two blocks, yet the blob's Content-MD5 is the MD5 of
/// every byte (the MD5 state came from the markers staged beside them, bound to
/// the same chain). Without the flag a block list gets no Content-MD5, and
/// direct mode keeps it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_md5_is_the_md5_of_every_byte_across_a_resume() {
    let (relay, container, dir) = setup("putmd5").await;
    let file = dir.path("f.bin");
    let size = 3 * BLOCK + 100;
    let sha = write_random(&file, size, 23);
    let md5 = md5_hex(&file);
    relay.control.gate_at(2 * BLOCK + MIB);
    let mut args = relay.upload(&file, &container);
    args.push("--put-md5".into());
    run_and_kill(&args, || relay.control.holding()).await;
    // Two blocks, each with its marker.
    let staged = wait_uncommitted(&container, "f.bin", 4).await;
    assert_eq!(staged.len(), 4, "{staged:?}");
    let f = committed_file(&run_client(&args, &[], T).await);
    assert_eq!(f["bytes_resumed"], 2 * BLOCK, "{f}");
    assert_eq!(f["content_md5"], md5.as_str(), "{f}");
    assert_eq!(blob_content_md5(&container, "f.bin").await, Some(md5));
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    assert!(uncommitted(&container, "f.bin").await.is_empty());

    let plain = dir.path("plain.bin");
    write_random(&plain, 2 * BLOCK + 5, 24);
    let f = committed_file(&run_client(&relay.upload(&plain, &container), &[], T).await);
    assert!(f.get("content_md5").is_none(), "{f}");
    assert_eq!(blob_content_md5(&container, "plain.bin").await, None);

    let direct = dir.path("direct.bin");
    let sha = write_random(&direct, 2 * BLOCK + 7, 25);
    let mut args: Vec<String> = Upload::file(&direct)
        .to(&container)
        .json()
        .block_size("5MiB")
        .args();
    args.extend(
        [
            "--direct",
            "--put-md5",
            "--storage-url",
            &shared_azurite().url(),
            "--account-key",
            relay_tests::DEV_KEY,
            "--id-key-file",
            &dir.path("direct.key").display().to_string(),
        ]
        .map(str::to_string),
    );
    let f = committed_file(&run_client(&args, &[], T).await);
    assert_eq!(f["content_md5"], md5_hex(&direct).as_str(), "{f}");
    assert_eq!(
        blob_content_md5(&container, "direct.bin").await,
        Some(md5_hex(&direct))
    );
    assert_eq!(
        blob_sha(&container, "direct.bin").await,
        (2 * BLOCK + 7, sha)
    );
    relay.stop().await;
}

/// Stages blocks `0..count` of `content` as the relay with `signer` stages them
/// (each ID continues the hash state of the block before).
async fn stage_as_relay(container: &str, signer: &IdSigner, content: &[u8], count: usize) {
    let w = writer(container, "f.bin");
    let mut h = sha2::Sha256::new();
    for (index, block) in content.chunks(BLOCK as usize).take(count).enumerate() {
        let follows = Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"));
        h.update(block);
        let raw = signer.encode(&BlockId {
            index: index as u32,
            follows,
            state: BlockState::After(Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"))),
        });
        w.stage_block(&raw, bytes::Bytes::copy_from_slice(block))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// An ordinary user: an upload interrupted after three blocks, the file edited
/// in its first block, an upload of the edit (a fresh start) interrupted after
/// one block, the edit undone, and a last run. Both versions' blocks sit at
/// index 0 of the uncommitted list; version 1's blocks 1 and 2 carry the hash of
/// version 1's prefix. A resume that took the newer block 0 next to them
/// committed bytes that did not hash to the SHA-256 it recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_never_mixes_blocks_of_two_versions_of_a_file() {
    let (relay, container, dir) = setup("versions").await;
    let file = dir.path("f.bin");
    let size = 4 * BLOCK + 100;
    let sha = write_random(&file, size, 17);
    let v1 = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
    let mut v2 = v1.clone();
    v2[..BLOCK as usize].fill(0x3c);
    let ours = signer(&relay.key, TOKEN, &container, size, BLOCK);
    stage_as_relay(&container, &ours, &v1, 3).await;
    stage_as_relay(&container, &ours, &v2, 1).await;
    // Azurite lists them in staging order: a "last ID per index" rule took
    // version 2's block 0.
    assert_eq!(uncommitted(&container, "f.bin").await.len(), 4);

    let f = committed_file(&run_client(&relay.upload(&file, &container), &[], T).await);
    assert_eq!(f["bytes_resumed"], 3 * BLOCK, "version 1's own chain: {f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha.clone()));
    assert_eq!(f["sha256"], sha, "{f}");
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_corrupt_blocks_never_reach_a_commit() {
    let (relay, container, dir) = setup("foreign").await;
    let file = dir.path("f.bin");
    let size = 20 * MIB + 64;
    let sha = write_random(&file, size, 13);
    let block_size = BLOCK;
    let ours = signer(&relay.key, TOKEN, &container, size, block_size);
    let w = writer(&container, "f.bin");
    let junk = bytes::Bytes::from(vec![0xA5u8; block_size as usize]);

    // Garbage IDs of the right length.
    for i in 0..3u8 {
        w.stage_block(&[i; 64], junk.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // Well-formed IDs of another transfer (another size: another tag).
    let other = signer(&relay.key, TOKEN, &container, size + 1, block_size);
    w.stage_block(&id(&other, 0, &junk), junk.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Well-formed IDs of this very transfer whose checkpoints describe other bytes:
    // the relay offers to resume at 10 MiB, the client's prefix does not match.
    for index in 0..2u32 {
        w.stage_block(&id(&ours, index, &junk), junk.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // And a damaged copy of one (a flipped bit in its checkpoint).
    let mut damaged = id(&ours, 2, &junk);
    damaged[30] ^= 1;
    w.stage_block(&damaged, junk.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(uncommitted(&container, "f.bin").await.len(), 7);

    let f = committed_file(&run_client(&relay.upload(&file, &container), &[], T).await);
    assert_eq!(f["bytes_resumed"], 0, "{f}");
    assert_eq!(f["bytes_sent"], size, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    assert!(uncommitted(&container, "f.bin").await.is_empty());
    relay.stop().await;
}

/// A storage writer (SAS, no relay key) who knows
/// a file stages junk under IDs whose checkpoints are the file's true prefix
/// hashes. Unkeyed IDs made the next relay upload resume from them and commit the
/// junk under the genuine SHA-256; IDs must verify under the relay's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_ids_with_the_true_prefix_hashes_are_not_resumed() {
    let (relay, container, dir) = setup("forged").await;
    let file = dir.path("f.bin");
    let size = 3 * BLOCK + 100;
    let sha = write_random(&file, size, 14);
    let content = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
    let junk = bytes::Bytes::from(vec![0x5Au8; BLOCK as usize]);
    // Everything but the key is known or guessable: token, destination, sizes.
    let forger = signer(&IdKey::random(), TOKEN, &container, size, BLOCK);
    let w = writer(&container, "f.bin");
    let mut h = sha2::Sha256::new();
    for index in 0..2u32 {
        let start = (index as u64 * BLOCK) as usize;
        let follows = Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"));
        h.update(&content[start..start + BLOCK as usize]);
        let raw = forger.encode(&BlockId {
            index,
            follows,
            state: BlockState::After(Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"))),
        });
        w.stage_block(&raw, junk.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let f = committed_file(&run_client(&relay.upload(&file, &container), &[], T).await);
    assert_eq!(
        f["bytes_resumed"], 0,
        "forged blocks must not be resumed: {f}"
    );
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

/// The signer a relay with `key` uses for `token`'s upload of `f.bin`.
fn signer(key: &IdKey, token: &str, container: &str, size: u64, block_size: u64) -> IdSigner {
    let tag = TransferTag::derive(
        key,
        &Owner::of_token(token),
        container,
        "f.bin",
        size,
        block_size,
    );
    IdSigner::new(key.clone(), tag)
}

/// A well-formed ID for `index` whose checkpoint is the hash of `index + 1` copies of `data`.
fn id(signer: &IdSigner, index: u32, data: &[u8]) -> [u8; 64] {
    let mut h = sha2::Sha256::new();
    for _ in 0..index {
        h.update(data);
    }
    let follows = Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"));
    h.update(data);
    signer.encode(&BlockId {
        index,
        follows,
        state: BlockState::After(Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"))),
    })
}

fn flip_byte(path: &std::path::Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open: {e}"));
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at))
        .and_then(|_| f.read_exact(&mut b))
        .unwrap_or_else(|e| panic!("read: {e}"));
    b[0] ^= 0xFF;
    f.seek(SeekFrom::Start(at))
        .and_then(|_| f.write_all(&b))
        .unwrap_or_else(|e| panic!("write: {e}"));
}
