//! One listed blob's version removed, through the relay (a `Delete` stream)
//! or, in direct mode, straight from storage: the primitive a sync's deletes
//! call, with no decision of its own about what to delete.
//!
//! Only the version listed is removed: the relay (or storage, in direct mode)
//! deletes with `If-Match` on the listed ETag, so a blob written after the
//! listing is kept and reported `Changed`. A blob already gone is
//! `AlreadyGone`, which a sync takes as done. A refusal (no delete grant, a
//! name or ETag the relay will not take) is `Refused`, with the relay's code:
//! trying again would not help. Anything else (the connection lost, storage
//! failing past the relay's retries) is tried again by the one retry driver
//! (`relay::retry`), as a listing is, and is an `Err` once it gives up.

use quinn::Connection;
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{Delete, Listed, Message, Removal};
use relay_storage::account::Storage;
use relay_storage::delete::{DeleteError, Deletion};
use relay_transport::frames::{read_frame, write_frame};

use crate::relay::retry::{Tries, Work};
use crate::sign_in::Bearer;
use crate::transfer::mode::Mode;
use crate::transfer::send_failure::sign_in_failed;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// What became of one listed blob's delete.
#[derive(Debug)]
pub enum DeleteOutcome {
    /// The listed version was deleted.
    Deleted,
    /// No blob of the name: gone already (a sync's delete is done).
    AlreadyGone,
    /// The blob is no longer the listed version: it was kept.
    Changed,
    /// The relay refused the delete (the token has no delete grant, or the
    /// Delete's name or ETag): its code and message. Not tried again.
    Refused(FileError),
}

/// Deletes `blob` (as listed: its name and ETag) from `container` through
/// `mode`'s relay (with `token`) or straight from its storage (direct mode),
/// with up to `attempts` tries for failures another try may get past.
pub async fn delete_listed(
    mode: &Mode,
    token: &Bearer,
    container: &str,
    blob: &Listed,
    attempts: u32,
) -> Result<DeleteOutcome, FileError> {
    let (link, storage) = match mode {
        Mode::Relay(links) => (Some(links.first()), None),
        Mode::Direct(d) => (None, Some(&d.storage)),
    };
    let what = format!("delete of {}", relay_proto::logsafe::safe(&blob.name));
    let mut tries = Tries::new(link, attempts, what);
    let mut work = OneDelete {
        token,
        storage,
        container,
        blob,
    };
    match tries.drive(&mut work).await {
        Ok(done) => Ok(done),
        Err(e) if refusal(e.code) => Ok(DeleteOutcome::Refused(e)),
        Err(e) => Err(e),
    }
}

/// The relay's codes that refuse a Delete for what it is or who asks.
fn refusal(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::InvalidName
            | ErrorCode::InvalidOffer
            | ErrorCode::TooLarge
            | ErrorCode::UnsupportedVersion
    )
}

/// One delete as `Tries::drive` tries it.
struct OneDelete<'a> {
    token: &'a Bearer,
    storage: Option<&'a Storage>,
    container: &'a str,
    blob: &'a Listed,
}

impl Work for OneDelete<'_> {
    type Done = DeleteOutcome;

    async fn attempt(&mut self, conn: Option<&Connection>) -> Result<DeleteOutcome, FileError> {
        match (conn, self.storage) {
            (Some(conn), _) => through_relay(conn, self.token, self.container, self.blob).await,
            (None, Some(storage)) => direct(storage, self.container, self.blob).await,
            (None, None) => Err(FileError::new(
                ErrorCode::Internal,
                "no way to delete",
                false,
            )),
        }
    }
}

/// One `Delete` stream: the frame, then the relay's answer.
async fn through_relay(
    conn: &Connection,
    token: &Bearer,
    container: &str,
    blob: &Listed,
) -> Result<DeleteOutcome, FileError> {
    let lost = |e: &dyn std::fmt::Display| {
        FileError::new(ErrorCode::Connection, format!("delete: {e}"), true)
    };
    let token = token.current().await.map_err(sign_in_failed)?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| lost(&e))?;
    let msg = Message::Delete(Delete {
        version: PROTOCOL_VERSION,
        token,
        container: container.to_string(),
        name: blob.name.clone(),
        etag: blob.etag.clone(),
    });
    write_frame(&mut send, &msg).await.map_err(|e| lost(&e))?;
    let _ = send.finish();
    match read_frame(&mut recv).await.map_err(|e| lost(&e))? {
        Message::Deleted(d) => Ok(removal(d.outcome)),
        Message::Reject(f) | Message::Error(f) => Err(FileError::from_relay(f.code, f.message)),
        other => Err(FileError::new(
            ErrorCode::Protocol,
            format!("delete: expected Deleted, got {}", other.name()),
            false,
        )),
    }
}

/// Direct mode: storage's delete, `If-Match` the listed ETag.
async fn direct(
    storage: &Storage,
    container: &str,
    blob: &Listed,
) -> Result<DeleteOutcome, FileError> {
    let storage_error =
        |e: &dyn std::fmt::Display, retry| FileError::new(ErrorCode::Storage, e.to_string(), retry);
    let deleter = storage
        .deleter(container, &blob.name)
        .map_err(|e| storage_error(&e, false))?;
    match deleter.delete_if_match(&blob.etag).await {
        Ok(Deletion::Deleted) => Ok(DeleteOutcome::Deleted),
        Ok(Deletion::NotFound) => Ok(DeleteOutcome::AlreadyGone),
        Ok(Deletion::Changed) => Ok(DeleteOutcome::Changed),
        Err(DeleteError::NoEtag) => Err(FileError::new(
            ErrorCode::InvalidOffer,
            "refused: the listing gave no ETag for this blob",
            false,
        )),
        Err(DeleteError::Storage(e)) => {
            let code = if e.is_retryable() {
                ErrorCode::Storage
            } else {
                ErrorCode::StorageRefused
            };
            Err(FileError::new(code, e.to_string(), e.is_retryable()))
        }
    }
}

fn removal(r: Removal) -> DeleteOutcome {
    match r {
        Removal::Deleted => DeleteOutcome::Deleted,
        Removal::AlreadyGone => DeleteOutcome::AlreadyGone,
        Removal::Changed => DeleteOutcome::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_outcomes_and_failures_are_errors() {
        for code in [
            ErrorCode::Unauthorized,
            ErrorCode::Forbidden,
            ErrorCode::InvalidName,
            ErrorCode::InvalidOffer,
            ErrorCode::TooLarge,
        ] {
            assert!(refusal(code), "{code:?}");
        }
        for code in [
            ErrorCode::Storage,
            ErrorCode::StorageRefused,
            ErrorCode::Connection,
            ErrorCode::Busy,
            ErrorCode::Internal,
        ] {
            assert!(!refusal(code), "{code:?}");
        }
        assert!(matches!(removal(Removal::Changed), DeleteOutcome::Changed));
        assert!(matches!(
            removal(Removal::AlreadyGone),
            DeleteOutcome::AlreadyGone
        ));
    }
}
