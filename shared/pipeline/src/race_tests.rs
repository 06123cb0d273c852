//! Two uploads racing to one name, every interleaving of their storage requests
//! (the hostile review's race, in memory): whatever the order, a committed blob's
//! bytes hash to the SHA-256 recorded with it, that SHA-256 is one of the two
//! files', and an upload that reports success saw its own bytes committed. Both
//! shapes of upload race: files of two blocks (probed, staged, Put Block List)
//! and small files of one Put Blob, not probed first.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use relay_proto::checkpoint::Checkpoint;
use relay_proto::id_key::{IdKey, Owner};
use relay_proto::plan::BlockPlan;
use relay_proto::resume::ResumePoint;
use relay_storage::memory::{MemoryAccount, Turnstile};
use relay_storage::publish::{self, Destination, PublishError, Published};
use relay_storage::staging::Budget;
use relay_storage::store::{BlobStore, Condition};
use sha2::{Digest, Sha256};

use crate::upload::{Probe, Upload};

/// Small blocks (a multiple of 64, as checkpoints need): the rules do not depend
/// on size, and small ones keep thousands of interleavings fast. Files are two
/// blocks: one that can be resumed, and the last, which never is.
const BLOCK: u64 = 4096;
const CONTAINER: &str = "c";
const NAME: &str = "race.bin";

fn sha_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Where the tests' uploads go: `blob` in `CONTAINER`, `size` bytes in blocks
/// of `BLOCK`.
fn destination<'a>(
    meta: &'a BTreeMap<String, String>,
    blob: &'a str,
    key: &'a IdKey,
    owner: &'a Owner,
    size: u64,
    condition: &'a Condition,
) -> (Destination<'a>, BlockPlan) {
    let dest = Destination {
        container: CONTAINER,
        blob,
        key,
        writer: publish::Writer { owner, reads: true },
        size,
        content_type: None,
        metadata: meta,
        condition,
    };
    (
        dest,
        BlockPlan {
            size,
            block_size: BLOCK,
        },
    )
}

/// Uploads `data` as the relay and direct mode do, through the shared pipeline
/// (an Offer without the file's SHA-256: `Probe::UnlessSmall`).
async fn upload(
    store: Arc<dyn BlobStore>,
    key: &IdKey,
    owner: &Owner,
    condition: &Condition,
    data: Bytes,
) -> Result<Published, PublishError> {
    let meta = BTreeMap::new();
    let dest = Destination {
        container: CONTAINER,
        blob: NAME,
        key,
        writer: publish::Writer { owner, reads: true },
        size: data.len() as u64,
        content_type: None,
        metadata: &meta,
        condition,
    };
    let plan = BlockPlan {
        size: data.len() as u64,
        block_size: BLOCK,
    };
    let up = Upload::new(store, dest, plan);
    let ours = sha_hex(&data);
    let point = match up.prepare(Probe::UnlessSmall).await {
        Ok(p) => p,
        Err(refusal) => {
            return up
                .ours_in_the_way(refusal, &ours)
                .await
                .map(|props| Published {
                    props,
                    earlier_commit: true,
                });
        }
    };
    // The sender's check: resume only if its own prefix hashes to the checkpoint.
    let prefix = Sha256::new_with_prefix(&data[..point.offset as usize]);
    let point = if Checkpoint::of(&prefix) == Some(point.checkpoint) {
        point
    } else {
        ResumePoint::fresh()
    };
    // One block in flight: each writer sends one request at a time (`Turnstile`).
    // Staging into the in-memory store cannot fail: only publishing races.
    let mut stager = up
        .stager(point.clone(), Budget::new(1 << 20), 1)
        .expect("stager");
    let mut rest = &data[point.offset as usize..];
    stager.pump(&mut rest).await.expect("staged");
    let staged = stager.finish().await.expect("staged");
    up.commit(&staged, &[("the client", &ours)]).await
}

struct Writer {
    owner: Owner,
    data: Bytes,
}

/// One interleaving: at the k-th turn with several writers ready, `choices[k]`
/// picks among them (0 past the end). Returns how many were ready at each such
/// turn and what each writer got.
async fn run_once(
    key: &IdKey,
    condition: &Condition,
    writers: &[Writer],
    choices: &[usize],
) -> (
    Vec<usize>,
    Vec<Result<Published, PublishError>>,
    MemoryAccount,
    Vec<(usize, &'static str)>,
) {
    let account = MemoryAccount::new();
    let turnstile = Turnstile::new(writers.len());
    let mut tasks = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        let store = Arc::new(account.blob_in_turn(CONTAINER, NAME, turnstile.clone(), i));
        let (key, owner, cond, data, t) = (
            key.clone(),
            w.owner,
            condition.clone(),
            w.data.clone(),
            turnstile.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = upload(store, &key, &owner, &cond, data).await;
            t.finish(i);
            r
        }));
    }
    let mut branching = Vec::new();
    loop {
        let ready = turnstile.ready().await;
        match ready.len() {
            0 => break,
            1 => turnstile.grant(ready[0]),
            n => {
                let pick = choices.get(branching.len()).copied().unwrap_or(0);
                branching.push(n);
                turnstile.grant(ready[pick]);
            }
        }
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.expect("writer task"));
    }
    (branching, results, account, turnstile.log())
}

/// The next interleaving after `choices` (which met `branching`), depth first.
pub(crate) fn next_choices(mut choices: Vec<usize>, branching: &[usize]) -> Option<Vec<usize>> {
    choices.resize(branching.len(), 0);
    while let Some(last) = choices.pop() {
        if last + 1 < branching[choices.len()] {
            choices.push(last + 1);
            return Some(choices);
        }
    }
    None
}

/// What `every_interleaving` ran.
struct Explored {
    runs: usize,
    /// The orders in which writer 0's first two requests went out (a probed
    /// upload asks for properties and block list together: both orders must
    /// have run).
    first_two: std::collections::BTreeSet<Vec<&'static str>>,
}

/// Runs every interleaving of `writers`; checks the invariants after each.
async fn every_interleaving(condition: Condition, writers: &[Writer]) -> Explored {
    let key = IdKey::random();
    let hashes: Vec<String> = writers.iter().map(|w| sha_hex(&w.data)).collect();
    let mut choices = Vec::new();
    let mut runs = 0;
    let mut first_two = std::collections::BTreeSet::new();
    loop {
        let (branching, results, account, log) =
            run_once(&key, &condition, writers, &choices).await;
        runs += 1;
        first_two.insert(
            log.iter()
                .filter(|(w, _)| *w == 0)
                .take(2)
                .map(|(_, op)| *op)
                .collect::<Vec<_>>(),
        );
        let committed = account.committed(CONTAINER, NAME);
        if let Some((bytes, props)) = &committed {
            let recorded = props.sha256.clone().unwrap_or_default();
            assert_eq!(
                sha_hex(bytes),
                recorded,
                "committed bytes differ from their recorded SHA-256 (choices {choices:?})"
            );
            assert!(hashes.contains(&recorded), "a blob neither writer sent");
        }
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(p) => {
                    assert_eq!(
                        p.props.sha256.as_deref(),
                        Some(hashes[i].as_str()),
                        "writer {i} reported another file's commit (choices {choices:?})"
                    );
                    // The etag a success reports is its own commit's: if it is
                    // the blob's now, the blob holds this writer's bytes, and
                    // under the condition nobody could have replaced it since.
                    let now = committed.as_ref().map(|(_, c)| c);
                    if now.is_some_and(|c| c.etag == p.props.etag) {
                        assert_eq!(
                            now.and_then(|c| c.sha256.as_deref()),
                            Some(hashes[i].as_str()),
                            "writer {i}'s etag names another file's commit (choices {choices:?})"
                        );
                    } else {
                        assert!(
                            condition != Condition::IfAbsent,
                            "writer {i} reported etag {} but the blob has {:?} (choices {choices:?})",
                            p.props.etag,
                            now.map(|c| &c.etag)
                        );
                    }
                }
                // A refusal names the blob in the way, whichever shape lost.
                Err(PublishError::Exists(existing)) => assert_eq!(
                    committed.as_ref().map(|(_, p)| &p.etag),
                    existing.as_ref().map(|e| &e.etag),
                    "writer {i} was refused by another blob than the one there (choices {choices:?})"
                ),
                // Without the condition a later writer may replace a blob
                // between a commit and its explanation: a failure, never a lie.
                Err(e) => assert!(
                    condition != Condition::IfAbsent,
                    "writer {i}: {e} (choices {choices:?})"
                ),
            }
        }
        if condition == Condition::IfAbsent {
            assert!(
                results.iter().any(Result::is_ok),
                "no writer succeeded: {:?}",
                results.iter().map(|r| r.as_ref().err()).collect::<Vec<_>>()
            );
            assert!(committed.is_some());
        }
        match next_choices(choices, &branching) {
            Some(next) => choices = next,
            None => return Explored { runs, first_two },
        }
    }
}

/// Two files of the same size: entirely different, or the same first block (so
/// one writer may resume from the other's staged block, which holds its bytes).
fn files(shared_prefix: bool) -> (Bytes, Bytes) {
    files_of(BLOCK as usize + 100, shared_prefix)
}

fn files_of(size: usize, shared_prefix: bool) -> (Bytes, Bytes) {
    let a: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut b: Vec<u8> = (0..size).map(|i| (i % 241) as u8 ^ 0x5a).collect();
    if shared_prefix {
        let n = size.min(BLOCK as usize);
        b[..n].copy_from_slice(&a[..n]);
    }
    (Bytes::from(a), Bytes::from(b))
}

async fn race(condition: Condition, same_owner: bool, shared_prefix: bool) {
    let (a, b) = files(shared_prefix);
    let explored = race_files(condition, same_owner, a, b).await;
    // Two writers of four or more requests each: hundreds of orders, all run.
    let runs = explored.runs;
    assert!(runs >= 250, "only {runs} interleavings");
    let both = ["Get Blob Properties", "Get Block List"];
    for order in [both.to_vec(), both.iter().rev().copied().collect()] {
        assert!(
            explored.first_two.contains(&order),
            "never ran {order:?} first: {:?}",
            explored.first_two
        );
    }
}

/// Every interleaving of two writers of `a` and `b`; returns how many ran.
async fn race_files(condition: Condition, same_owner: bool, a: Bytes, b: Bytes) -> Explored {
    let owner_a = Owner::of_token("token-a");
    let owner_b = if same_owner {
        owner_a
    } else {
        Owner::of_token("token-b")
    };
    let writers = [
        Writer {
            owner: owner_a,
            data: a,
        },
        Writer {
            owner: owner_b,
            data: b,
        },
    ];
    every_interleaving(condition, &writers).await
}

#[tokio::test]
async fn racing_writers_without_overwrite_never_publish_unverified_bytes() {
    for same_owner in [true, false] {
        for shared_prefix in [true, false] {
            race(Condition::IfAbsent, same_owner, shared_prefix).await;
        }
    }
}

#[tokio::test]
async fn racing_writers_with_overwrite_never_publish_unverified_bytes() {
    for same_owner in [true, false] {
        for shared_prefix in [true, false] {
            race(Condition::Always, same_owner, shared_prefix).await;
        }
    }
}

#[tokio::test]
async fn racing_small_files_of_one_put_blob_never_publish_unverified_bytes() {
    // One block each, not probed: a Put Blob, and after a refusal one look at
    // the blob. Different files, and the same file twice (identical uploads).
    let (a, b) = files_of(BLOCK as usize / 2, false);
    for condition in [Condition::IfAbsent, Condition::Always] {
        for same_owner in [true, false] {
            for (x, y) in [(a.clone(), b.clone()), (a.clone(), a.clone())] {
                let runs = race_files(condition.clone(), same_owner, x, y).await.runs;
                // Either Put Blob first (then, if refused, one look at the
                // blob): every order of the two writers' requests.
                assert!(runs >= 2, "only {runs} interleavings");
            }
        }
    }
}

#[tokio::test]
async fn a_small_new_file_costs_one_request_and_a_rerun_is_an_earlier_commit() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let owner = Owner::of_token("t");
    let (a, b) = files_of(1000, false);
    let store = Arc::new(account.blob(CONTAINER, NAME));
    let first = upload(store.clone(), &key, &owner, &Condition::IfAbsent, a.clone())
        .await
        .expect("first upload");
    assert!(!first.earlier_commit);
    // One conditional Put Blob: no existence check, no block list, no read-back.
    assert_eq!(store.requests(), 1);
    let again = upload(store.clone(), &key, &owner, &Condition::IfAbsent, a)
        .await
        .expect("re-run");
    assert!(again.earlier_commit, "the re-run wrote nothing");
    assert_eq!(again.props.etag, first.props.etag);
    // The refused Put Blob and one look at the blob.
    assert_eq!(store.requests(), 3);
    // Other bytes under the name: refused as the probe would have, with the
    // blob in the way (what `--overwrite=if-newer` decides on).
    let e = upload(store.clone(), &key, &owner, &Condition::IfAbsent, b.clone())
        .await
        .expect_err("other bytes");
    assert!(
        matches!(&e, PublishError::Exists(Some(x)) if x.etag == first.props.etag),
        "{e}"
    );
    let stale = Condition::IfMatch("\"0xOLD\"".into());
    let e = upload(store.clone(), &key, &owner, &stale, b)
        .await
        .expect_err("stale etag");
    assert!(matches!(e, PublishError::Changed { .. }), "{e}");
    let (bytes, props) = account.committed(CONTAINER, NAME).expect("committed");
    assert_eq!(props.sha256.as_deref(), Some(sha_hex(&bytes).as_str()));
    assert_eq!(props.etag, first.props.etag);
}

#[tokio::test]
async fn a_rerun_of_a_committed_file_succeeds_without_staging() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let owner = Owner::of_token("t");
    let (a, _) = files(false);
    let store = Arc::new(account.blob(CONTAINER, NAME));
    let first = upload(store.clone(), &key, &owner, &Condition::IfAbsent, a.clone())
        .await
        .expect("first upload");
    let requests = store.requests();
    let again = upload(store.clone(), &key, &owner, &Condition::IfAbsent, a)
        .await
        .expect("re-run");
    assert_eq!(again.props.etag, first.props.etag);
    // Preflight and the block list (asked together), then the "already
    // committed" read: no block staged, no commit.
    assert_eq!(store.requests() - requests, 3);
}

#[tokio::test]
async fn a_mismatched_trailer_commits_nothing() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let (a, _) = files(false);
    let meta = BTreeMap::new();
    let owner = Owner::direct();
    let (dest, plan) = destination(
        &meta,
        NAME,
        &key,
        &owner,
        a.len() as u64,
        &Condition::IfAbsent,
    );
    let up = Upload::new(Arc::new(account.blob(CONTAINER, NAME)), dest, plan);
    let point = up.prepare(Probe::Always).await.expect("prepare");
    let mut stager = up.stager(point, Budget::new(1 << 20), 2).expect("stager");
    stager.pump(&mut &a[..]).await.expect("pump");
    let staged = stager.finish().await.expect("finish");
    let wrong = "00".repeat(32);
    let e = up
        .commit(&staged, &[("the client", &wrong)])
        .await
        .expect_err("mismatch");
    assert!(matches!(e, PublishError::HashMismatch { .. }), "{e}");
    assert!(account.committed(CONTAINER, NAME).is_none());
    // The staged blocks stay for a resume.
    assert_eq!(account.uncommitted_ids(CONTAINER, NAME).len(), 2);
}

/// Stages the first `blocks` blocks of `data` from a fresh start, as an upload
/// that was interrupted after them.
async fn stage_prefix(up: &Upload<'_>, data: &[u8], blocks: usize) {
    let mut stager = up
        .stager(ResumePoint::fresh(), Budget::new(1 << 20), 1)
        .expect("stager");
    let mut prefix = &data[..blocks * BLOCK as usize];
    // The source ends early: pump reports it after staging every full block.
    let _ = stager.pump(&mut prefix).await;
    stager.drain().await;
}

#[tokio::test]
async fn a_resume_never_mixes_blocks_of_two_versions_of_a_file() {
    // One owner uploads version 1 (three of five blocks staged), changes the
    // first block, starts again from zero and is interrupted after one block.
    // A client that then resumes without checking its prefix (a hostile one,
    // claiming version 1's hash) must not get version 2's first block
    // committed under version 1's SHA-256.
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let owner = Owner::of_token("t");
    let size = 4 * BLOCK as usize + 100;
    let (v1, _) = files_of(size, false);
    let mut v2 = v1.to_vec();
    v2[..BLOCK as usize].fill(0xee);
    let meta = BTreeMap::new();
    let (dest, plan) = destination(&meta, NAME, &key, &owner, size as u64, &Condition::IfAbsent);
    let up = Upload::new(Arc::new(account.blob(CONTAINER, NAME)), dest, plan);
    stage_prefix(&up, &v1, 3).await;
    stage_prefix(&up, &v2, 1).await;
    let point = up.prepare(Probe::Always).await.expect("prepare");
    let mut stager = up
        .stager(point.clone(), Budget::new(1 << 20), 1)
        .expect("stager");
    let mut rest = &v1[point.offset as usize..];
    stager.pump(&mut rest).await.expect("pump");
    let staged = stager.finish().await.expect("finish");
    let claimed = sha_hex(&v1);
    let outcome = up.commit(&staged, &[("the client", &claimed)]).await;
    let (bytes, props) = account.committed(CONTAINER, NAME).expect("committed");
    assert_eq!(
        props.sha256.as_deref(),
        Some(sha_hex(&bytes).as_str()),
        "committed bytes differ from their recorded SHA-256 (resumed at {}, {outcome:?})",
        point.offset
    );
    // Version 1's own chain is the longest: it is resumed, and is what is there.
    assert_eq!(point.offset, 3 * BLOCK);
    assert_eq!(bytes, v1);
    assert!(outcome.is_ok(), "{outcome:?}");
}

fn md5_of(data: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(data).into()
}

#[tokio::test]
async fn put_md5_survives_a_resume_and_is_never_guessed() {
    // Interrupted after two of five blocks, then resumed: the blob's
    // Content-MD5 is the MD5 of every byte, although the resumed run never saw
    // the first two blocks. A first attempt without --put-md5 left no markers:
    // then a run with it starts again from zero rather than guess.
    let size = 4 * BLOCK as usize + 100;
    let (data, _) = files_of(size, false);
    for first_with_md5 in [true, false] {
        let account = MemoryAccount::new();
        let key = IdKey::random();
        let owner = Owner::of_token("t");
        let meta = BTreeMap::new();
        let (dest, plan) =
            destination(&meta, NAME, &key, &owner, size as u64, &Condition::IfAbsent);
        let store = Arc::new(account.blob(CONTAINER, NAME));
        let first = Upload::new(store.clone(), dest, plan).with_whole_md5(first_with_md5);
        stage_prefix(&first, &data, 2).await;
        let up = Upload::new(store, dest, plan).with_whole_md5(true);
        let point = up.prepare(Probe::Always).await.expect("prepare");
        let expect_resumed = if first_with_md5 { 2 * BLOCK } else { 0 };
        assert_eq!(point.offset, expect_resumed);
        let mut stager = up
            .stager(point.clone(), Budget::new(1 << 20), 1)
            .expect("stager");
        stager
            .pump(&mut &data[point.offset as usize..])
            .await
            .expect("pump");
        let staged = stager.finish().await.expect("finish");
        up.commit(&staged, &[("the client", &sha_hex(&data))])
            .await
            .expect("commit");
        let (bytes, props) = account.committed(CONTAINER, NAME).expect("committed");
        assert_eq!(bytes, data);
        assert_eq!(props.sha256.as_deref(), Some(sha_hex(&data).as_str()));
        assert_eq!(account.content_md5(CONTAINER, NAME), Some(md5_of(&data)));
    }
}

#[tokio::test]
async fn without_put_md5_a_block_list_gets_no_content_md5() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let (a, _) = files(false);
    let store = Arc::new(account.blob(CONTAINER, NAME));
    upload(store, &key, &Owner::direct(), &Condition::IfAbsent, a)
        .await
        .expect("upload");
    assert_eq!(account.content_md5(CONTAINER, NAME), None);
    // One Put Blob carries its body's MD5 anyway.
    let (small, _) = files_of(100, false);
    let store = Arc::new(account.blob(CONTAINER, "small"));
    let meta = BTreeMap::new();
    let owner = Owner::direct();
    let (dest, plan) = destination(
        &meta,
        "small",
        &key,
        &owner,
        small.len() as u64,
        &Condition::IfAbsent,
    );
    let up = Upload::new(store, dest, plan);
    let point = up.prepare(Probe::UnlessSmall).await.expect("prepare");
    let mut stager = up.stager(point, Budget::new(1 << 20), 1).expect("stager");
    stager.pump(&mut &small[..]).await.expect("pump");
    let staged = stager.finish().await.expect("finish");
    up.commit(&staged, &[]).await.expect("commit");
    assert_eq!(
        account.content_md5(CONTAINER, "small"),
        Some(md5_of(&small))
    );
}
