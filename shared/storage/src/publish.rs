//! The rules around a commit, shared by the relay and the client's direct mode:
//! refuse early when the commit is bound to fail, publish only when the SHA-256 of
//! every staged byte equals the expected one, then read the blob back to confirm.

use std::collections::BTreeMap;

use crate::blob::{BlobError, BlobProperties, BlobWriter};
use crate::staging::{StageError, Staged};
use relay_proto::id_key::IdKey;
use relay_proto::protocol::{Code, Failure, Overwrite};

fn fail(code: Code, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// Maps an Azure failure to a protocol code. Only transient ones (5xx, 408, 429,
/// transport errors) become `Storage`, which clients retry; other 4xx would fail
/// the same way again.
pub fn storage_failure(e: &BlobError) -> Failure {
    let code = if e.is_conflict() {
        Code::Conflict
    } else if e.is_retryable() {
        Code::Storage
    } else {
        Code::StorageRefused
    };
    fail(code, e.message.clone())
}

/// The committed blob, if it already holds exactly these bytes: same size, the
/// SHA-256 in metadata, and a seal over both that only a holder of `dest.key`
/// could make (metadata alone is not enough: any storage writer can set it). Lets
/// a re-run, or a Put Block List retried after its response was lost, succeed
/// instead of tripping over its own commit.
pub async fn already_committed(
    writer: &BlobWriter,
    dest: &Destination<'_>,
    sha256_hex: &str,
) -> Result<Option<BlobProperties>, Failure> {
    let props = writer.properties().await.map_err(|e| storage_failure(&e))?;
    Ok(props.filter(|p| sealed_as(p, dest, sha256_hex)))
}

/// Whether `props` carry our seal for `sha256_hex` at `dest`'s size and name.
pub fn sealed_as(props: &BlobProperties, dest: &Destination<'_>, sha256_hex: &str) -> bool {
    props.size == dest.size
        && props
            .sha256
            .as_deref()
            .is_some_and(|h| h.eq_ignore_ascii_case(sha256_hex))
        && props.seal.as_deref().is_some_and(|seal| {
            dest.key
                .verify_seal(seal, dest.container, dest.blob, dest.size, sha256_hex)
        })
}

pub fn stage_failure(e: StageError) -> Failure {
    match e {
        StageError::Truncated { expected, got } => fail(
            Code::Truncated,
            format!(
                "stream ended after {got} of {expected} bytes; nothing committed (the upload can resume)"
            ),
        ),
        StageError::Source(e) => fail(
            Code::Truncated,
            format!("receiving failed: {e}; nothing committed"),
        ),
        StageError::Storage(e) => storage_failure(&e),
        StageError::BudgetTooSmall(_) => fail(Code::TooLarge, e.to_string()),
        StageError::Task(m) => fail(Code::Internal, m),
        StageError::Stopped => fail(
            Code::Busy,
            "relay shutting down; staged blocks are kept, retry to resume",
        ),
        StageError::Stalled(s) => fail(
            Code::Truncated,
            format!("no bytes received for {s} s; nothing committed (the upload can resume)"),
        ),
        StageError::Busy(s) => fail(
            Code::Busy,
            format!(
                "relay busy: no memory for the next block within {s} s; staged blocks are kept, retry to resume"
            ),
        ),
        StageError::TooSlow { .. } => fail(
            Code::Truncated,
            format!(
                "{e}: the link is slower than the relay's floor; staged blocks are kept (the upload can resume)"
            ),
        ),
    }
}

/// Before any byte moves: is the destination free (or the expected version)?
pub async fn preflight(writer: &BlobWriter, overwrite: &Overwrite) -> Result<(), Failure> {
    let existing = writer.properties().await.map_err(|e| storage_failure(&e))?;
    match (overwrite, &existing) {
        (Overwrite::Never, Some(_)) => Err(fail(
            Code::Exists,
            "a blob with this name exists (add --overwrite)",
        )),
        (Overwrite::IfMatch { etag }, Some(p)) if &p.etag != etag => Err(fail(
            Code::Conflict,
            format!("the blob changed: etag is {} (expected {etag})", p.etag),
        )),
        (Overwrite::IfMatch { .. }, None) => Err(fail(
            Code::Conflict,
            "the blob to overwrite no longer exists",
        )),
        _ => Ok(()),
    }
}

/// What a destination blob must become.
pub struct Destination<'a> {
    pub container: &'a str,
    pub blob: &'a str,
    /// Seals the commit (and checks seals of earlier ones).
    pub key: &'a IdKey,
    pub size: u64,
    pub content_type: Option<&'a str>,
    pub metadata: &'a BTreeMap<String, String>,
    pub overwrite: &'a Overwrite,
}

/// Commits `staged` only if its digest equals every expected hash (the client's
/// Trailer, a manifest's), then confirms size and hash on the committed blob.
pub async fn commit_verified(
    writer: &BlobWriter,
    staged: &Staged,
    expected: &[(&str, &str)],
    dest: &Destination<'_>,
) -> Result<BlobProperties, Failure> {
    let ours = hex::encode(staged.sha256);
    for (who, theirs) in expected {
        if !theirs.eq_ignore_ascii_case(&ours) {
            return Err(fail(
                Code::HashMismatch,
                format!(
                    "SHA-256 mismatch: received bytes hash to {ours}, {who} has {theirs}; nothing committed"
                ),
            ));
        }
    }
    let seal = dest.key.seal(dest.container, dest.blob, dest.size, &ours);
    let committed = match &staged.single {
        Some(single) => {
            writer
                .put_blob(
                    single.data.clone(),
                    &ours,
                    &seal,
                    dest.content_type,
                    dest.metadata,
                    dest.overwrite,
                )
                .await
        }
        None => {
            let ids = staged.ids.iter().map(|id| id.to_vec()).collect();
            writer
                .commit(
                    ids,
                    &ours,
                    &seal,
                    dest.content_type,
                    dest.metadata,
                    dest.overwrite,
                )
                .await
        }
    };
    let etag = match committed {
        Ok(etag) => etag,
        Err(e) => return conflict_or(writer, dest, &ours, e).await,
    };
    if staged.single.is_some() {
        // One request: Put Blob returned the etag, and its MD5 was checked by
        // the service; reading properties back would double the requests of
        // every small file.
        return Ok(BlobProperties {
            etag,
            size: dest.size,
            sha256: Some(ours),
            seal: Some(seal),
        });
    }
    read_back(writer, dest, &ours).await
}

/// After a refused commit: success if the blob already holds exactly our bytes
/// (sealed), else the refusal.
async fn conflict_or(
    writer: &BlobWriter,
    dest: &Destination<'_>,
    ours: &str,
    e: BlobError,
) -> Result<BlobProperties, Failure> {
    let mut f = storage_failure(&e);
    if f.code != Code::Conflict {
        return Err(f);
    }
    // The condition failed. If the blob now holds exactly our bytes, the winner
    // was our own earlier attempt (its response lost, then retried) or an
    // identical upload: the outcome the user asked for, so not an error.
    if let Some(props) = already_committed(writer, dest, ours).await? {
        tracing::info!(etag = %props.etag, "blob already holds these bytes");
        return Ok(props);
    }
    f.message = format!("another upload committed this blob first: {}", f.message);
    Err(f)
}

/// Reads the committed blob's properties and checks size and SHA-256.
async fn read_back(
    writer: &BlobWriter,
    dest: &Destination<'_>,
    ours: &str,
) -> Result<BlobProperties, Failure> {
    let props = writer
        .properties()
        .await
        .map_err(|e| storage_failure(&e))?
        .ok_or_else(|| fail(Code::Storage, "the committed blob is not readable"))?;
    if props.size != dest.size || props.sha256.as_deref() != Some(ours) {
        return Err(fail(
            Code::Storage,
            format!(
                "after commit the blob has {} bytes and sha256 {:?}; expected {} and {ours}",
                props.size, props.sha256, dest.size
            ),
        ));
    }
    Ok(props)
}
