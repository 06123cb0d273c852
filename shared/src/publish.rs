//! The rules around a commit, shared by the relay and the client's direct mode:
//! refuse early when the commit is bound to fail, publish only when the SHA-256 of
//! every staged byte equals the expected one, then read the blob back to confirm.

use std::collections::BTreeMap;

use crate::blob::{BlobError, BlobProperties, BlobWriter};
use crate::protocol::{Code, Failure, Overwrite};
use crate::staging::{StageError, Staged};

fn fail(code: Code, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

pub fn storage_failure(e: &BlobError) -> Failure {
    let code = if e.is_conflict() {
        Code::Conflict
    } else {
        Code::Storage
    };
    fail(code, e.message.clone())
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
    let ids = staged.ids.iter().map(|id| id.to_vec()).collect();
    writer
        .commit(ids, &ours, dest.content_type, dest.metadata, dest.overwrite)
        .await
        .map_err(|e| {
            let mut f = storage_failure(&e);
            if f.code == Code::Conflict {
                f.message = format!("another upload committed this blob first: {}", f.message);
            }
            f
        })?;
    let props = writer
        .properties()
        .await
        .map_err(|e| storage_failure(&e))?
        .ok_or_else(|| fail(Code::Storage, "the committed blob is not readable"))?;
    if props.size != dest.size || props.sha256.as_deref() != Some(ours.as_str()) {
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
