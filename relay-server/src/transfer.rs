//! One file on one QUIC stream: Offer → Plan/Reject → Start + bytes + Trailer
//! (and, when asked, Progress frames back as blocks are staged) →
//! Receipt/Error. Nothing is committed unless the relay's SHA-256 of every byte
//! equals the client's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::{RecvStream, SendStream};
use relay_pipeline::failure::{
    condition, outcome, publish_failure, stage_failure, storage_failure,
};
use relay_pipeline::upload::{Probe, Upload};
use relay_proto::blob_name::{validate_blob_name, validate_container};
use relay_proto::codec::FrameError;
use relay_proto::id_key::Owner;
use relay_proto::logsafe::{MAX_LOG_CHARS, safe, safe_to};
use relay_proto::offer_rules::{OfferLimits, check_offer, check_version};
use relay_proto::plan::BlockPlan;
use relay_proto::protocol::{Code, Encoding, Failure, Message, Offer, Progress};
use relay_proto::resume::ResumePoint;
use relay_proto::session::relay::{
    Accepted, Action, CONTROL_TIMEOUT, Committed, Event, Prepared, RelaySession, Staged, Usage,
};
use relay_storage::blob::BlobWriter;
use relay_storage::publish::{Destination, PublishError};
use relay_storage::staging::{StageError, StageLimits, Stager};
use relay_transport::frames::write_frame;
use tracing::Instrument;

use crate::auth::{AuthError, Caller};
use crate::inflating::{DecodeError, Inflating, ReceiveError};
use crate::link::{Link, write_control};
use crate::metrics::{ActiveGuard, Metrics};
use crate::rejections::Reason;
use crate::state::Shared;
use crate::stream_credit::StreamTicket;

/// How long a peer may send no file bytes before its transfer is dropped (its
/// block buffer goes back to the budget; staged blocks stay for a resume).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A Progress frame that cannot be written within this time is the last one: a
/// client that does not read them must not hold its own transfer's staging
/// (and the memory under it) while the relay waits to tell it.
const PROGRESS_WRITE: Duration = Duration::from_secs(1);

pub(crate) fn fail(code: Code, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
        existing: None,
        requests: None,
        outcome_unknown: false,
    }
}

pub async fn handle(
    shared: Arc<Shared>,
    link: Link,
    mut ticket: StreamTicket,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let _active = ActiveGuard::new(&shared.metrics);
    let refused = match tokio::time::timeout(CONTROL_TIMEOUT, link.read_frame(&mut recv)).await {
        // A download stream: its own drivers (`fetch`, `listing`).
        Ok(Ok(Message::Fetch(f))) => {
            return crate::fetch::handle(&shared, &link, &mut ticket, &mut send, &mut recv, f)
                .await;
        }
        Ok(Ok(Message::List(l))) => {
            return crate::listing::handle(&shared, &link, &mut ticket, &mut send, &mut recv, l)
                .await;
        }
        Ok(Ok(Message::Offer(o))) => match check_names(&o) {
            Ok(()) => Ok(o),
            Err(f) => Err((Reason::Code(f.code), f)),
        },
        Ok(Ok(other)) => Err((
            Reason::NotOffer,
            fail(
                Code::InvalidOffer,
                format!("expected an Offer, Fetch or List, got {}", other.name()),
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
        Ok(o) => {
            // Its size sets how many more streams the connection may open.
            ticket.declare(o.size);
            o
        }
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
    respond(&shared, &link, &offer, &mut ticket, &mut send, &mut recv)
        .instrument(span)
        .await;
}

/// The names in an Offer, checked before they go anywhere near a log span.
/// (`validate` checks them again, with the rest of the Offer.)
fn check_names(offer: &Offer) -> Result<(), Failure> {
    validate_container(&offer.container).map_err(|e| fail(Code::InvalidName, e.to_string()))?;
    validate_blob_name(&offer.blob).map_err(|e| fail(Code::InvalidName, e.to_string()))
}

async fn respond(
    shared: &Shared,
    link: &Link,
    offer: &Offer,
    ticket: &mut StreamTicket,
    send: &mut SendStream,
    recv: &mut RecvStream,
) {
    let (end, draining) = run(shared, link, offer, ticket, send, recv).await;
    match end {
        Action::Receipt(receipt) => {
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
            let _ = write_control(send, &Message::Receipt(receipt)).await;
            let _ = send.finish();
        }
        Action::Reject(f) => {
            let who = matches!(f.code, Code::Unauthorized | Code::Forbidden);
            reject(shared, send, recv, Reason::Code(f.code), f).await;
            if who {
                link.refuse_peer(send).await;
            }
        }
        Action::Redirect {
            resume_offset: offset,
        } => {
            tracing::info!(
                offset,
                "staged blocks found for an eager offer; the client resumes on a new stream"
            );
            let _ = recv.stop(relay_proto::protocol::app_error::RESUME_ON_NEW_STREAM.into());
            let _ = send.finish();
        }
        Action::Fail(f) => {
            shared.metrics.failed(Reason::Code(f.code));
            // Azure's reasons can be long and are worth keeping whole-ish; escaped all the same.
            tracing::warn!(code = Reason::Code(f.code).label(), reason = %safe_to(&f.message, 4 * MAX_LOG_CHARS), "failed; {}", outcome(&f));
            let _ = write_control(send, &Message::Error(f)).await;
            let _ = send.finish();
            // The client may still be sending; tell it to stop.
            let _ = recv.stop(relay_proto::protocol::app_error::PROTOCOL.into());
        }
        other => {
            // `run` returns only ends; anything else is a bug, reported as one.
            let f = fail(Code::Internal, format!("transfer ended on {other:?}"));
            let _ = write_control(send, &Message::Error(f)).await;
            let _ = send.finish();
        }
    }
    // Blocks still in flight after a receive failure land now, for a resume;
    // the client heard its Error first.
    if let Some(stager) = draining {
        stager.drain().await;
    }
}

/// Refuses a stream before its Plan. An eager client is already sending: stop it.
/// Counted by reason and logged at a bounded rate (a peer can cause these as fast
/// as it opens streams).
pub(crate) async fn reject(
    shared: &Shared,
    send: &mut SendStream,
    recv: &mut RecvStream,
    reason: Reason,
    f: Failure,
) {
    shared.metrics.failed(reason);
    shared.metrics.rejections.record(reason, &f.message);
    let _ = recv.stop(relay_proto::protocol::app_error::REJECTED.into());
    let _ = write_control(send, &Message::Reject(f)).await;
    let _ = send.finish();
}

/// Everything the Offer must satisfy before any Azure call: its version, then the
/// token (a static token, or an Entra ID access token: `auth::authenticate`), then
/// the rest of `relay_proto::offer_rules`. Nothing here raises stream credit: the
/// connection's gate opens only after it passes.
async fn validate(shared: &Shared, offer: &Offer) -> Result<(BlockPlan, Caller), Failure> {
    check_version(offer)?;
    let caller = crate::auth::authenticate(
        &shared.tokens,
        shared.entra.as_deref(),
        &offer.token.0,
        &offer.container,
        crate::auth::Access::Write,
    )
    .await
    .map_err(|e| match e {
        AuthError::Unknown | AuthError::Entra(_) => fail(Code::Unauthorized, e.to_string()),
        AuthError::Container(_) | AuthError::NoRead(_) => fail(Code::Forbidden, e.to_string()),
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
) -> (Action, Option<Stager>) {
    let (plan, caller) = match validate(shared, offer).await {
        Ok(v) => v,
        Err(f) => return (Action::Reject(f), None),
    };
    if let Caller::Entra(p) = &caller {
        // Who uploads, never the token; the name is the peer's text: escaped.
        tracing::info!(tenant = %safe(&p.tenant), oid = %safe(&p.object_id), name = %safe(&p.name), "Entra ID principal");
    }
    // A valid Offer: the connection may now have its full windows and a
    // connection slot (`admission`).
    link.gate.open();
    let writer = match shared.storage.writer(&offer.container, &offer.blob) {
        Ok(w) => Arc::new(w),
        Err(e) => return (Action::Reject(storage_failure(&e)), None),
    };
    // Resume state is private to the token (or Entra ID principal) that
    // started the transfer.
    let owner = caller.owner(&offer.token.0);
    let condition = condition(&offer.overwrite);
    let dest = Destination {
        container: &offer.container,
        blob: &offer.blob,
        key: &shared.id_key,
        size: offer.size,
        content_type: offer.content_type.as_deref(),
        metadata: &offer.metadata,
        condition: &condition,
    };
    let mut io = Io {
        shared,
        offer,
        writer: writer.clone(),
        upload: Upload::new(writer, dest, plan, &owner).with_whole_md5(offer.put_md5),
        owner,
        progress: offer.progress.then(|| tokio::sync::watch::channel(0).0),
        resume: None,
        stager: None,
        staged: None,
        encoding: None,
        zstd_agreed: link.zstd,
        draining: None,
    };
    let (mut session, mut action) = RelaySession::new(Accepted {
        container: offer.container.clone(),
        blob: offer.blob.clone(),
        size: offer.size,
        block_size: plan.block_size,
        eager: offer.eager,
        sha256: offer.sha256.clone(),
    });
    loop {
        let event = match action {
            Action::Prepare => Event::Prepared(io.prepare().await),
            Action::SendPlan(mut p) => {
                p.relay_version = Some(crate::version::LONG.to_string());
                if let Some(bytes) = shared.hold_plan_until_received() {
                    hold_until_received(&link.conn, bytes).await;
                }
                Event::PlanSent(write_control(send, &Message::Plan(p)).await)
            }
            Action::ReadFrame { timeout } => {
                match tokio::time::timeout(timeout, link.read_frame(recv)).await {
                    Ok(frame) => {
                        if let Ok(Message::Start(s)) = &frame {
                            io.encoding = s.encoding;
                        }
                        Event::Frame(frame)
                    }
                    Err(_) => Event::TimedOut,
                }
            }
            Action::Receive { from_resume_point } => {
                let progress = io.progress.as_ref().map(|p| p.subscribe());
                let work = io.receive(from_resume_point, recv);
                let received = telling_progress(send, progress, work).await;
                // Every byte is here (or the stream failed): from now on the file
                // waits only for storage, and no longer asks for streams.
                ticket.received();
                Event::Received(received)
            }
            Action::FinishStaging => {
                let progress = io.progress.as_ref().map(|p| p.subscribe());
                Event::Staged(telling_progress(send, progress, io.finish()).await)
            }
            Action::Commit => Event::Committed(io.commit(&session.expected()).await),
            // An Error says what the file cost storage, for the client's report.
            Action::Fail(mut f) => {
                f.requests = Some(io.usage().requests);
                return (Action::Fail(f), io.draining.take());
            }
            end => return (end, io.draining.take()),
        };
        action = session.handle(event, Instant::now());
    }
}

/// Runs `work` while telling the client, in `Progress` frames, how many bytes
/// of its file are staged (`progress` changes as blocks land). Writing stops
/// for good at the first frame that does not go out within `PROGRESS_WRITE`.
async fn telling_progress<T>(
    send: &mut SendStream,
    progress: Option<tokio::sync::watch::Receiver<u64>>,
    work: impl Future<Output = T>,
) -> T {
    let Some(mut progress) = progress else {
        return work.await;
    };
    tokio::pin!(work);
    let mut live = true;
    loop {
        tokio::select! {
            out = &mut work => {
                // The last blocks may have landed with the work's end: say so
                // before the session moves on (the client's bar reaches the
                // file's size before its commit, which a Ctrl-C waits for).
                if live && progress.has_changed().unwrap_or(false) {
                    let staged = *progress.borrow_and_update();
                    tell(send, staged).await;
                }
                return out;
            }
            changed = progress.changed(), if live => {
                let staged = *progress.borrow_and_update();
                live = changed.is_ok() && tell(send, staged).await;
            }
        }
    }
}

/// One `Progress` frame; false if it did not go out within `PROGRESS_WRITE`.
async fn tell(send: &mut SendStream, staged: u64) -> bool {
    let frame = Message::Progress(Progress { staged });
    matches!(
        tokio::time::timeout(PROGRESS_WRITE, write_frame(send, &frame)).await,
        Ok(Ok(()))
    )
}

/// What the driver holds for one transfer between the session's actions.
struct Io<'a> {
    shared: &'a Shared,
    offer: &'a Offer,
    writer: Arc<BlobWriter>,
    upload: Upload<'a>,
    owner: Owner,
    /// The resume point found by `prepare`, used if the client's Start takes it.
    resume: Option<ResumePoint>,
    stager: Option<Stager>,
    staged: Option<relay_storage::staging::Staged>,
    /// Bytes of the file staged so far, when the Offer asked for `Progress`.
    progress: Option<tokio::sync::watch::Sender<u64>>,
    /// How the client's Start said its bytes travel.
    encoding: Option<Encoding>,
    /// The connection agreed on compressed chunks.
    zstd_agreed: bool,
    /// A stager that failed to receive, with blocks still in flight.
    draining: Option<Stager>,
}

impl Io<'_> {
    fn usage(&self) -> Usage {
        Usage {
            retries: self.writer.retries(),
            requests: self.writer.requests(),
        }
    }

    /// Fail before any byte moves if the commit is bound to be refused; unless the
    /// client proved (with the SHA-256 of its whole file) that the blob already
    /// holds its bytes: then a re-run after an interrupted run is a success with
    /// nothing sent.
    async fn prepare(&mut self) -> Result<Prepared, Failure> {
        // An Offer with the file's SHA-256 wants to know whether the blob holds
        // it before any byte moves; any other small file is not asked about
        // (its conditional Put Blob is the check: one request per new file).
        let probe = match self.offer.sha256 {
            Some(_) => Probe::Always,
            None => Probe::UnlessSmall,
        };
        let e = match self.upload.prepare(probe).await {
            Ok(point) => {
                let prepared = Prepared::Writable {
                    tag: self.upload.tag().to_hex(),
                    offset: point.offset,
                    checkpoint: point.checkpoint.to_hex(),
                };
                self.resume = Some(point);
                return Ok(prepared);
            }
            Err(e) => e,
        };
        // "Exists" (never overwrite) or "changed" (replacing one version): either
        // may be a commit of exactly these bytes, an earlier run's or this
        // upload's own whose Receipt was lost.
        let (PublishError::Exists(_) | PublishError::Changed { .. }, Some(sha)) =
            (&e, &self.offer.sha256)
        else {
            return Err(publish_failure(e));
        };
        match self.upload.already_committed(sha).await {
            Ok(Some(props)) => {
                tracing::info!(etag = %props.etag, "blob already holds these bytes; nothing to send");
                Ok(Prepared::AlreadyCommitted(Committed {
                    etag: props.etag,
                    size: props.size,
                    sha256: props.sha256.unwrap_or_default(),
                    usage: self.usage(),
                    earlier_commit: true,
                    content_md5: None,
                }))
            }
            Ok(None) => Err(publish_failure(e)),
            Err(e) => Err(publish_failure(e)),
        }
    }

    /// Cuts the stream's bytes into blocks and stages them, from the resume point
    /// or from zero.
    async fn receive(
        &mut self,
        from_resume_point: bool,
        recv: &mut RecvStream,
    ) -> Result<(), Failure> {
        let shared = self.shared;
        let resume = self.resume.take().unwrap_or_else(ResumePoint::fresh);
        let point = if from_resume_point {
            resume
        } else {
            if resume.offset > 0 {
                tracing::info!(
                    offered = resume.offset,
                    "client's source differs from staged blocks; restarting from zero"
                );
            }
            ResumePoint::fresh()
        };
        let on_staged = self.progress.clone().map(|p| {
            p.send_replace(point.offset);
            Arc::new(move |len: u64| p.send_modify(|staged| *staged += len))
                as relay_storage::staging::OnStaged
        });
        let stager = self
            .upload
            .stager(point, shared.budget.clone(), shared.blocks_in_flight)
            .map_err(|e| fail(Code::Internal, e.to_string()))?;
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
            .with_share(shared.share_of(&self.owner))
            .with_staged_bytes(shared.metrics.bytes_staged.clone())
            .with_received_bytes(shared.metrics.bytes_received.clone());
        if let Some(f) = on_staged {
            stager = stager.with_on_staged(f);
        }
        let pumped = match self.encoding {
            None => stager.pump(recv).await.map_err(stage_failure),
            Some(Encoding::Zstd) if !self.zstd_agreed => {
                return Err(fail(
                    Code::BadEncoding,
                    "compressed chunks were not agreed in the handshake (ALPN); nothing committed",
                ));
            }
            Some(Encoding::Zstd) => {
                let remaining = self.offer.size - stager.offset();
                let reserve = decoder_memory(shared, &self.owner);
                let mut inflating = Inflating::new(recv, remaining, reserve);
                let received = match stager.pump(&mut inflating).await {
                    // The last chunk's end, before the Trailer that follows it.
                    Ok(()) => inflating.finish(IDLE_TIMEOUT).await,
                    Err(e) => Err(inflating.explain(e)),
                };
                received.map_err(receive_failure)
            }
        };
        if let Err(f) = pumped {
            // Blocks already in flight are worth keeping (a resume reuses
            // them), but they land after the client hears why (`respond`).
            self.draining = Some(stager);
            return Err(f);
        }
        self.stager = Some(stager);
        Ok(())
    }

    /// Waits for every block to be staged.
    async fn finish(&mut self) -> Result<Staged, Failure> {
        let stager = self
            .stager
            .take()
            .ok_or_else(|| fail(Code::Internal, "no bytes were received"))?;
        let staged = stager.finish().await.map_err(stage_failure)?;
        let facts = Staged {
            sha256: hex::encode(staged.sha256),
            blocks: staged.ids.len() as u64,
            bytes_resumed: staged.bytes_resumed,
            bytes_received: staged.bytes_received,
        };
        self.staged = Some(staged);
        Ok(facts)
    }

    /// Publishes the staged bytes (storage checks the hashes once more).
    async fn commit(&mut self, expected: &[(&'static str, String)]) -> Result<Committed, Failure> {
        let staged = self
            .staged
            .take()
            .ok_or_else(|| fail(Code::Internal, "nothing was staged"))?;
        let t_commit = Instant::now();
        let expected: Vec<(&str, &str)> = expected.iter().map(|(w, h)| (*w, h.as_str())).collect();
        let published = self
            .upload
            .commit(&staged, &expected)
            .await
            .map_err(publish_failure)?;
        let props = published.props;
        // Set by this commit only: an earlier one's blob is as it was.
        let content_md5 = staged
            .md5
            .filter(|_| !published.earlier_commit)
            .map(hex::encode);
        let metrics = &self.shared.metrics;
        if staged.single.is_some() && !published.earlier_commit {
            // A one-block file reaches Azure in its Put Blob: count it as staged.
            Metrics::add(&metrics.bytes_staged, self.offer.size);
        }
        metrics.commit_seconds.observe(t_commit.elapsed());
        Ok(Committed {
            etag: props.etag,
            size: props.size,
            sha256: props.sha256.unwrap_or_default(),
            usage: self.usage(),
            earlier_commit: published.earlier_commit,
            content_md5,
        })
    }
}

/// A failure while receiving, as the peer hears it: its compressed chunks
/// refused (`bad_encoding`), no memory for its decoder (`busy`, as for a
/// block), or the stager's own failure.
fn receive_failure(e: ReceiveError) -> Failure {
    match e {
        ReceiveError::Decode(DecodeError::Refused(why)) => fail(
            Code::BadEncoding,
            format!("compressed chunks refused: {why}; nothing committed"),
        ),
        ReceiveError::Decode(DecodeError::Memory(e)) | ReceiveError::Stage(e) => stage_failure(e),
        ReceiveError::Decode(e @ DecodeError::EarlyFinish) => fail(Code::Internal, e.to_string()),
    }
}

/// The decoder's memory, taken when a transfer's first zstd chunk needs it as
/// a block's is: from the owner's share, then the budget, within the budget
/// wait (else a retryable `busy`, as for a block).
fn decoder_memory(shared: &Shared, owner: &Owner) -> crate::inflating::Reserve {
    let share = shared.share_of(owner);
    let budget = shared.budget.clone();
    let wait = shared.budget_wait;
    Box::new(move |bytes| {
        Box::pin(async move {
            let take = async {
                let a = share.take(bytes).await?;
                let b = budget.take(bytes).await?;
                Ok::<_, StageError>((a, b))
            };
            match tokio::time::timeout(wait, take).await {
                Ok(Ok(held)) => Ok(Box::new(held) as crate::inflating::Held),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(StageError::Busy(wait.as_secs())),
            }
        })
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
