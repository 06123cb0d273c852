//! One blob's version removed for a client on one QUIC stream:
//! Delete → Deleted | Error (or Reject at once).
//!
//! Admission is every stream's (`admit`), with a grant of its own: deleting
//! is implied by neither writing nor reading. The Delete's own fields are the
//! caller's input and are checked before they reach storage or a log line (a
//! valid blob name, an ETag of 1 to `MAX_ETAG_BYTES` visible characters).
//! Storage is asked with `If-Match` on that ETag, never without one
//! (`relay_storage::delete`), so a blob written after the caller's listing
//! is kept and said to have changed.

use quinn::{RecvStream, SendStream};
use relay_proto::blob_name::validate_blob_name;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{Code, Delete, Deleted, Failure, MAX_ETAG_BYTES, Message, Removal};
use relay_storage::delete::{DeleteError, Deletion};
use tracing::Instrument;

use super::admit::{Request, admit, admitted};
use super::fetch::{finish, write_frame_within};
use crate::connection::link::Link;
use crate::connection::stream_credit::StreamTicket;
use crate::state::Shared;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::rejections::Reason;
use crate::transfer::{refuse, reject};

/// Serves one Delete (its frame already read).
pub(crate) async fn handle(
    shared: &Shared,
    link: &Link,
    ticket: &mut StreamTicket,
    send: &mut SendStream,
    recv: &mut RecvStream,
    delete: Delete,
) {
    if let Err(r) = admit(shared, Request::delete(&delete)).await {
        return refuse(shared, link, send, recv, r.into()).await;
    }
    if let Err(f) = check_delete(&delete) {
        return reject(shared, send, recv, Reason::Code(f.code), f).await;
    }
    admitted(link, ticket);
    let span = tracing::info_span!(
        "delete",
        container = %safe(&delete.container),
        blob = %safe(&delete.name),
    );
    serve(shared, send, &delete).instrument(span).await;
}

/// A Delete's own fields, beyond the admission every stream gets: a valid
/// blob name, and the ETag of the version to delete (required: a delete
/// without one could remove a version written after the caller listed).
fn check_delete(d: &Delete) -> Result<(), Failure> {
    validate_blob_name(&d.name).map_err(|e| Failure::new(Code::InvalidName, e.to_string()))?;
    let etag = d.etag.trim_matches('"');
    if etag.is_empty() {
        return Err(Failure::new(
            Code::InvalidOffer,
            "a Delete needs the ETag of the listed version",
        ));
    }
    if d.etag.len() > MAX_ETAG_BYTES {
        return Err(Failure::new(
            Code::TooLarge,
            format!("a Delete's ETag is at most {MAX_ETAG_BYTES} bytes"),
        ));
    }
    // `*` (any version) and lists (`"a","b"`) would match more than the one
    // version listed.
    if !etag
        .chars()
        .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '*' | ','))
    {
        return Err(Failure::new(
            Code::InvalidOffer,
            "a Delete's ETag is one version's: visible ASCII, quoted or bare, without '*' or ','",
        ));
    }
    Ok(())
}

/// Storage's answer to the delete, told to the client, counted and logged.
async fn serve(shared: &Shared, send: &mut SendStream, d: &Delete) {
    let timeout = shared.storage.download.write_timeout;
    let m = &shared.metrics;
    let answer = match shared.storage.account.deleter(&d.container, &d.name) {
        Ok(deleter) => {
            if let Some(pace) = shared.delete_pace() {
                tokio::time::sleep(pace(0, 0)).await;
            }
            let done = deleter.delete_if_match(&d.etag).await;
            outcome(done, deleter.requests())
        }
        Err(e) => Err(relay_pipeline::failure::storage_failure(&e)),
    };
    let frame = match answer {
        Ok(deleted) => {
            let (counter, what) = match deleted.outcome {
                Removal::Deleted => (&m.deletes_deleted, "deleted"),
                Removal::AlreadyGone => (&m.deletes_gone, "already gone"),
                Removal::Changed => (&m.deletes_changed, "changed since listed; kept"),
            };
            Metrics::add(counter, 1);
            tracing::info!(outcome = what, requests = deleted.requests, "delete");
            Message::Deleted(deleted)
        }
        Err(f) => {
            Metrics::add(&m.deletes_failed, 1);
            tracing::warn!(code = f.code.label(), reason = %safe(&f.message), "delete failed");
            Message::Error(f)
        }
    };
    let _ = write_frame_within(timeout, send, &frame).await;
    finish(send, timeout).await;
}

/// Storage's answer as the client hears it.
fn outcome(done: Result<Deletion, DeleteError>, requests: u32) -> Result<Deleted, Failure> {
    let outcome = match done {
        Ok(Deletion::Deleted) => Removal::Deleted,
        Ok(Deletion::NotFound) => Removal::AlreadyGone,
        Ok(Deletion::Changed) => Removal::Changed,
        Err(DeleteError::NoEtag) => {
            return Err(Failure::new(
                Code::InvalidOffer,
                "a Delete needs the ETag of the listed version",
            ));
        }
        Err(DeleteError::Storage(e)) => {
            let mut f = relay_pipeline::failure::storage_failure(&e);
            f.requests = Some(requests);
            return Err(f);
        }
    };
    Ok(Deleted { outcome, requests })
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::protocol::Secret;

    fn delete(name: &str, etag: &str) -> Delete {
        Delete {
            version: relay_proto::limits::PROTOCOL_VERSION,
            token: Secret("t".into()),
            container: "c".into(),
            name: name.into(),
            etag: etag.into(),
        }
    }

    #[test]
    fn a_delete_is_held_to_its_bounds() {
        let refused = |d: Delete| check_delete(&d).map_err(|f| f.code);
        assert_eq!(refused(delete("a/b", "\"0x8DC0FFEE\"")), Ok(()));
        assert_eq!(refused(delete("a/b", "0x8DC0FFEE")), Ok(()));
        assert_eq!(refused(delete("a/b", "")), Err(Code::InvalidOffer));
        assert_eq!(refused(delete("a/b", "\"\"")), Err(Code::InvalidOffer));
        // Any version, or a list of them: more than the one listed.
        assert_eq!(refused(delete("a/b", "*")), Err(Code::InvalidOffer));
        assert_eq!(refused(delete("a/b", "\"*\"")), Err(Code::InvalidOffer));
        assert_eq!(
            refused(delete("a/b", "\"0x1\",\"0x2\"")),
            Err(Code::InvalidOffer)
        );
        assert_eq!(refused(delete("a/b", "0x1,0x2")), Err(Code::InvalidOffer));
        assert_eq!(refused(delete("a/b", "0x1 x")), Err(Code::InvalidOffer));
        assert_eq!(refused(delete("a/b", "0x1\n")), Err(Code::InvalidOffer));
        assert_eq!(
            refused(delete("a/b", &"e".repeat(MAX_ETAG_BYTES + 1))),
            Err(Code::TooLarge)
        );
        assert_eq!(refused(delete("", "0x1")), Err(Code::InvalidName));
        assert_eq!(refused(delete("a\u{202e}b", "0x1")), Err(Code::InvalidName));
        assert_eq!(
            refused(delete(&"n".repeat(1025), "0x1")),
            Err(Code::InvalidName)
        );
    }

    #[test]
    fn storage_answers_become_outcomes_and_failures() {
        let ok = |d| outcome(Ok(d), 1).map(|x| x.outcome);
        assert_eq!(ok(Deletion::Deleted), Ok(Removal::Deleted));
        assert_eq!(ok(Deletion::NotFound), Ok(Removal::AlreadyGone));
        assert_eq!(ok(Deletion::Changed), Ok(Removal::Changed));
        let f = outcome(Err(DeleteError::NoEtag), 0).map_err(|f| f.code);
        assert_eq!(f, Err(Code::InvalidOffer));
    }
}
