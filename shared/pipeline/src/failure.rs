//! Storage's failures in the protocol's words: the code a Reject or Error frame
//! carries (and direct mode's report shows), and a message for the user; and
//! the protocol's words in storage's (an Offer's overwrite as a commit's
//! condition, a Source's check as what each range read checks), so storage's
//! API carries no wire message.

use relay_proto::protocol::{Check, Code, ExistingBlob, Failure, Overwrite};
use relay_storage::blob::BlobError;
use relay_storage::publish::{OUTCOME_UNKNOWN, PublishError};
use relay_storage::read::RangeCheck;
use relay_storage::staging::StageError;
use relay_storage::store::Condition;

/// The storage condition an Offer's overwrite policy asks for.
pub fn condition(overwrite: &Overwrite) -> Condition {
    match overwrite {
        Overwrite::Never => Condition::IfAbsent,
        Overwrite::IfMatch { etag } => Condition::IfMatch(etag.clone()),
        Overwrite::Always => Condition::Always,
    }
}

/// What storage checks of each range read for a blob a Source names with
/// `check`: ranges are checked only for a blob nothing checks whole (a seal's
/// SHA-256 and a Content-MD5 are checked by the client at the end).
pub fn range_check(check: Check) -> RangeCheck {
    match check {
        Check::Sealed | Check::ContentMd5 => RangeCheck::LengthOnly,
        Check::Ranges => RangeCheck::StorageMd5,
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
    Failure::new(code, e.message.clone())
}

/// What a failed transfer left in storage, for the relay's log line: nothing
/// committed, unless the failure is flagged as a commit whose outcome is
/// unknown (the flag, never the message: that may quote a peer's words).
pub fn outcome(f: &Failure) -> &'static str {
    if f.outcome_unknown {
        OUTCOME_UNKNOWN
    } else {
        "nothing committed"
    }
}

/// A publishing failure as the peer hears it.
pub fn publish_failure(e: PublishError) -> Failure {
    let code = match &e {
        PublishError::Exists(existing) => {
            let mut f = Failure::new(Code::Exists, e.to_string());
            f.existing = existing.as_ref().map(|existing| ExistingBlob {
                etag: existing.etag.clone(),
                last_modified: existing.last_modified,
            });
            return f;
        }
        PublishError::Changed { .. } | PublishError::Gone | PublishError::LostRace(_) => {
            Code::Conflict
        }
        PublishError::HashMismatch { .. } => Code::HashMismatch,
        // Retryable: the client's next attempt resumes from the first lost block.
        PublishError::BlocksLost { .. } => Code::Storage,
        // Retryable: the next attempt finds the blob sealed if it landed.
        PublishError::OutcomeUnknown(_) => {
            let mut f = Failure::new(Code::Storage, e.to_string());
            f.outcome_unknown = true;
            return f;
        }
        PublishError::Storage(e) => return storage_failure(e),
    };
    Failure::new(code, e.to_string())
}

/// A staging failure as the peer hears it: whether it may resume, and why.
pub fn stage_failure(e: StageError) -> Failure {
    match e {
        StageError::Truncated { expected, got } => Failure::new(
            Code::Truncated,
            format!(
                "stream ended after {got} of {expected} bytes; nothing committed (the upload can resume)"
            ),
        ),
        StageError::Source(e) => Failure::new(
            Code::Truncated,
            format!("receiving failed: {e}; nothing committed"),
        ),
        StageError::Storage(e) => storage_failure(&e),
        StageError::BudgetTooSmall(_) => Failure::new(Code::TooLarge, e.to_string()),
        StageError::Task(_)
        | StageError::UnusableCheckpoint
        | StageError::UnusableMd5State
        | StageError::Md5StateOffset { .. }
        | StageError::BlockIndex(_) => Failure::new(Code::Internal, e.to_string()),
        StageError::Stopped => Failure::new(
            Code::Busy,
            "relay shutting down; staged blocks are kept, retry to resume",
        ),
        StageError::Stalled(s) => Failure::new(
            Code::Truncated,
            format!("no bytes received for {s} s; nothing committed (the upload can resume)"),
        ),
        StageError::Busy(s) => Failure::new(
            Code::Busy,
            format!(
                "relay busy: no memory for the next block within {s} s; staged blocks are kept, retry to resume"
            ),
        ),
        StageError::TooSlow { .. } => Failure::new(
            Code::Truncated,
            format!(
                "{e}: the link is slower than the relay's floor; staged blocks are kept (the upload can resume)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_storage::publish::Existing;

    fn blob_error(status: Option<u16>) -> BlobError {
        BlobError {
            status,
            code: None,
            message: "Azure Put Block failed".into(),
        }
    }

    #[test]
    fn codes_match_what_clients_retry() {
        assert_eq!(storage_failure(&blob_error(Some(409))).code, Code::Conflict);
        assert_eq!(storage_failure(&blob_error(Some(412))).code, Code::Conflict);
        assert_eq!(storage_failure(&blob_error(Some(503))).code, Code::Storage);
        assert_eq!(storage_failure(&blob_error(None)).code, Code::Storage);
        assert_eq!(
            storage_failure(&blob_error(Some(403))).code,
            Code::StorageRefused
        );
        let lost = publish_failure(PublishError::LostRace(blob_error(Some(409))));
        assert_eq!(lost.code, Code::Conflict);
        assert!(
            lost.message
                .starts_with("another upload committed this blob first")
        );
        let exists = publish_failure(PublishError::Exists(Some(Existing {
            etag: "\"0x1\"".into(),
            last_modified: Some(1_700_000_000),
        })));
        assert_eq!(exists.code, Code::Exists);
        assert_eq!(
            exists.message,
            "a blob with this name exists (add --overwrite)"
        );
        // The client needs the blob in the way to decide `if-newer` and to replace
        // only that version.
        assert_eq!(
            exists.existing,
            Some(ExistingBlob {
                etag: "\"0x1\"".into(),
                last_modified: Some(1_700_000_000)
            })
        );
        // A writer who may not learn of the blob hears the same words, and no version.
        let plain = publish_failure(PublishError::Exists(None));
        assert_eq!((plain.code, plain.existing), (Code::Exists, None));
        assert_eq!(plain.message, exists.message);
    }

    /// A commit an attempt of which went unanswered may have landed: retried,
    /// flagged, and never logged or told as "nothing committed".
    #[test]
    fn a_commit_that_may_have_landed_is_not_called_nothing_committed() {
        let unknown = publish_failure(PublishError::OutcomeUnknown(blob_error(Some(503))));
        assert_eq!(unknown.code, Code::Storage);
        assert!(unknown.outcome_unknown);
        assert_eq!(outcome(&unknown), OUTCOME_UNKNOWN);
        assert!(!unknown.message.contains("nothing committed"), "{unknown}");
        assert_eq!(
            outcome(&storage_failure(&blob_error(Some(503)))),
            "nothing committed"
        );
    }

    /// The log line follows the flag, not the text: a failure whose message
    /// quotes the sentence (a peer's blob name, Azure's words) did not leave
    /// an unknown commit behind.
    #[test]
    fn the_outcome_is_the_flag_not_the_message() {
        let quoted = Failure::new(
            Code::StorageRefused,
            format!("Azure Put Block failed: 403 ({OUTCOME_UNKNOWN})"),
        );
        assert_eq!(outcome(&quoted), "nothing committed");
        for e in [
            PublishError::Storage(blob_error(None)),
            PublishError::LostRace(blob_error(Some(409))),
        ] {
            assert!(!publish_failure(e).outcome_unknown);
        }
    }
}
