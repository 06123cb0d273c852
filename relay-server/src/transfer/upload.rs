//! One upload on one stream: Offer → Plan/Reject → Start + bytes + Trailer
//! (and, when asked, Progress frames back as blocks are staged) →
//! Receipt/Error. Nothing is committed unless the relay's SHA-256 of every byte
//! equals the client's. The protocol's decisions are the session's
//! (`relay_proto::session::relay`); this driver performs its actions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::{RecvStream, SendStream};
use relay_pipeline::failure::{condition, outcome, storage_failure};
use relay_pipeline::upload::Upload;
use relay_proto::codec::FrameError;
use relay_proto::logsafe::{MAX_LOG_CHARS, safe, safe_to};
use relay_proto::offer_rules::{OfferLimits, check_offer};
use relay_proto::plan::BlockPlan;
use relay_proto::protocol::{Failure, Message, Offer, Plan};
use relay_proto::session::relay::{Accepted, Action, End, Event, RelaySession};
use relay_storage::publish::{Destination, Writer};
use relay_storage::staging::Stager;

use super::admit::{Request, admit};
use super::progress::telling_progress;
use super::upload_io::Io;
use super::{LOG_TARGET, refuse};
use crate::connection::link::{Link, write_control};
use crate::connection::stream_credit::StreamTicket;
use crate::sign_in::auth::{Access, Caller, also_granted};
use crate::state::Shared;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::rejections::Reason;

pub(super) async fn respond(
    shared: &Shared,
    link: &Link,
    offer: &Offer,
    ticket: &mut StreamTicket,
    send: &mut SendStream,
    recv: &mut RecvStream,
) {
    let (end, draining) = run(shared, link, offer, ticket, send, recv).await;
    match end {
        End::Receipt(receipt) => {
            Metrics::add(&shared.metrics.transfers_committed, 1);
            Metrics::add(&shared.metrics.bytes_committed, receipt.size);
            let t = &receipt.timings;
            tracing::info!(
                target: LOG_TARGET,
                etag = %receipt.etag,
                resumed = receipt.bytes_resumed,
                retries = receipt.retries,
                receive_ms = t.receive_ms,
                stage_wait_ms = t.stage_wait_ms,
                commit_ms = t.commit_ms,
                "committed"
            );
            let _ = write_control(send, &Message::Receipt(receipt)).await;
            let _ = send.finish();
        }
        End::Reject(f) => refuse(shared, link, send, recv, f).await,
        End::Redirect {
            resume_offset: offset,
        } => {
            tracing::info!(
                target: LOG_TARGET,
                offset,
                "staged blocks found for an eager offer; the client resumes on a new stream"
            );
            let _ = recv.stop(relay_proto::protocol::app_error::RESUME_ON_NEW_STREAM.into());
            let _ = send.finish();
        }
        End::Fail(f) => {
            shared.metrics.failed(Reason::Code(f.code));
            // Azure's reasons can be long and are worth keeping whole-ish; escaped all the same.
            tracing::warn!(target: LOG_TARGET, code = Reason::Code(f.code).label(), reason = %safe_to(&f.message, 4 * MAX_LOG_CHARS), "failed; {}", outcome(&f));
            let _ = write_control(send, &Message::Error(f)).await;
            let _ = send.finish();
            // The client may still be sending; tell it to stop.
            let _ = recv.stop(relay_proto::protocol::app_error::PROTOCOL.into());
        }
    }
    // Blocks still in flight after a receive failure land now, for a resume;
    // the client heard its Error first.
    if let Some(stager) = draining {
        stager.drain().await;
    }
}

/// Everything the Offer must satisfy before any Azure call: the caller's
/// admission (`admit`: version, token, grant, reserved containers), then the
/// rest of `relay_proto::offer_rules`. Nothing here raises stream credit: the
/// connection's gate opens only after it passes.
async fn validate(shared: &Shared, offer: &Offer) -> Result<(BlockPlan, Caller), Failure> {
    let caller = admit(shared, Request::upload(offer)).await?;
    let limits = OfferLimits {
        default_block_size: shared.storage.block_size,
        max_block_bytes: shared.max_block_bytes(),
    };
    Ok((check_offer(offer, &limits)?, caller))
}

/// Drives one file's `RelaySession`: performs each action it asks for (storage
/// calls through the shared upload pipeline, frames, the byte stream) and feeds
/// back what happened. Returns the session's end action, and the stager whose
/// blocks in flight are to land after the client heard it (a receive failure).
async fn run(
    shared: &Shared,
    link: &Link,
    offer: &Offer,
    ticket: &mut StreamTicket,
    send: &mut SendStream,
    recv: &mut RecvStream,
) -> (End, Option<Stager>) {
    let (plan, caller) = match validate(shared, offer).await {
        Ok(v) => v,
        Err(f) => return (End::Reject(f), None),
    };
    log_principal(&caller);
    // A valid Offer: the connection may now have its full windows and a
    // connection slot (`admission`).
    link.gate.open();
    let writer = match shared.storage.account.writer(&offer.container, &offer.blob) {
        Ok(w) => Arc::new(w),
        Err(e) => return (End::Reject(storage_failure(&e)), None),
    };
    // Resume state is private to the token (or Entra ID principal) that
    // started the transfer.
    let owner = caller.owner(&offer.token.0);
    let reads = may_read(shared, offer, &caller);
    let condition = condition(&offer.overwrite);
    let dest = Destination {
        container: &offer.container,
        blob: &offer.blob,
        key: &shared.storage.id_key,
        writer: Writer {
            owner: &owner,
            reads,
        },
        size: offer.size,
        content_type: offer.content_type.as_deref(),
        metadata: &offer.metadata,
        condition: &condition,
    };
    let upload = Upload::new(writer.clone(), dest, plan).with_whole_md5(offer.put_md5);
    let mut io = Io::new(shared, offer, writer, upload, owner);
    let (mut session, mut action) = RelaySession::new(accepted(offer, &plan, link));
    loop {
        let event = match action {
            Action::Prepare => Event::Prepared(io.prepare().await),
            Action::SendPlan(p) => Event::PlanSent(send_plan(shared, link, send, p).await),
            Action::ReadFrame { timeout } => {
                match tokio::time::timeout(timeout, link.read_frame(recv)).await {
                    Ok(frame) => Event::Frame(frame),
                    Err(_) => Event::TimedOut,
                }
            }
            Action::Receive {
                from_resume_point,
                encoding,
            } => {
                let progress = io.progress();
                let work = io.receive(from_resume_point, encoding, recv);
                let received = telling_progress(send, progress, work).await;
                // Every byte is here (or the stream failed): from now on the file
                // waits only for storage, and no longer asks for streams.
                ticket.received();
                Event::Received(received)
            }
            Action::FinishStaging => {
                let progress = io.progress();
                Event::Staged(telling_progress(send, progress, io.finish()).await)
            }
            Action::Commit => Event::Committed(io.commit(&session.expected()).await),
            // An Error says what the file cost storage, for the client's report.
            Action::End(End::Fail(mut f)) => {
                f.requests = Some(io.usage().requests);
                return (End::Fail(f), io.take_draining());
            }
            Action::End(end) => return (end, io.take_draining()),
        };
        action = session.handle(event, Instant::now());
    }
}

/// Who uploads, when an Entra ID principal does: never the token; the names
/// are the peer's text, escaped.
fn log_principal(caller: &Caller) {
    if let Caller::Entra(p) = caller {
        tracing::info!(tenant = %safe(&p.tenant), oid = %safe(&p.object_id), name = %safe(&p.name), "Entra ID principal");
    }
}

/// Writing never implies reading: what depends on a blob in the way is told
/// only to a caller that may read the container, or that wrote that version.
fn may_read(shared: &Shared, offer: &Offer, caller: &Caller) -> bool {
    also_granted(
        &shared.sign_in.tokens,
        shared.sign_in.entra.as_deref(),
        &offer.token.0,
        caller,
        &offer.container,
        Access::Read,
    )
}

/// What the session starts from: the admitted Offer and its plan.
fn accepted(offer: &Offer, plan: &BlockPlan, link: &Link) -> Accepted {
    Accepted {
        container: offer.container.clone(),
        blob: offer.blob.clone(),
        size: offer.size,
        block_size: plan.block_size,
        eager: offer.eager,
        sha256: offer.sha256.clone(),
        compression_agreed: link.zstd,
    }
}

/// Sends the session's Plan, naming this relay's build (a client at `-v` says
/// which relay it talks to).
async fn send_plan(
    shared: &Shared,
    link: &Link,
    send: &mut SendStream,
    mut plan: Plan,
) -> Result<(), FrameError> {
    plan.relay_version = Some(crate::telemetry::version::LONG.to_string());
    if let Some(bytes) = shared.hold_plan_until_received() {
        hold_until_received(&link.conn, bytes).await;
    }
    write_control(send, &Message::Plan(plan)).await
}

/// Test hook: waits (at most 30 s) until the connection has received `bytes`, so
/// the Plan reaches the client only after it sent its whole eager body.
async fn hold_until_received(conn: &quinn::Connection, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while conn.stats().udp_rx.bytes < bytes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
