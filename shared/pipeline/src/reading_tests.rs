//! Writing never implies reading. Through the in-memory store, every way an
//! Offer can meet a blob in the way (with the file's SHA-256 or without, a
//! one-block file's Put Blob or a block list, never overwrite or replace one
//! version) and every kind of writer: one who may read the container and the
//! writer of that version learn whether it holds their bytes; anyone else
//! hears the same plain refusal whatever they guessed, and the blob is left
//! as it was.

use std::collections::BTreeMap;
use std::sync::Arc;

use relay_proto::id_key::{IdKey, Owner};
use relay_proto::plan::BlockPlan;
use relay_storage::memory::MemoryAccount;
use relay_storage::publish::{Destination, Writer};
use relay_storage::staging::Budget;
use relay_storage::store::{BlobStore, Commit, Condition};
use sha2::{Digest, Sha256};

use crate::upload::{Probe, Upload};

const BLOCK: u64 = 4096;

/// Who offers: whose token, and whether it may read the container.
#[derive(Clone, Copy, Debug)]
struct Caller {
    name: &'static str,
    reads: bool,
}

impl Caller {
    fn owner(&self) -> Owner {
        Owner::of_token(self.name)
    }
}

const WRITER: Caller = Caller {
    name: "writer-token",
    reads: false,
};
const READER: Caller = Caller {
    name: "reader-token",
    reads: true,
};
const OTHER: Caller = Caller {
    name: "other-token",
    reads: false,
};

/// What the relay answers an Offer, as comparable text: `identical` (the
/// blob holds these bytes), `committed`, or the refusal in full.
type Answer = String;

/// One Offer of `data` by `caller` into "c/b", driven as the relay drives it:
/// with the SHA-256 the probe and one look at a refusal; without, the bytes
/// staged and the commit (whose refusal is explained by one look).
async fn offer(
    account: &MemoryAccount,
    key: &IdKey,
    caller: Caller,
    data: &[u8],
    with_sha: bool,
    condition: &Condition,
) -> Answer {
    let owner = caller.owner();
    let meta = BTreeMap::new();
    let dest = Destination {
        container: "c",
        blob: "b",
        key,
        writer: Writer {
            owner: &owner,
            reads: caller.reads,
        },
        size: data.len() as u64,
        content_type: None,
        metadata: &meta,
        condition,
    };
    let plan = BlockPlan {
        size: data.len() as u64,
        block_size: BLOCK,
    };
    let store: Arc<dyn BlobStore> = Arc::new(account.blob("c", "b"));
    let up = Upload::new(store, dest, plan);
    let sha = hex::encode(Sha256::digest(data));
    let probe = if with_sha {
        Probe::Always
    } else {
        Probe::UnlessSmall
    };
    let point = match up.prepare(probe).await {
        Ok(point) => point,
        Err(e) if with_sha => {
            return match up.ours_in_the_way(e, &sha).await {
                Ok(_) => "identical".into(),
                Err(e) => format!("{e:?}: {e}"),
            };
        }
        Err(e) => return format!("{e:?}: {e}"),
    };
    let mut stager = up.stager(point, Budget::new(1 << 20), 1).expect("stager");
    stager.pump(&mut &data[..]).await.expect("pump");
    let staged = stager.finish().await.expect("finish");
    match up.commit(&staged, &[("the client", &sha)]).await {
        Ok(p) if p.earlier_commit => "identical".into(),
        Ok(_) => "committed".into(),
        Err(e) => format!("{e:?}: {e}"),
    }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Whether an answer says anything of the blob in the way.
fn names_the_blob(answer: &str) -> bool {
    answer == "identical" || answer.contains("Some(")
}

#[tokio::test]
async fn only_a_reader_or_the_versions_writer_learns_what_the_blob_holds() {
    // A one-block file (Put Blob, not probed) and a block list.
    for len in [100, 3 * BLOCK as usize + 10] {
        let held = bytes(len, 1);
        let guess = bytes(len, 2);
        let account = MemoryAccount::new();
        let key = IdKey::random();
        let first = offer(&account, &key, WRITER, &held, false, &Condition::IfAbsent).await;
        assert_eq!(first, "committed");
        let (_, before) = account.committed("c", "b").expect("committed");
        let stale = Condition::IfMatch("\"0xOLD\"".into());
        for condition in [Condition::IfAbsent, stale] {
            for with_sha in [true, false] {
                let case = format!("{len} bytes, {condition:?}, with SHA-256: {with_sha}");
                for caller in [WRITER, READER, OTHER] {
                    let same = offer(&account, &key, caller, &held, with_sha, &condition).await;
                    let other = offer(&account, &key, caller, &guess, with_sha, &condition).await;
                    let (same_named, other_named) = (names_the_blob(&same), names_the_blob(&other));
                    if caller.reads || caller.name == WRITER.name {
                        // Told: its own bytes are found (with the SHA-256, or
                        // a one-block file's refused Put Blob), other bytes
                        // are refused with the version in the way.
                        if with_sha || len == 100 {
                            assert_eq!(same, "identical", "{case}, {caller:?}");
                        }
                        assert!(other_named, "{case}, {caller:?}: {other}");
                        assert!(same_named, "{case}, {caller:?}: {same}");
                    } else {
                        // The same words whatever the guess, and no version.
                        assert_eq!(same, other, "{case}, {caller:?}");
                        assert!(!same_named, "{case}, {caller:?}: {same}");
                    }
                }
            }
        }
        // Nothing replaced the blob.
        let (data, after) = account.committed("c", "b").expect("committed");
        assert_eq!((data.as_ref(), &after.etag), (&held[..], &before.etag));
    }
}

#[tokio::test]
async fn a_blob_without_the_writers_mark_is_told_only_to_readers() {
    // Sealed by the relay's key, but no writer named: a commit made before
    // writers were marked, or a storage co-writer's copy of the metadata.
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let held = bytes(3 * BLOCK as usize + 10, 1);
    let sha = hex::encode(Sha256::digest(&held));
    let seal = key.seal("c", "b", held.len() as u64, &sha);
    let commit = Commit {
        sha256_hex: &sha,
        seal: &seal,
        content_type: None,
        content_md5: None,
        metadata: &BTreeMap::new(),
        condition: &Condition::IfAbsent,
    };
    account
        .blob("c", "b")
        .put_blob(held.clone().into(), &commit)
        .await
        .expect("put");
    let told = offer(&account, &key, READER, &held, true, &Condition::IfAbsent).await;
    assert_eq!(told, "identical");
    for caller in [WRITER, OTHER] {
        let answer = offer(&account, &key, caller, &held, true, &Condition::IfAbsent).await;
        assert!(answer.starts_with("Exists(None)"), "{caller:?}: {answer}");
    }
}

#[tokio::test]
async fn another_writers_commit_makes_the_first_writer_a_stranger() {
    // The writer's re-run is told only while the version is its own: once
    // another token replaced the blob, even with the same bytes, it is not.
    let account = MemoryAccount::new();
    let key = IdKey::random();
    let held = bytes(100, 1);
    let first = offer(&account, &key, WRITER, &held, false, &Condition::IfAbsent).await;
    assert_eq!(first, "committed");
    let again = offer(&account, &key, OTHER, &held, false, &Condition::Always).await;
    assert_eq!(again, "committed");
    let rerun = offer(&account, &key, WRITER, &held, true, &Condition::IfAbsent).await;
    assert!(rerun.starts_with("Exists(None)"), "{rerun}");
    let theirs = offer(&account, &key, OTHER, &held, true, &Condition::IfAbsent).await;
    assert_eq!(theirs, "identical");
}
