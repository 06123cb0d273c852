//! The rules around a commit, shared by the relay and the client's direct mode:
//! refuse early when the commit is bound to fail, publish only when the SHA-256 of
//! every staged byte equals the expected one; the commit's answer confirms it.
//!
//! Failures are `PublishError`, storage's own words; the relay and direct mode
//! turn them into wire codes (`relay-pipeline`).
//!
//! Writing never implies reading: what a refusal says of the blob in the way
//! (its ETag and Last-Modified, whether it already holds these bytes) depends
//! on that blob, so it is said only to a writer who may read the container or
//! who committed that version (`may_learn_of`); anyone else hears a plain
//! "exists" (or "changed"), the same whatever the blob holds.

use std::collections::BTreeMap;

use relay_proto::id_key::{IdKey, Owner, WRITER_METADATA_KEY};

use crate::error::BlobError;
use crate::staging::Staged;
use crate::store::{BlobProperties, BlobStore, Commit, Condition};

/// What a commit whose outcome is unknown says instead of "nothing committed"
/// (the text only: callers decide by the variant, `PublishError::OutcomeUnknown`).
pub const OUTCOME_UNKNOWN: &str =
    "outcome unknown (an attempt's answer was lost); the next attempt checks the seal";

/// Why a blob was not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A blob has the name and the upload may not replace it; which version,
    /// when the writer may learn of it (`may_learn_of`).
    #[error("a blob with this name exists (add --overwrite)")]
    Exists(Option<Existing>),
    /// `IfMatch`: the blob is at another etag now (`found`, when the writer
    /// may learn of it).
    #[error("{}", changed_text(found.as_deref(), expected))]
    Changed {
        found: Option<String>,
        expected: String,
    },
    /// `IfMatch`: the blob is gone.
    #[error("the blob to overwrite no longer exists")]
    Gone,
    /// What arrived does not hash to what the sender (or a manifest) computed.
    #[error(
        "SHA-256 mismatch: received bytes hash to {ours}, {who} has {theirs}; nothing committed"
    )]
    HashMismatch {
        ours: String,
        who: String,
        theirs: String,
    },
    /// The commit's condition failed and the blob holds other bytes.
    #[error("another upload committed this blob first: {0}")]
    LostRace(BlobError),
    /// Storage acknowledged blocks it did not keep: the commit was refused
    /// (400 InvalidBlockList) and the block list lacks `lost` of the
    /// `staged` blocks, the first at index `first`. The relay holds no block
    /// once it is staged, so the bytes from `first` on must come again: a
    /// retry resumes from there (the blocks before it are still staged).
    #[error(
        "storage lost {lost} of {staged} staged blocks after acknowledging them (Put Block List refused: {refused}); nothing committed; a rerun resumes from block {first}"
    )]
    BlocksLost {
        lost: usize,
        staged: usize,
        first: usize,
        refused: BlobError,
    },
    /// The commit failed, but an attempt of it ended without an answer: it may
    /// have reached storage and published the blob. Nobody knows until the
    /// seal is read; the next attempt does (`already_committed`).
    #[error("{0}; {OUTCOME_UNKNOWN}")]
    OutcomeUnknown(BlobError),
    /// A storage request failed.
    #[error(transparent)]
    Storage(#[from] BlobError),
}

fn changed_text(found: Option<&str>, expected: &str) -> String {
    match found {
        Some(found) => format!("the blob changed: etag is {found} (expected {expected})"),
        None => format!("the blob changed: it is no longer at etag {expected}"),
    }
}

/// The blob that made an upload refuse with `Exists`: what a client needs to
/// decide whether to replace it (`--overwrite=if-newer`) and to replace only
/// that version (`If-Match`), never one another writer committed since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub etag: String,
    /// Seconds since the Unix epoch (the service's Last-Modified).
    pub last_modified: Option<u64>,
}

/// What a destination blob must become.
#[derive(Clone, Copy)]
pub struct Destination<'a> {
    pub container: &'a str,
    pub blob: &'a str,
    /// Seals the commit (and checks seals of earlier ones).
    pub key: &'a IdKey,
    /// Who commits: their mark goes beside the seal, and it decides what they
    /// may learn of a blob in the way.
    pub writer: Writer<'a>,
    pub size: u64,
    pub content_type: Option<&'a str>,
    pub metadata: &'a BTreeMap<String, String>,
    pub condition: &'a Condition,
}

/// Who commits a blob, and what they may learn of one already at its name.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    /// Whose mark the commit carries (`IdKey::writer_mark`): the token's or
    /// principal's owner on the relay, `Owner::direct()` in direct mode.
    pub owner: &'a Owner,
    /// May read the container (a read grant; direct mode's credentials): then
    /// the blob in the way may be told whatever it is.
    pub reads: bool,
}

/// Whether `dest`'s writer may learn what depends on the blob `props`
/// describes (its version, whether it holds some bytes): a writer who may read
/// the container, or the one whose mark this version carries. Never the
/// bytes offered: the answer is the same whatever the writer guessed.
pub fn may_learn_of(props: &BlobProperties, dest: &Destination<'_>) -> bool {
    dest.writer.reads
        || match (&props.writer, &props.sha256) {
            (Some(mark), Some(sha256)) => dest.key.verify_writer_mark(
                mark,
                dest.writer.owner,
                dest.container,
                dest.blob,
                props.size,
                sha256,
            ),
            _ => false,
        }
}

/// The committed blob, if it already holds exactly these bytes: same size, the
/// SHA-256 in metadata, and a seal over both that only a holder of `dest.key`
/// could make (metadata alone is not enough: any storage writer can set it). Lets
/// a re-run, or a Put Block List retried after its response was lost, succeed
/// instead of tripping over its own commit.
pub async fn already_committed(
    store: &dyn BlobStore,
    dest: &Destination<'_>,
    sha256_hex: &str,
) -> Result<Option<BlobProperties>, PublishError> {
    let props = store.properties().await?;
    Ok(props.filter(|p| may_learn_of(p, dest) && sealed_as(p, dest, sha256_hex)))
}

/// Whether `props` carry our seal for `sha256_hex` at `dest`'s size and name.
pub fn sealed_as(props: &BlobProperties, dest: &Destination<'_>, sha256_hex: &str) -> bool {
    props.size == dest.size
        && props
            .sha256
            .as_deref()
            .is_some_and(|h| h.eq_ignore_ascii_case(sha256_hex))
        && props.seal.as_deref().is_some_and(|seal| {
            seal_holds(
                dest.key,
                dest.container,
                dest.blob,
                dest.size,
                sha256_hex,
                seal,
            )
        })
}

/// Whether `seal` is this relay deployment's seal over `sha256_hex` for the
/// blob `container/blob` of `size` bytes: the one check behind both a re-run's
/// "already committed" and a download's vouching for a SHA-256.
pub fn seal_holds(
    key: &IdKey,
    container: &str,
    blob: &str,
    size: u64,
    sha256_hex: &str,
    seal: &str,
) -> bool {
    key.verify_seal(seal, container, blob, size, sha256_hex)
}

/// Before any byte moves: is the destination free (or the expected version)?
pub async fn preflight(store: &dyn BlobStore, dest: &Destination<'_>) -> Result<(), PublishError> {
    let existing = store.properties().await?;
    match refusal(dest, existing.as_ref()) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// Why `dest`'s condition cannot hold with `existing` at the name, if it
/// cannot: the one rule behind an early refusal (`preflight`) and the
/// explanation of a commit storage refused. The blob's version is named only
/// to a writer who may learn of it.
fn refusal(dest: &Destination<'_>, existing: Option<&BlobProperties>) -> Option<PublishError> {
    let told = |p: &BlobProperties| may_learn_of(p, dest);
    match (dest.condition, existing) {
        (Condition::IfAbsent, Some(p)) => Some(PublishError::Exists(told(p).then(|| Existing {
            etag: p.etag.clone(),
            last_modified: p.last_modified,
        }))),
        (Condition::IfMatch(etag), Some(p)) if &p.etag != etag => Some(PublishError::Changed {
            found: told(p).then(|| p.etag.clone()),
            expected: etag.clone(),
        }),
        (Condition::IfMatch(_), None) => Some(PublishError::Gone),
        _ => None,
    }
}

/// A blob that holds the upload's bytes.
#[derive(Debug, Clone)]
pub struct Published {
    pub props: BlobProperties,
    /// Storage refused this upload's one commit request (never retried, so it
    /// wrote nothing) because the blob already held exactly these bytes under
    /// our seal: an earlier run's commit or an identical upload's, not this
    /// one's. A re-run reports such a file as identical, not as committed.
    pub earlier_commit: bool,
}

/// Commits `staged` only if its digest equals every expected hash (the client's
/// Trailer, a manifest's), then confirms size and hash on the committed blob.
pub async fn commit_verified(
    store: &dyn BlobStore,
    staged: &Staged,
    expected: &[(&str, &str)],
    dest: &Destination<'_>,
) -> Result<Published, PublishError> {
    let ours = digest_as_expected(staged, expected)?;
    let seal = dest.key.seal(dest.container, dest.blob, dest.size, &ours);
    let mark = dest.key.writer_mark(
        dest.writer.owner,
        dest.container,
        dest.blob,
        dest.size,
        &ours,
    );
    // The user's metadata and the writer's mark (a name of the user's own is
    // replaced, as `sha256` and the seal are).
    let mut metadata = dest.metadata.clone();
    metadata.insert(WRITER_METADATA_KEY.to_string(), mark.clone());
    let commit = Commit {
        sha256_hex: &ours,
        seal: &seal,
        content_type: dest.content_type,
        content_md5: staged.md5,
        metadata: &metadata,
        condition: dest.condition,
    };
    let retries_before = store.retries();
    let unanswered_before = store.unanswered();
    let committed = match &staged.single {
        Some(single) => store.put_blob(single.data.clone(), &commit).await,
        None => {
            let ids = staged.ids.iter().map(|id| id.to_vec()).collect();
            store.commit_blocks(ids, &commit).await
        }
    };
    let etag = match committed {
        Ok(etag) => etag,
        Err(e) if is_invalid_block_list(&e) && staged.single.is_none() => {
            return Err(lost_blocks(store, staged, e).await);
        }
        Err(e) => {
            let tries = Tries {
                // A retried commit request may have landed before its last
                // answer: then this upload did commit, whatever that answer said.
                retried: store.retries() != retries_before,
                unanswered: store.unanswered() != unanswered_before,
            };
            return refused_commit(store, dest, &ours, e, tries).await;
        }
    };
    // The commit's answer is the confirmation, for Put Blob (one request, its
    // MD5 checked by the service) and Put Block List alike: block IDs bind
    // their bytes ("same ID, same bytes", `block_id`), so a Put Block List that
    // succeeded published exactly the bytes hashed to `ours`, whoever else
    // stages into the blob. Reading the properties back would tell nothing
    // more, for a round trip.
    let props = BlobProperties {
        etag,
        size: dest.size,
        sha256: Some(ours),
        seal: Some(seal),
        writer: Some(mark),
        last_modified: None,
    };
    Ok(Published {
        props,
        earlier_commit: false,
    })
}

/// The staged bytes' SHA-256 (hex), if it equals every expected hash.
fn digest_as_expected(staged: &Staged, expected: &[(&str, &str)]) -> Result<String, PublishError> {
    let ours = hex::encode(staged.sha256);
    for (who, theirs) in expected {
        if !theirs.eq_ignore_ascii_case(&ours) {
            return Err(PublishError::HashMismatch {
                ours,
                who: who.to_string(),
                theirs: theirs.to_string(),
            });
        }
    }
    Ok(ours)
}

/// What the commit's request went through before its refusal.
#[derive(Debug, Clone, Copy)]
struct Tries {
    /// It was sent more than once.
    retried: bool,
    /// An attempt had no answer (it may have been done).
    unanswered: bool,
}

/// A commit storage refused: published after all (the blob holds our bytes),
/// or why not; an attempt with no answer may have published the blob, so
/// then it is said to be unknown, never that nothing was committed.
async fn refused_commit(
    store: &dyn BlobStore,
    dest: &Destination<'_>,
    ours: &str,
    e: BlobError,
    tries: Tries,
) -> Result<Published, PublishError> {
    let props = match conflict_or(store, dest, ours, e).await {
        Err(PublishError::Storage(e)) if tries.unanswered => {
            return Err(PublishError::OutcomeUnknown(e));
        }
        other => other?,
    };
    Ok(Published {
        props,
        earlier_commit: !tries.retried,
    })
}

/// After a refused commit: success if the blob already holds exactly our bytes
/// (sealed), else why it was refused, as `preflight` would have said it (a file
/// published by one Put Blob is not probed first: this is its refusal).
async fn conflict_or(
    store: &dyn BlobStore,
    dest: &Destination<'_>,
    ours: &str,
    e: BlobError,
) -> Result<BlobProperties, PublishError> {
    // Azure may answer a Put Blob with If-Match on a missing blob with 404.
    let refused_if_match = matches!(dest.condition, Condition::IfMatch(_)) && e.status == Some(404);
    if !e.is_conflict() && !refused_if_match {
        return Err(e.into());
    }
    // The condition failed. If the blob now holds exactly our bytes, the winner
    // was our own earlier attempt (its response lost, then retried), an earlier
    // run, or an identical upload: the outcome the user asked for, so not an
    // error; said only to a writer who may learn of that blob.
    let existing = store.properties().await?;
    let ours_already = existing
        .as_ref()
        .filter(|p| may_learn_of(p, dest) && sealed_as(p, dest, ours));
    if let Some(props) = ours_already {
        tracing::info!(etag = %props.etag, "blob already holds these bytes");
        return Ok(props.clone());
    }
    Err(refusal(dest, existing.as_ref()).unwrap_or(PublishError::LostRace(e)))
}

/// Azure's refusal of a block list naming a block it does not hold.
fn is_invalid_block_list(e: &BlobError) -> bool {
    e.status == Some(400) && e.code.as_deref() == Some("InvalidBlockList")
}

/// After a Put Block List refused as naming blocks storage does not hold: which
/// of ours are gone from the uncommitted list (acknowledged, then not kept).
/// None gone (or the list unreadable): the refusal as it came.
async fn lost_blocks(store: &dyn BlobStore, staged: &Staged, refused: BlobError) -> PublishError {
    let held = match store.uncommitted_blocks().await {
        Ok(list) => list,
        Err(_) => return PublishError::Storage(refused),
    };
    let held: std::collections::HashSet<&[u8]> = held.iter().map(|(id, _)| id.as_slice()).collect();
    let mut missing = staged
        .ids
        .iter()
        .enumerate()
        .filter(|(_, id)| !held.contains(&id[..]))
        .map(|(i, _)| i);
    let Some(first) = missing.next() else {
        return PublishError::Storage(refused);
    };
    tracing::warn!(first, "storage lost a staged block it had acknowledged");
    PublishError::BlocksLost {
        lost: 1 + missing.count(),
        staged: staged.ids.len(),
        first,
        refused,
    }
}
