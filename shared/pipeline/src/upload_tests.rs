//! The shared pipeline's resume rules through the in-memory store: an upload cut
//! short resumes from its own staged blocks, and only from those.

use std::collections::BTreeMap;
use std::sync::Arc;

use relay_proto::checkpoint::Checkpoint;
use relay_proto::id_key::{IdKey, Owner};
use relay_proto::plan::BlockPlan;
use relay_storage::memory::MemoryAccount;
use relay_storage::publish::{Destination, Writer};
use relay_storage::staging::{Budget, StageError};
use relay_storage::store::{BlobStore, Condition};
use sha2::{Digest, Sha256};

use crate::upload::{Probe, Upload};

const BLOCK: u64 = 4096;

fn data() -> Vec<u8> {
    (0..3 * BLOCK as usize + 10)
        .map(|i| (i % 253) as u8)
        .collect()
}

/// An upload of `data` by `owner` into `account`'s blob "c/f".
fn upload<'a>(
    account: &MemoryAccount,
    key: &'a IdKey,
    meta: &'a BTreeMap<String, String>,
    owner: &'a Owner,
    size: u64,
) -> (Upload<'a>, Arc<dyn BlobStore>) {
    let store: Arc<dyn BlobStore> = Arc::new(account.blob("c", "f"));
    let dest = Destination {
        container: "c",
        blob: "f",
        key,
        writer: Writer { owner, reads: true },
        size,
        content_type: None,
        metadata: meta,
        condition: &Condition::IfAbsent,
    };
    let plan = BlockPlan {
        size,
        block_size: BLOCK,
    };
    (Upload::new(store.clone(), dest, plan), store)
}

/// Stages the first `blocks` blocks, then the source ends: the run fails and
/// leaves those blocks staged.
async fn interrupted(up: &Upload<'_>, data: &[u8], blocks: usize) {
    let point = up.prepare(Probe::Always).await.expect("prepare");
    let mut stager = up.stager(point, Budget::new(1 << 20), 1).expect("stager");
    let mut cut = &data[..blocks * BLOCK as usize];
    let e = stager
        .pump(&mut cut)
        .await
        .expect_err("the source ended early");
    assert!(matches!(e, StageError::Truncated { .. }), "{e}");
    stager.drain().await;
}

#[tokio::test]
async fn an_interrupted_upload_resumes_from_its_own_blocks() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let meta = BTreeMap::new();
    let data = data();
    let owner = Owner::of_token("t");
    let (first, _) = upload(&account, &key, &meta, &owner, data.len() as u64);
    interrupted(&first, &data, 2).await;
    assert_eq!(account.uncommitted_ids("c", "f").len(), 2);

    let (again, store) = upload(&account, &key, &meta, &owner, data.len() as u64);
    let point = again.prepare(Probe::Always).await.expect("prepare");
    assert_eq!(point.offset, 2 * BLOCK);
    let prefix = Sha256::new_with_prefix(&data[..point.offset as usize]);
    assert_eq!(Checkpoint::of(&prefix), Some(point.checkpoint));
    let before = store.requests();
    let mut stager = again
        .stager(point, Budget::new(1 << 20), 1)
        .expect("stager");
    let mut rest = &data[2 * BLOCK as usize..];
    stager.pump(&mut rest).await.expect("pump");
    let staged = stager.finish().await.expect("finish");
    assert_eq!(staged.bytes_resumed, 2 * BLOCK);
    let sha = hex::encode(Sha256::digest(&data));
    again
        .commit(&staged, &[("the client", &sha)])
        .await
        .expect("commit");
    // Two new blocks staged (the third and the last), one commit: its answer
    // is the confirmation, nothing is read back.
    assert_eq!(store.requests() - before, 3);
    let (bytes, props) = account.committed("c", "f").expect("committed");
    assert_eq!(&bytes[..], &data[..]);
    assert_eq!(props.sha256.as_deref(), Some(sha.as_str()));
}

#[tokio::test]
async fn blocks_of_another_owner_key_or_size_are_not_resumed() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let other_key = IdKey::random();
    let meta = BTreeMap::new();
    let data = data();
    let size = data.len() as u64;
    let owner = Owner::of_token("t");
    let (first, _) = upload(&account, &key, &meta, &owner, size);
    interrupted(&first, &data, 2).await;
    for (name, k, o, s) in [
        ("another token", &key, Owner::of_token("u"), size),
        ("another key", &other_key, owner, size),
        ("another size", &key, owner, size + 1),
        ("direct mode", &key, Owner::direct(), size),
    ] {
        let (up, _) = upload(&account, k, &meta, &o, s);
        let point = up.prepare(Probe::Always).await.expect("prepare");
        assert_eq!(point.offset, 0, "{name}");
    }
}

/// The relay's bytes-received metric moves as bytes arrive, not when the
/// transfer ends: with half the file sent and the stream still open, the
/// counter already holds every byte read.
#[tokio::test]
async fn received_bytes_are_counted_as_they_arrive() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::AsyncWriteExt;

    let account = MemoryAccount::new();
    let key = IdKey::random();
    let meta = BTreeMap::new();
    let data = data();
    let owner = Owner::of_token("t");
    let (up, _) = upload(&account, &key, &meta, &owner, data.len() as u64);
    let point = up.prepare(Probe::Always).await.expect("prepare");
    let received = Arc::new(AtomicU64::new(0));
    let mut stager = up
        .stager(point, Budget::new(1 << 20), 1)
        .expect("stager")
        .with_received_bytes(received.clone());
    let (mut client, mut relay_side) = tokio::io::duplex(64 << 10);
    let half = data.len() / 2;
    client.write_all(&data[..half]).await.expect("write");
    // The stream stays open: the transfer is in the middle of the file.
    let pumping = async {
        let r = stager.pump(&mut relay_side).await;
        (r, stager)
    };
    let watch = async {
        while received.load(Ordering::Relaxed) < half as u64 {
            tokio::task::yield_now().await;
        }
        assert_eq!(received.load(Ordering::Relaxed), half as u64);
        client.write_all(&data[half..]).await.expect("write");
        drop(client);
    };
    let ((pumped, stager), ()) = tokio::join!(pumping, watch);
    pumped.expect("pump");
    stager.drain().await;
    assert_eq!(received.load(Ordering::Relaxed), data.len() as u64);
}

/// Storage acknowledges a Put Block and does not keep it: the commit is
/// refused (400 InvalidBlockList). The upload says which block is gone, the
/// failure is retryable and says nothing was committed, and the retry resumes
/// from the last block storage still holds and commits the file.
#[tokio::test]
async fn a_block_storage_lost_is_sent_again_by_the_retry() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let meta = BTreeMap::new();
    let data = data();
    let owner = Owner::of_token("t");
    let sha = hex::encode(Sha256::digest(&data));
    // The second Put Block (block 1) is answered 201 and dropped.
    account.lose_put_block("c", "f", 1);
    let (first, _) = upload(&account, &key, &meta, &owner, data.len() as u64);
    let point = first.prepare(Probe::Always).await.expect("prepare");
    let mut stager = first
        .stager(point, Budget::new(1 << 20), 1)
        .expect("stager");
    stager.pump(&mut &data[..]).await.expect("pump");
    let staged = stager.finish().await.expect("every Put Block answered");
    let e = first
        .commit(&staged, &[("the client", &sha)])
        .await
        .expect_err("storage lost a block");
    assert!(
        matches!(
            e,
            relay_storage::publish::PublishError::BlocksLost {
                lost: 1,
                staged: 4,
                first: 1,
                ..
            }
        ),
        "{e:?}"
    );
    let f = crate::failure::publish_failure(e);
    assert!(f.code.is_retryable(), "{f:?}");
    assert!(
        f.message.contains("InvalidBlockList")
            && f.message
                .contains("nothing committed; a rerun resumes from block 1"),
        "{}",
        f.message
    );
    assert!(account.committed("c", "f").is_none());

    // The retry: resumes after block 0, sends the rest again, commits.
    let (again, _) = upload(&account, &key, &meta, &owner, data.len() as u64);
    let point = again.prepare(Probe::Always).await.expect("prepare");
    assert_eq!(point.offset, BLOCK, "resumed from the last block kept");
    let mut stager = again
        .stager(point, Budget::new(1 << 20), 1)
        .expect("stager");
    stager
        .pump(&mut &data[BLOCK as usize..])
        .await
        .expect("pump");
    let staged = stager.finish().await.expect("finish");
    again
        .commit(&staged, &[("the client", &sha)])
        .await
        .expect("commit");
    let (bytes, props) = account.committed("c", "f").expect("committed");
    assert_eq!(hex::encode(Sha256::digest(&bytes)), sha);
    assert_eq!(props.sha256.as_deref(), Some(sha.as_str()));
}

/// A resume whose MD5 state is not at the resume's offset is refused as that,
/// a typed reason, before any byte is read.
#[tokio::test]
async fn an_md5_state_at_another_offset_is_its_own_error() {
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let meta = BTreeMap::new();
    let data = data();
    let owner = Owner::of_token("t");
    let (up, _) = upload(&account, &key, &meta, &owner, data.len() as u64);
    let up = up.with_whole_md5(true);
    let at = 2 * BLOCK;
    let prefix = Sha256::new_with_prefix(&data[..at as usize]);
    let point = relay_proto::resume::ResumePoint {
        blocks: 2,
        offset: at,
        checkpoint: Checkpoint::of(&prefix).expect("a block boundary"),
        ids: Vec::new(),
        md5: Some(relay_proto::md5_state::Md5State::start()),
    };
    match up.stager(point, Budget::new(1 << 20), 1) {
        Err(StageError::Md5StateOffset { state: 0, resume }) => assert_eq!(resume, at),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a stager for a mismatched MD5 state"),
    }
}
