//! Direct mode: the same block planning, resume, verify-then-commit rules, straight
//! to Blob Storage over HTTPS with N Put Block requests in flight (AzCopy-like).
//! The fair baseline for the relay, and the fallback where UDP is blocked.

use std::sync::Arc;
use std::time::Instant;

use indicatif::ProgressBar;
use relay_proto::block_id::{IdSigner, TransferTag};
use relay_proto::checkpoint::Checkpoint;
use relay_proto::id_key::{IdKey, Owner};
use relay_proto::plan::BlockPlan;
use relay_proto::resume::{ResumePoint, find_resume_point};
use relay_storage::blob::Storage;
use relay_storage::publish::{
    Destination, already_committed, commit_verified, preflight, stage_failure, storage_failure,
};
use relay_storage::staging::{Budget, Stager};
use tokio::io::AsyncSeekExt;

use crate::report::{Clocks, FileError};
use crate::send::{Options, Sent};
use crate::source::{Snapshot, hash_prefix};
use crate::walk::Source;

pub struct Direct {
    pub storage: Storage,
    /// Signs this user's block IDs and seals (see `direct_key`): direct mode
    /// resumes, and treats as already committed, only what this key made.
    pub id_key: IdKey,
    pub budget: Budget,
    pub connections: usize,
    pub block_size: u64,
}

fn relay_like(f: relay_proto::protocol::Failure) -> FileError {
    FileError::from_relay(f.code, f.message)
}

pub async fn upload_file(
    d: &Direct,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
) -> Result<Sent, FileError> {
    let t0 = Instant::now();
    let before = Snapshot::take(&src.path)
        .map_err(|e| FileError::new("source", format!("cannot read: {e}"), false))?;
    bar.set_length(before.len);
    let plan = BlockPlan::new(before.len, opts.block_size.unwrap_or(d.block_size))
        .map_err(|e| FileError::new("too_large", e.to_string(), false))?;
    let writer = Arc::new(
        d.storage
            .writer(&opts.container, &src.blob)
            .map_err(|e| relay_like(storage_failure(&e)))?,
    );
    let dest = Destination {
        container: &opts.container,
        blob: &src.blob,
        key: &d.id_key,
        size: before.len,
        content_type: opts.content_type.as_deref(),
        metadata: &opts.metadata,
        overwrite: &opts.overwrite,
    };
    if let Err(f) = preflight(&writer, &opts.overwrite).await {
        // As through the relay: a re-run whose file is already the committed blob
        // succeeds with nothing sent.
        if f.code != relay_proto::protocol::Code::Exists {
            return Err(relay_like(f));
        }
        let ours = hash_prefix(src.path.clone(), before.len)
            .await
            .map_err(|e| FileError::new("source", format!("cannot read: {e}"), false))?;
        let sha256 = hex::encode(sha2::Digest::finalize(ours));
        let Some(props) = already_committed(&writer, &dest, &sha256)
            .await
            .map_err(relay_like)?
        else {
            return Err(relay_like(f));
        };
        return Ok(Sent {
            bytes: before.len,
            sha256,
            etag: props.etag,
            bytes_resumed: before.len,
            bytes_sent: 0,
            retries: writer.retries(),
            storage_requests: writer.requests(),
            clocks: Clocks {
                wait_ms: 0,
                transfer_ms: t0.elapsed().as_millis() as u64,
                commit_ms: 0,
            },
            relay_clocks: None,
        });
    }

    let tag = TransferTag::derive(
        &d.id_key,
        &Owner::direct(),
        &opts.container,
        &src.blob,
        before.len,
        plan.block_size,
    );
    let signer = IdSigner::new(d.id_key.clone(), tag);
    let uncommitted = writer
        .uncommitted_blocks()
        .await
        .map_err(|e| relay_like(storage_failure(&e)))?;
    let mut point = find_resume_point(
        &plan,
        &signer,
        uncommitted.iter().map(|(i, s)| (i.as_slice(), *s)),
    );
    if point.offset > 0 {
        let ours = hash_prefix(src.path.clone(), point.offset)
            .await
            .map_err(|e| FileError::new("source", format!("cannot read: {e}"), false))?;
        if Checkpoint::of(&ours) != Some(point.checkpoint) {
            point = ResumePoint::fresh();
        }
    }
    let start = point.offset;
    bar.set_position(start);

    let mut file = tokio::fs::File::open(&src.path)
        .await
        .map_err(|e| FileError::new("source", format!("cannot open: {e}"), false))?;
    file.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(|e| FileError::new("source", format!("cannot seek: {e}"), false))?;
    let mut reader = ProgressReader {
        inner: file,
        bar: bar.clone(),
    };
    let mut stager = Stager::new(
        writer.clone(),
        plan,
        signer,
        point,
        d.budget.clone(),
        d.connections,
    )
    .map_err(|e| relay_like(stage_failure(e)))?;
    stager.pump(&mut reader).await.map_err(|e| match e {
        relay_storage::staging::StageError::Truncated { .. } => FileError::new(
            "source_changed",
            "file shrank while it was being read; nothing committed",
            false,
        ),
        other => relay_like(stage_failure(other)),
    })?;
    let staged = stager
        .finish()
        .await
        .map_err(|e| relay_like(stage_failure(e)))?;
    let t_sent = Instant::now();
    let after = Snapshot::take(&src.path)
        .map_err(|e| FileError::new("source", format!("cannot read: {e}"), false))?;
    if after != before {
        return Err(FileError::new(
            "source_changed",
            "file changed while it was being sent (size or modification time); nothing committed",
            false,
        ));
    }
    let props = commit_verified(&writer, &staged, &[], &dest)
        .await
        .map_err(relay_like)?;
    Ok(Sent {
        bytes: before.len,
        sha256: hex::encode(staged.sha256),
        etag: props.etag,
        bytes_resumed: staged.bytes_resumed,
        bytes_sent: staged.bytes_received,
        retries: writer.retries(),
        storage_requests: writer.requests(),
        clocks: Clocks {
            wait_ms: 0,
            transfer_ms: (t_sent - t0).as_millis() as u64,
            commit_ms: t_sent.elapsed().as_millis() as u64,
        },
        relay_clocks: None,
    })
}

/// Advances the progress bar as the stager reads the file.
struct ProgressReader<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for ProgressReader<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.bar.inc(n as u64);
        r
    }
}
