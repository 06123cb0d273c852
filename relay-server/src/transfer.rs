//! One file on one QUIC stream: Offer → Plan/Reject → Start + bytes + Trailer →
//! Receipt/Error. Nothing is committed unless the relay's SHA-256 of every byte
//! equals the client's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::{RecvStream, SendStream};
use relay_proto::blob_name::{validate_blob_name, validate_container};
use relay_proto::block_id::{IdSigner, TransferTag};
use relay_proto::codec::FrameError;
use relay_proto::exchange::{RelayTakes, relay_takes};
use relay_proto::id_key::Owner;
use relay_proto::logsafe::{MAX_LOG_CHARS, safe, safe_to};
use relay_proto::offer_rules::{OfferLimits, check_offer, check_version};
use relay_proto::plan::BlockPlan;
use relay_proto::protocol::{Code, Failure, Message, Offer, Plan, Receipt, Timings};
use relay_proto::resume::{ResumePoint, find_resume_point};
use relay_storage::publish::{
    Destination, already_committed, commit_verified, preflight, stage_failure, storage_failure,
};
use relay_storage::staging::{StageLimits, Stager};
use relay_transport::frames::{read_frame, write_frame};
use tracing::Instrument;

use crate::admission::AuthGate;
use crate::metrics::{ActiveGuard, Metrics};
use crate::rejections::Reason;
use crate::server::Shared;

/// How long a peer may take to send a control frame (Offer, Start).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a peer may send no file bytes before its transfer is dropped (its
/// block buffer goes back to the budget; staged blocks stay for a resume).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

fn fail(code: Code, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

pub async fn handle(
    shared: Arc<Shared>,
    gate: Arc<AuthGate>,
    conn: quinn::Connection,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let _active = ActiveGuard::new(&shared.metrics);
    let refused = match tokio::time::timeout(CONTROL_TIMEOUT, read_frame(&mut recv)).await {
        Ok(Ok(Message::Offer(o))) => match check_names(&o) {
            Ok(()) => Ok(o),
            Err(f) => Err((Reason::Code(f.code), f)),
        },
        Ok(Ok(other)) => Err((
            Reason::NotOffer,
            fail(
                Code::InvalidOffer,
                format!("expected an Offer, got {}", other.name()),
            ),
        )),
        // Nothing was sent and nobody waits for an answer; counted all the same.
        Ok(Err(FrameError::Closed)) => {
            shared
                .metrics
                .rejections
                .record(Reason::ClosedEarly, "stream ended before an Offer");
            return;
        }
        Ok(Err(e @ (FrameError::Truncated | FrameError::Io(_)))) => Err((
            Reason::ClosedEarly,
            fail(Code::InvalidOffer, format!("bad Offer: {e}")),
        )),
        Ok(Err(e)) => Err((
            Reason::BadFrame,
            fail(Code::InvalidOffer, format!("bad Offer: {e}")),
        )),
        Err(_) => Err((
            Reason::OfferTimeout,
            fail(Code::InvalidOffer, "no Offer within 30 s"),
        )),
    };
    let offer = match refused {
        Ok(o) => o,
        Err((reason, f)) => return reject(&shared, &mut send, &mut recv, reason, f).await,
    };
    // Names are valid here (no control or bidi characters); still escaped and cut,
    // since a valid blob name may be 1024 characters.
    let span = tracing::info_span!(
        "transfer",
        container = %safe(&offer.container),
        blob = %safe(&offer.blob),
        size = offer.size
    );
    let link = Link { gate, conn };
    respond(&shared, &link, &offer, &mut send, &mut recv)
        .instrument(span)
        .await;
}

/// The names in an Offer, checked before they go anywhere near a log span.
/// (`validate` checks them again, with the rest of the Offer.)
fn check_names(offer: &Offer) -> Result<(), Failure> {
    validate_container(&offer.container).map_err(|m| fail(Code::InvalidName, m))?;
    validate_blob_name(&offer.blob).map_err(|m| fail(Code::InvalidName, m))
}

/// The connection a stream belongs to: its authentication gate, and the
/// connection itself (for the test hook that holds the Plan).
struct Link {
    gate: Arc<AuthGate>,
    conn: quinn::Connection,
}

async fn respond(
    shared: &Shared,
    link: &Link,
    offer: &Offer,
    send: &mut SendStream,
    recv: &mut RecvStream,
) {
    match run(shared, link, offer, send, recv).await {
        Ok(receipt) => {
            Metrics::add(&shared.metrics.transfers_committed, 1);
            Metrics::add(&shared.metrics.bytes_committed, receipt.size);
            let t = &receipt.timings;
            tracing::info!(
                etag = %receipt.etag,
                resumed = receipt.bytes_resumed,
                retries = receipt.retries,
                receive_ms = t.receive_ms,
                stage_wait_ms = t.stage_wait_ms,
                commit_ms = t.commit_ms,
                "committed"
            );
            let _ = write_frame(send, &Message::Receipt(receipt)).await;
            let _ = send.finish();
        }
        Err(Outcome::Rejected(f)) => {
            reject(shared, send, recv, Reason::Code(f.code), f).await;
        }
        Err(Outcome::ResumeOnNewStream { offset }) => {
            tracing::info!(
                offset,
                "staged blocks found for an eager offer; the client resumes on a new stream"
            );
            let _ = recv.stop(relay_proto::protocol::app_error::RESUME_ON_NEW_STREAM.into());
            let _ = send.finish();
        }
        Err(Outcome::Failed(f)) => {
            shared.metrics.failed(Reason::Code(f.code));
            // Azure's reasons can be long and are worth keeping whole-ish; escaped all the same.
            tracing::warn!(code = Reason::Code(f.code).label(), reason = %safe_to(&f.message, 4 * MAX_LOG_CHARS), "failed; nothing committed");
            let _ = write_frame(send, &Message::Error(f)).await;
            let _ = send.finish();
            // The client may still be sending; tell it to stop.
            let _ = recv.stop(relay_proto::protocol::app_error::PROTOCOL.into());
        }
    }
}

/// Refuses a stream before its Plan. An eager client is already sending: stop it.
/// Counted by reason and logged at a bounded rate (a peer can cause these as fast
/// as it opens streams).
async fn reject(
    shared: &Shared,
    send: &mut SendStream,
    recv: &mut RecvStream,
    reason: Reason,
    f: Failure,
) {
    shared.metrics.failed(reason);
    shared.metrics.rejections.record(reason, &f.message);
    let _ = recv.stop(relay_proto::protocol::app_error::REJECTED.into());
    let _ = write_frame(send, &Message::Reject(f)).await;
    let _ = send.finish();
}

enum Outcome {
    /// Before the Plan: the client learns why and sends nothing.
    Rejected(Failure),
    /// After the Plan.
    Failed(Failure),
    /// An eager Offer for a file with staged blocks: the Plan offers them and this
    /// stream's bytes (sent from 0) are not read; the client re-offers on a new
    /// stream and resumes there.
    ResumeOnNewStream { offset: u64 },
}

/// Everything the Offer must satisfy before any Azure call: its version, then the
/// token, then the rest of `relay_proto::offer_rules`.
fn validate(shared: &Shared, offer: &Offer) -> Result<BlockPlan, Failure> {
    check_version(offer)?;
    shared
        .tokens
        .check(&offer.token.0, &offer.container)
        .map_err(|e| match e {
            crate::auth::AuthError::Unknown => fail(Code::Unauthorized, e.to_string()),
            crate::auth::AuthError::Container(_) => fail(Code::Forbidden, e.to_string()),
        })?;
    if shared.reserved_containers.contains(&offer.container) {
        // The deployment's own files (the relay binary, keys, tokens) live there:
        // no upload may ever write them, whatever a token's grant says.
        return Err(fail(
            Code::Forbidden,
            format!(
                "container {:?} is reserved for the relay's own files",
                offer.container
            ),
        ));
    }
    let limits = OfferLimits {
        default_block_size: shared.block_size,
        max_block_bytes: shared.max_block_bytes(),
    };
    check_offer(offer, &limits)
}

async fn run(
    shared: &Shared,
    link: &Link,
    offer: &Offer,
    send: &mut SendStream,
    recv: &mut RecvStream,
) -> Result<Receipt, Outcome> {
    let plan = validate(shared, offer).map_err(Outcome::Rejected)?;
    // A valid Offer: the connection may now have its full windows and a
    // connection slot (`admission`).
    link.gate.open();
    let writer = shared
        .storage
        .writer(&offer.container, &offer.blob)
        .map_err(|e| Outcome::Rejected(storage_failure(&e)))?;
    let writer = Arc::new(writer);
    // Resume state is private to the token that started the transfer.
    let owner = Owner::of_token(&offer.token.0);
    let dest = Destination {
        container: &offer.container,
        blob: &offer.blob,
        key: &shared.id_key,
        size: offer.size,
        content_type: offer.content_type.as_deref(),
        metadata: &offer.metadata,
        overwrite: &offer.overwrite,
    };

    // Fail before any byte moves if the commit is bound to be refused; unless the
    // client proved (with the SHA-256 of its whole file) that the blob already holds
    // its bytes: then a re-run after an interrupted run is a success with nothing sent.
    if let Err(f) = preflight(&writer, &offer.overwrite).await {
        let present = match (&f.code, &offer.sha256) {
            (Code::Exists, Some(sha)) => already_committed(&writer, &dest, sha)
                .await
                .map_err(Outcome::Rejected)?,
            _ => None,
        };
        let Some(props) = present else {
            return Err(Outcome::Rejected(f));
        };
        tracing::info!(etag = %props.etag, "blob already holds these bytes; nothing to send");
        return Ok(Receipt {
            container: offer.container.clone(),
            blob: offer.blob.clone(),
            etag: props.etag,
            size: props.size,
            sha256: props.sha256.unwrap_or_default().to_ascii_lowercase(),
            block_size: plan.block_size,
            blocks: 0,
            bytes_resumed: offer.size,
            bytes_received: 0,
            retries: writer.retries(),
            requests: writer.requests(),
            timings: Timings::default(),
        });
    }

    let tag = TransferTag::derive(
        &shared.id_key,
        &owner,
        &offer.container,
        &offer.blob,
        offer.size,
        plan.block_size,
    );
    let signer = IdSigner::new(shared.id_key.clone(), tag);
    // A file of one block has nothing to resume (its only block is its last):
    // no block list to read, one Put Blob later.
    let uncommitted = if plan.block_count() > 1 {
        writer
            .uncommitted_blocks()
            .await
            .map_err(|e| Outcome::Rejected(storage_failure(&e)))?
    } else {
        Vec::new()
    };
    let resume = find_resume_point(
        &plan,
        &signer,
        uncommitted.iter().map(|(id, s)| (id.as_slice(), *s)),
    );
    if let Some(bytes) = shared.hold_plan_until_received() {
        hold_until_received(&link.conn, bytes).await;
    }
    let failed = Outcome::Failed;
    let io_fail = |what: &str, e: FrameError| {
        let code = match e {
            FrameError::Closed | FrameError::Truncated => Code::Truncated,
            _ => Code::InvalidOffer,
        };
        failed(fail(code, format!("{what}: {e}")))
    };
    write_frame(
        send,
        &Message::Plan(Plan {
            tag: tag.to_hex(),
            block_size: plan.block_size,
            resume_offset: resume.offset,
            checkpoint: resume.checkpoint.to_hex(),
        }),
    )
    .await
    .map_err(|e| io_fail("sending the Plan", e))?;
    if let Some(RelayTakes::Redirect { resume_offset }) = relay_takes(offer.eager, resume.offset) {
        return Err(Outcome::ResumeOnNewStream {
            offset: resume_offset,
        });
    }

    let start = match tokio::time::timeout(CONTROL_TIMEOUT, read_frame(recv)).await {
        Ok(Ok(Message::Start(s))) => s,
        Ok(Ok(other)) => {
            return Err(failed(fail(
                Code::InvalidOffer,
                format!("expected Start, got {}", other.name()),
            )));
        }
        Ok(Err(e)) => return Err(io_fail("reading Start", e)),
        Err(_) => return Err(failed(fail(Code::InvalidOffer, "no Start within 30 s"))),
    };
    let point = if start.offset == resume.offset {
        resume
    } else if start.offset == 0 {
        tracing::info!(
            offered = resume.offset,
            "client's source differs from staged blocks; restarting from zero"
        );
        ResumePoint::fresh()
    } else {
        return Err(failed(fail(
            Code::InvalidOffer,
            format!(
                "Start at {} is neither 0 nor the resume offset {}",
                start.offset, resume.offset
            ),
        )));
    };

    let t_start = Instant::now();
    let resumed_at = point.offset;
    let stager = Stager::new(
        writer.clone(),
        plan,
        signer,
        point,
        shared.budget.clone(),
        shared.blocks_in_flight,
    )
    .map_err(|e| failed(fail(Code::Internal, e.to_string())))?;
    let mut stager = stager
        .with_mangle(shared.mangle())
        .with_pace(shared.pace())
        .with_stop(shared.stopping.clone())
        .with_limits(StageLimits {
            idle: Some(IDLE_TIMEOUT),
            budget_wait: Some(shared.budget_wait),
            min_fill_bytes_per_s: Some(shared.block_fill.min_bytes_per_s),
            fill_grace: shared.block_fill.grace,
        })
        .with_share(shared.share_of(&owner))
        .with_staged_bytes(shared.metrics.bytes_staged.clone());
    let pumped = stager.pump(recv).await;
    Metrics::add(&shared.metrics.bytes_received, stager.offset() - resumed_at);
    if let Err(e) = pumped {
        // Blocks already in flight are worth keeping: a resume reuses them.
        stager.drain().await;
        return Err(failed(stage_failure(e)));
    }
    let receive_ms = t_start.elapsed().as_millis() as u64;

    let trailer = match tokio::time::timeout(CONTROL_TIMEOUT, read_frame(recv)).await {
        Ok(Ok(Message::Trailer(t))) => t,
        Ok(Ok(other)) => {
            return Err(failed(fail(
                Code::InvalidOffer,
                format!("expected Trailer, got {}", other.name()),
            )));
        }
        Ok(Err(e)) => return Err(io_fail("reading the Trailer", e)),
        Err(_) => return Err(failed(fail(Code::Truncated, "no Trailer within 30 s"))),
    };
    let t_wait = Instant::now();
    let staged = stager
        .finish()
        .await
        .map_err(|e| failed(stage_failure(e)))?;
    let stage_wait_ms = t_wait.elapsed().as_millis() as u64;

    let t_commit = Instant::now();
    let mut expected = vec![("the client", trailer.sha256.as_str())];
    if let Some(m) = &offer.sha256 {
        expected.push(("the manifest", m.as_str()));
    }
    let props = commit_verified(&writer, &staged, &expected, &dest)
        .await
        .map_err(failed)?;
    if staged.single.is_some() {
        // A one-block file reaches Azure in its Put Blob: count it as staged.
        Metrics::add(&shared.metrics.bytes_staged, offer.size);
    }
    let commit_time = t_commit.elapsed();
    let commit_ms = commit_time.as_millis() as u64;
    shared.metrics.commit_seconds.observe(commit_time);
    Ok(Receipt {
        container: offer.container.clone(),
        blob: offer.blob.clone(),
        etag: props.etag,
        size: props.size,
        sha256: hex::encode(staged.sha256),
        block_size: plan.block_size,
        blocks: staged.ids.len() as u64,
        bytes_resumed: staged.bytes_resumed,
        bytes_received: staged.bytes_received,
        retries: writer.retries(),
        requests: writer.requests(),
        timings: Timings {
            receive_ms,
            stage_wait_ms,
            commit_ms,
        },
    })
}

/// Test hook: waits (at most 30 s) until the connection has received `bytes`, so
/// the Plan reaches the client only after it sent its whole eager body.
async fn hold_until_received(conn: &quinn::Connection, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while conn.stats().udp_rx.bytes < bytes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
