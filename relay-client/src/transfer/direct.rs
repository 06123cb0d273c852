//! Direct mode: the same block planning, resume, verify-then-commit rules, straight
//! to Blob Storage over HTTPS with N Put Block requests in flight (AzCopy-like).
//! The fair baseline for the relay, and the fallback where UDP is blocked.

use std::sync::Arc;
use std::time::Instant;

use indicatif::ProgressBar;
use relay_pipeline::failure::{condition, publish_failure, stage_failure, storage_failure};
use relay_pipeline::in_the_way::may_be_ours;
use relay_pipeline::upload::{Probe, Upload};
use relay_proto::checkpoint::Checkpoint;
use relay_proto::id_key::{IdKey, Owner};
use relay_proto::plan::BlockPlan;
use relay_proto::resume::ResumePoint;
use relay_storage::account::Storage;
use relay_storage::blob::BlobWriter;
use relay_storage::publish::{Destination, PublishError, Published, Writer};
use relay_storage::staging::{Budget, StageError, Staged};
use tokio::io::AsyncSeekExt;

use crate::transfer::send::{Options, Sent};
use crate::transfer::send_failure::unreadable;
use crate::transfer::source::{Snapshot, hash_prefix, open};
use crate::transfer::walk::Source;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::{ClientTimings, FileError, Spent};

pub struct Direct {
    pub storage: Storage,
    /// Signs this user's block IDs and seals (see `direct_key`): direct mode
    /// resumes, and treats as already committed, only what this key made.
    pub id_key: IdKey,
    pub budget: Budget,
    /// Put Block requests in flight per file (`direct_sizing`).
    pub connections: usize,
    pub block_size: u64,
    /// The storage round trip measured at setup (sizes the two above).
    pub storage_rtt: Option<std::time::Duration>,
    /// `--fallback direct` took over from an unreachable relay.
    pub fell_back: bool,
}

fn relay_like(f: relay_proto::protocol::Failure) -> FileError {
    FileError::from_relay(f.code, f.message).with_existing(f.existing)
}

pub async fn upload_file(
    d: &Direct,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
) -> Result<Sent, FileError> {
    let t0 = Instant::now();
    let before = Snapshot::take(&src.path, src.reading).map_err(unreadable)?;
    bar.set_length(before.len);
    let plan = BlockPlan::new(before.len, opts.block_size.unwrap_or(d.block_size))
        .map_err(|e| FileError::new(ErrorCode::TooLarge, e.to_string(), false))?;
    let writer = Arc::new(
        d.storage
            .writer(&opts.container, &src.blob)
            .map_err(|e| relay_like(storage_failure(&e)))?,
    );
    let condition = condition(&opts.overwrite);
    let owner = Owner::direct();
    let dest = Destination {
        container: &opts.container,
        blob: &src.blob,
        key: &d.id_key,
        // Direct mode holds the account's own credentials: what storage lets
        // it write, it can read (a write-only SAS fails the properties
        // request itself, at storage, not here).
        writer: Writer {
            owner: &owner,
            reads: true,
        },
        size: before.len,
        content_type: opts.content_type.as_deref(),
        metadata: &opts.metadata,
        condition: &condition,
    };
    let upload = Upload::new(writer.clone(), dest, plan).with_whole_md5(opts.put_md5);
    let point = match resume_point(&upload, src).await? {
        Prepared::From(point) => point,
        // As through the relay: a re-run whose file is already the committed blob
        // succeeds with nothing sent (also a replacement whose own commit moved
        // the etag before its answer was lost).
        Prepared::InTheWay(refusal) => {
            return already_there(&upload, src, &before, &writer, t0, refusal).await;
        }
    };
    let staged = stage(d, &upload, src, point, bar).await?;
    let t_sent = Instant::now();
    unchanged(src, &before)?;
    let published = commit(&upload, src, &staged).await.map_err(|e| {
        e.with_spent(Spent {
            bytes_sent: staged.bytes_received,
            storage_requests: writer.requests(),
        })
    })?;
    Ok(Sent {
        bytes: before.len,
        sha256: hex::encode(staged.sha256),
        etag: published.props.etag,
        bytes_resumed: staged.bytes_resumed,
        bytes_sent: staged.bytes_received,
        wire_bytes: None,
        retries: writer.retries(),
        storage_requests: writer.requests(),
        timings: ClientTimings {
            wait_ms: 0,
            transfer_ms: (t_sent - t0).as_millis() as u64,
            commit_ms: t_sent.elapsed().as_millis() as u64,
        },
        relay_timings: None,
        // A small file is not probed first: its Put Blob found the blob
        // already holding it (an earlier run's commit).
        identical: published.earlier_commit,
        content_md5: staged
            .md5
            .filter(|_| !published.earlier_commit)
            .map(hex::encode),
        reconnects: 0,
        abandoned: Some(writer.abandoned()),
    })
}

/// What `prepare` found.
enum Prepared {
    /// Stage from here.
    From(ResumePoint),
    /// A blob is in the way that may be this very file's commit
    /// (`relay_pipeline::in_the_way`).
    InTheWay(PublishError),
}

/// Where staging starts: the staged blocks' resume point when they came from
/// this same file, else the beginning.
async fn resume_point(upload: &Upload<'_>, src: &Source) -> Result<Prepared, FileError> {
    let point = match upload.prepare(Probe::UnlessSmall).await {
        Ok(point) => point,
        // Worth hashing the file for one look at the blob (`already_there`).
        Err(e) if may_be_ours(&e) => return Ok(Prepared::InTheWay(e)),
        Err(e) => return Err(relay_like(publish_failure(e))),
    };
    if point.offset > 0 && !same_prefix(src, &point).await? {
        return Ok(Prepared::From(ResumePoint::fresh()));
    }
    Ok(Prepared::From(point))
}

/// Stages the file from `point` on, `d.connections` Put Blocks in flight.
async fn stage(
    d: &Direct,
    upload: &Upload<'_>,
    src: &Source,
    point: ResumePoint,
    bar: &ProgressBar,
) -> Result<Staged, FileError> {
    let mut reader = open_at(src, point.offset).await?;
    // As through the relay, the bar counts what storage accepted.
    bar.set_position(point.offset);
    let staged_bar = bar.clone();
    let mut stager = upload
        .stager(point, d.budget.clone(), d.connections)
        .map_err(|e| relay_like(stage_failure(e)))?
        .with_on_staged(std::sync::Arc::new(move |len| staged_bar.inc(len)));
    stager.pump(&mut reader).await.map_err(|e| match e {
        StageError::Truncated { .. } => FileError::new(
            ErrorCode::SourceChanged,
            "file shrank while it was being read; nothing committed",
            false,
        ),
        other => relay_like(stage_failure(other)),
    })?;
    stager
        .finish()
        .await
        .map_err(|e| relay_like(stage_failure(e)))
}

/// Commits what was staged, if its SHA-256 matches. A manifest's hash
/// (`--checksums`) is a precondition of the commit.
async fn commit(
    upload: &Upload<'_>,
    src: &Source,
    staged: &Staged,
) -> Result<Published, FileError> {
    let manifest: Vec<(&str, &str)> = src
        .sha256
        .as_deref()
        .map(|h| ("the manifest", h))
        .into_iter()
        .collect();
    upload
        .commit(staged, &manifest)
        .await
        .map_err(|e| relay_like(publish_failure(e)))
}

/// Fails the file if it changed (size or modification time) while it was read:
/// what was staged may not be the file's bytes at any one moment.
fn unchanged(src: &Source, before: &Snapshot) -> Result<(), FileError> {
    let after = Snapshot::take(&src.path, src.reading).map_err(unreadable)?;
    if &after != before {
        return Err(FileError::new(
            ErrorCode::SourceChanged,
            "file changed while it was being sent (size or modification time); nothing committed",
            false,
        ));
    }
    Ok(())
}

/// Whether our own first `point.offset` bytes hash to the staged blocks'
/// checkpoint (resume only the same source).
async fn same_prefix(src: &Source, point: &ResumePoint) -> Result<bool, FileError> {
    let ours = hash_prefix(src.path.clone(), src.reading, point.offset)
        .await
        .map_err(unreadable)?;
    Ok(Checkpoint::of(&ours) == Some(point.checkpoint))
}

/// The file, read from `start`.
async fn open_at(src: &Source, start: u64) -> Result<tokio::fs::File, FileError> {
    let (path, how) = (src.path.clone(), src.reading);
    let file = tokio::task::spawn_blocking(move || open(&path, how))
        .await
        .map_err(|e| FileError::new(ErrorCode::Internal, e.to_string(), false))?
        .map_err(unreadable)?;
    let mut file = tokio::fs::File::from_std(file);
    file.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(|e| FileError::new(ErrorCode::Source, format!("cannot seek: {e}"), false))?;
    Ok(file)
}

/// The blob is in the way: success if it already holds exactly this file (sealed
/// by our key), else `refusal`.
async fn already_there(
    upload: &Upload<'_>,
    src: &Source,
    before: &Snapshot,
    writer: &BlobWriter,
    t0: Instant,
    refusal: PublishError,
) -> Result<Sent, FileError> {
    let ours = hash_prefix(src.path.clone(), src.reading, before.len)
        .await
        .map_err(unreadable)?;
    let sha256 = hex::encode(sha2::Digest::finalize(ours));
    let props = upload
        .ours_in_the_way(refusal, &sha256)
        .await
        .map_err(|e| relay_like(publish_failure(e)))?;
    Ok(Sent {
        bytes: before.len,
        sha256,
        etag: props.etag,
        bytes_resumed: before.len,
        bytes_sent: 0,
        wire_bytes: None,
        retries: writer.retries(),
        storage_requests: writer.requests(),
        timings: ClientTimings {
            wait_ms: 0,
            transfer_ms: t0.elapsed().as_millis() as u64,
            commit_ms: 0,
        },
        relay_timings: None,
        identical: true,
        content_md5: None,
        reconnects: 0,
        abandoned: Some(writer.abandoned()),
    })
}
