//! The storage steps one upload's session asks for (`upload::run`): prepare,
//! receive, finish staging, commit. Each answers with the session's event;
//! the decisions are the session's (`relay_proto::session::relay`) and the
//! shared pipeline's (`relay_pipeline`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::RecvStream;
use relay_pipeline::failure::{publish_failure, stage_failure};
use relay_pipeline::upload::{Probe, Upload};
use relay_proto::id_key::Owner;
use relay_proto::protocol::{Code, Encoding, Failure, Offer};
use relay_proto::resume::ResumePoint;
use relay_proto::session::relay::{Committed, Prepared, Staged, Usage};
use relay_storage::blob::BlobWriter;
use relay_storage::staging::{StageError, StageLimits, Stager};

use crate::state::Shared;
use crate::telemetry::metrics::Metrics;
use crate::transfer::inflating::{DecodeError, Inflating, ReceiveError};

/// How long a peer may send no file bytes before its transfer is dropped (its
/// block buffer goes back to the budget; staged blocks stay for a resume).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// What the driver holds for one transfer between the session's actions.
pub(super) struct Io<'a> {
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
    /// A stager that failed to receive, with blocks still in flight.
    draining: Option<Stager>,
}

impl<'a> Io<'a> {
    pub(super) fn new(
        shared: &'a Shared,
        offer: &'a Offer,
        writer: Arc<BlobWriter>,
        upload: Upload<'a>,
        owner: Owner,
    ) -> Self {
        Self {
            shared,
            offer,
            writer,
            upload,
            owner,
            resume: None,
            stager: None,
            staged: None,
            progress: offer.progress.then(|| tokio::sync::watch::channel(0).0),
            draining: None,
        }
    }

    /// Bytes of the file staged so far, as they change (when the Offer asked).
    pub(super) fn progress(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.progress.as_ref().map(|p| p.subscribe())
    }

    /// A stager that failed to receive, whose blocks in flight are to land
    /// after the client heard why.
    pub(super) fn take_draining(&mut self) -> Option<Stager> {
        self.draining.take()
    }

    pub(super) fn usage(&self) -> Usage {
        Usage {
            retries: self.writer.retries(),
            requests: self.writer.requests(),
        }
    }

    /// Fail before any byte moves if the commit is bound to be refused; unless the
    /// client proved (with the SHA-256 of its whole file) that the blob already
    /// holds its bytes: then a re-run after an interrupted run is a success with
    /// nothing sent.
    pub(super) async fn prepare(&mut self) -> Result<Prepared, Failure> {
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
        // The blob in the way may be a commit of exactly these bytes, an earlier
        // run's or this upload's own whose Receipt was lost; only an Offer with
        // the file's SHA-256 can tell.
        let Some(sha) = &self.offer.sha256 else {
            return Err(publish_failure(e));
        };
        match self.upload.ours_in_the_way(e, sha).await {
            Ok(props) => {
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
            Err(e) => Err(publish_failure(e)),
        }
    }

    /// Cuts the stream's bytes into blocks and stages them, from the resume point
    /// or from zero.
    pub(super) async fn receive(
        &mut self,
        from_resume_point: bool,
        encoding: Option<Encoding>,
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
            .stager(
                point,
                shared.limits.budget.clone(),
                shared.storage.blocks_in_flight,
            )
            .map_err(|e| Failure::new(Code::Internal, e.to_string()))?;
        let mut stager = stager
            .with_mangle(shared.mangle())
            .with_pace(shared.pace())
            .with_stop(shared.stopping.clone())
            .with_limits(StageLimits {
                idle: Some(IDLE_TIMEOUT),
                budget_wait: Some(shared.limits.budget_wait),
                min_fill_bytes_per_s: Some(shared.limits.block_fill.min_bytes_per_s),
                fill_grace: shared.limits.block_fill.grace,
            })
            .with_share(shared.share_of(&self.owner))
            .with_staged_bytes(shared.metrics.bytes_staged.clone())
            .with_received_bytes(shared.metrics.bytes_received.clone());
        if let Some(f) = on_staged {
            stager = stager.with_on_staged(f);
        }
        // The session let a compressed Start through only where the handshake
        // agreed on it.
        let pumped = match encoding {
            None => stager.pump(recv).await.map_err(stage_failure),
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
    pub(super) async fn finish(&mut self) -> Result<Staged, Failure> {
        let stager = self
            .stager
            .take()
            .ok_or_else(|| Failure::new(Code::Internal, "no bytes were received"))?;
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
    pub(super) async fn commit(
        &mut self,
        expected: &[(&'static str, String)],
    ) -> Result<Committed, Failure> {
        let staged = self
            .staged
            .take()
            .ok_or_else(|| Failure::new(Code::Internal, "nothing was staged"))?;
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
        ReceiveError::Decode(DecodeError::Refused(why)) => Failure::new(
            Code::BadEncoding,
            format!("compressed chunks refused: {why}; nothing committed"),
        ),
        ReceiveError::Decode(DecodeError::Memory(e)) | ReceiveError::Stage(e) => stage_failure(e),
        ReceiveError::Decode(e @ DecodeError::EarlyFinish) => {
            Failure::new(Code::Internal, e.to_string())
        }
    }
}

/// The decoder's memory, taken when a transfer's first zstd chunk needs it as
/// a block's is: from the owner's share, then the budget, within the budget
/// wait (else a retryable `busy`, as for a block).
fn decoder_memory(shared: &Shared, owner: &Owner) -> crate::transfer::inflating::Reserve {
    let share = shared.share_of(owner);
    let budget = shared.limits.budget.clone();
    let wait = shared.limits.budget_wait;
    Box::new(move |bytes| {
        Box::pin(async move {
            let take = async {
                let a = share.take(bytes).await?;
                let b = budget.take(bytes).await?;
                Ok::<_, StageError>((a, b))
            };
            match tokio::time::timeout(wait, take).await {
                Ok(Ok(held)) => Ok(Box::new(held) as crate::transfer::inflating::Held),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(StageError::Busy(wait.as_secs())),
            }
        })
    })
}
