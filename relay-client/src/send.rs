//! One file through the relay on one QUIC stream: Offer, Plan (with the same-source
//! check on resume), Start and bytes, Trailer, Receipt.

use std::collections::BTreeMap;
use std::time::Instant;

use indicatif::ProgressBar;
use quinn::Connection;
use sha2::{Digest, Sha256};
use shared::checkpoint::Checkpoint;
use shared::codec::{FrameError, read_frame, write_frame};
use shared::exchange::{EagerAnswer, eager_answer};
use shared::limits::PROTOCOL_VERSION;
use shared::protocol::{Message, Offer, Overwrite, Secret, Start, Trailer, app_error};

use crate::report::{Clocks, FileError};
use crate::source::{Snapshot, hash_prefix, read_range};
use crate::walk::Source;

/// What every file of one run shares.
#[derive(Debug, Clone)]
pub struct Options {
    pub token: Secret,
    pub container: String,
    pub overwrite: Overwrite,
    pub block_size: Option<u64>,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct Sent {
    pub bytes: u64,
    pub sha256: String,
    pub etag: String,
    pub bytes_resumed: u64,
    pub bytes_sent: u64,
    pub retries: u32,
    pub storage_requests: u32,
    pub clocks: Clocks,
    /// The relay's clocks (none from a relay that moved no bytes).
    pub relay_clocks: Option<shared::protocol::Timings>,
}

fn lost(e: impl std::fmt::Display) -> FileError {
    FileError::new("connection", format!("connection to relay lost: {e}"), true)
}

fn unreadable(e: std::io::Error) -> FileError {
    FileError::new("source", format!("cannot read: {e}"), false)
}

fn frame_err(what: &str, e: FrameError) -> FileError {
    match e {
        FrameError::Io(_) | FrameError::Closed | FrameError::Truncated => FileError::new(
            "connection",
            format!("{what}: connection to relay lost ({e})"),
            true,
        ),
        _ => FileError::new("protocol", format!("{what}: {e}"), false),
    }
}

pub async fn send_file(
    conn: &Connection,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
) -> Result<Sent, FileError> {
    match send_once(conn, src, opts, bar, None).await {
        // A blob by this name exists. If an earlier run (killed after the relay got
        // every byte) committed this very file, the re-run is done: prove it with
        // the file's SHA-256 and let the relay compare it with the blob's.
        Err(e) if e.code == "exists" && opts.overwrite == Overwrite::Never => {
            let sha256 = whole_file_sha256(src).await?;
            send_once(conn, src, opts, bar, Some(sha256)).await
        }
        other => other,
    }
}

async fn whole_file_sha256(src: &Source) -> Result<String, FileError> {
    let before = Snapshot::take(&src.path).map_err(unreadable)?;
    let h = hash_prefix(src.path.clone(), before.len)
        .await
        .map_err(unreadable)?;
    if Snapshot::take(&src.path).map_err(unreadable)? != before {
        return Err(FileError::new(
            "source_changed",
            "file changed while it was being hashed; nothing committed",
            false,
        ));
    }
    Ok(hex::encode(h.finalize()))
}

/// How one stream's attempt ended.
enum Attempt {
    Done(Sent),
    /// The relay has staged blocks for this file and did not read our eager bytes.
    ResumeOnNewStream,
}

/// Why the body (bytes and Trailer) stopped before the end.
enum StreamEnd {
    /// The source could not be read or changed: the file fails, nothing retried.
    Source(FileError),
    /// The stream or connection failed; the relay may have said why.
    Transport(FileError),
}

/// One file: an eager Offer (bytes follow at once, a round trip saved), or, with
/// `known_sha256` (the whole file's; the relay may answer with a Receipt and no
/// bytes), a plain one. If the relay has staged blocks to resume from, it
/// redirects the eager stream and the file is offered again, plainly, on a new
/// stream (`shared::exchange`).
async fn send_once(
    conn: &Connection,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
    known_sha256: Option<String>,
) -> Result<Sent, FileError> {
    let eager = known_sha256.is_none();
    if let Attempt::Done(sent) = attempt(conn, src, opts, bar, known_sha256.clone(), eager).await? {
        return Ok(sent);
    }
    match attempt(conn, src, opts, bar, known_sha256, false).await? {
        Attempt::Done(sent) => Ok(sent),
        Attempt::ResumeOnNewStream => Err(FileError::new(
            "protocol",
            "the relay redirected a stream that was not eager",
            false,
        )),
    }
}

async fn attempt(
    conn: &Connection,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
    known_sha256: Option<String>,
    eager: bool,
) -> Result<Attempt, FileError> {
    let t0 = Instant::now();
    let before = Snapshot::take(&src.path).map_err(unreadable)?;
    bar.set_length(before.len);
    let (mut send, mut recv) = conn.open_bi().await.map_err(lost)?;
    // Files go out in the order their streams opened, not interleaved: quinn
    // sends a higher priority's buffered data first and round-robins equal
    // ones. Interleaved, 128 small files in flight all finish at the end of
    // the window together and their Put Blobs reach storage as one burst while
    // the link idles; in order, each file is received whole early and
    // published while the next ones travel (issue 13).
    let order = i32::try_from(send.id().index()).map_or(i32::MIN, |i| -i);
    let _ = send.set_priority(order);
    let offer = Offer {
        version: PROTOCOL_VERSION,
        token: opts.token.clone(),
        container: opts.container.clone(),
        blob: src.blob.clone(),
        size: before.len,
        content_type: opts.content_type.clone(),
        metadata: opts.metadata.clone(),
        overwrite: opts.overwrite.clone(),
        sha256: known_sha256.clone(),
        block_size: opts.block_size,
        eager,
    };
    write_frame(&mut send, &Message::Offer(offer))
        .await
        .map_err(|e| frame_err("sending the Offer", e))?;

    let (start, sha256) = if eager {
        match eager_body(&mut send, &mut recv, src, &before, bar).await? {
            Some(sha256) => (0, sha256),
            None => return Ok(Attempt::ResumeOnNewStream),
        }
    } else {
        let plan = match read_frame(&mut recv)
            .await
            .map_err(|e| frame_err("reading the Plan", e))?
        {
            Message::Plan(p) => p,
            Message::Reject(f) => return Err(FileError::from_relay(f.code, f.message)),
            Message::Receipt(r) if known_sha256.is_some() => {
                let sha256 = known_sha256.unwrap_or_default();
                let _ = send.finish();
                return verified(r, sha256, before.len, 0, t0, Instant::now()).map(Attempt::Done);
            }
            other => return Err(unexpected("a Plan", &other)),
        };
        let (start, hasher) = resume_from(src, &plan, before.len).await?;
        write_frame(&mut send, &Message::Start(Start { offset: start }))
            .await
            .map_err(|e| frame_err("sending Start", e))?;
        bar.set_position(start);
        match send_body(&mut send, src, start, &before, hasher, bar).await {
            Ok(sha256) => (start, sha256),
            Err(StreamEnd::Source(e)) => return Err(e),
            // The relay may have stopped us with a reason; prefer its message.
            Err(StreamEnd::Transport(e)) => {
                return Err(relay_reason(&mut recv).await.unwrap_or(e));
            }
        }
    };
    let t_sent = Instant::now();

    let receipt = match read_frame(&mut recv)
        .await
        .map_err(|e| frame_err("reading the Receipt", e))?
    {
        Message::Receipt(r) => r,
        Message::Error(f) => return Err(FileError::from_relay(f.code, f.message)),
        other => return Err(unexpected("a Receipt", &other)),
    };
    verified(receipt, sha256, before.len, before.len - start, t0, t_sent).map(Attempt::Done)
}

/// The eager body: `Start{0}`, every byte and the Trailer go out at once, while the
/// relay's first frame is awaited. That frame alone decides the stream
/// (`shared::exchange`), whenever it arrives: before the first byte, mid-body, or
/// after the Trailer. `None`: redirected, re-offer on a new stream.
async fn eager_body(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    src: &Source,
    before: &Snapshot,
    bar: &ProgressBar,
) -> Result<Option<String>, FileError> {
    let mut body = Box::pin(async {
        write_frame(send, &Message::Start(Start { offset: 0 }))
            .await
            .map_err(|e| StreamEnd::Transport(frame_err("sending Start", e)))?;
        bar.set_position(0);
        send_body(send, src, 0, before, Sha256::new(), bar).await
    });
    let mut reading = Box::pin(read_frame(recv));
    let mut sent = None;
    let first = loop {
        tokio::select! {
            frame = &mut reading => break frame,
            // A failed write is not yet an answer: the relay's frame says why.
            done = &mut body, if sent.is_none() => match done {
                Err(StreamEnd::Source(e)) => return Err(e),
                other => sent = Some(other),
            },
        }
    };
    let answer = match first {
        Ok(frame) => eager_answer(&frame),
        Err(e) => return Err(frame_err("reading the Plan", e)),
    };
    let sent = match (answer, sent) {
        (EagerAnswer::Proceed, Some(sent)) => sent,
        (EagerAnswer::Proceed, None) => body.await,
        (EagerAnswer::Redirect { resume_offset }, _) => {
            drop(body);
            tracing::debug!(path = %src.path.display(), resume_offset, "relay has staged blocks; re-offering");
            let _ = send.reset(app_error::RESUME_ON_NEW_STREAM.into());
            return Ok(None);
        }
        (EagerAnswer::Refused(f), _) => {
            drop(body);
            let _ = send.reset(app_error::REJECTED.into());
            return Err(FileError::from_relay(f.code, f.message));
        }
        (EagerAnswer::Unexpected(name), _) => {
            return Err(FileError::new(
                "protocol",
                format!("expected a Plan, got {name}"),
                false,
            ));
        }
    };
    match sent {
        Ok(sha256) => Ok(Some(sha256)),
        Err(StreamEnd::Source(e)) => Err(e),
        Err(StreamEnd::Transport(e)) => {
            drop(reading);
            Err(relay_reason(recv).await.unwrap_or(e))
        }
    }
}

/// Sends bytes `[start, len)`, checks the source did not change, then the Trailer
/// with the SHA-256 of the whole file; returns that SHA-256 (hex).
async fn send_body(
    send: &mut quinn::SendStream,
    src: &Source,
    start: u64,
    before: &Snapshot,
    hasher: Sha256,
    bar: &ProgressBar,
) -> Result<String, StreamEnd> {
    let hasher = stream_bytes(send, src, start, before.len, hasher, bar).await?;
    let after = Snapshot::take(&src.path).map_err(|e| StreamEnd::Source(unreadable(e)))?;
    if &after != before {
        let _ = send.reset(app_error::CLIENT_ABORT.into());
        return Err(StreamEnd::Source(FileError::new(
            "source_changed",
            "file changed while it was being sent (size or modification time); nothing committed",
            false,
        )));
    }
    let sha256 = hex::encode(hasher.finalize());
    write_frame(
        send,
        &Message::Trailer(Trailer {
            sha256: sha256.clone(),
        }),
    )
    .await
    .map_err(|e| StreamEnd::Transport(frame_err("sending the Trailer", e)))?;
    let _ = send.finish();
    Ok(sha256)
}

fn unexpected(wanted: &str, got: &Message) -> FileError {
    FileError::new(
        "protocol",
        format!("expected {wanted}, got {}", got.name()),
        false,
    )
}

/// Where to start after a Plan: its resume offset if our own prefix hashes to the
/// relay's checkpoint (same-source check), else 0. Returns the hash state there.
async fn resume_from(
    src: &Source,
    plan: &shared::protocol::Plan,
    len: u64,
) -> Result<(u64, Sha256), FileError> {
    if plan.resume_offset == 0 || plan.resume_offset > len {
        return Ok((0, Sha256::new()));
    }
    let theirs = Checkpoint::from_hex(&plan.checkpoint);
    let ours = hash_prefix(src.path.clone(), plan.resume_offset)
        .await
        .map_err(unreadable)?;
    if theirs.is_some() && Checkpoint::of(&ours) == theirs {
        Ok((plan.resume_offset, ours))
    } else {
        tracing::info!(path = %src.path.display(), "staged blocks are from a different source; starting from zero");
        Ok((0, Sha256::new()))
    }
}

/// Sends the file's bytes `[start, len)`, hashing them on the way.
async fn stream_bytes(
    send: &mut quinn::SendStream,
    src: &Source,
    start: u64,
    len: u64,
    mut hasher: Sha256,
    bar: &ProgressBar,
) -> Result<Sha256, StreamEnd> {
    let mut chunks = read_range(src.path.clone(), start, len - start);
    while let Some(chunk) = chunks.recv().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = send.reset(app_error::CLIENT_ABORT.into());
                return Err(StreamEnd::Source(changed_or(e)));
            }
        };
        hasher.update(&chunk);
        let n = chunk.len() as u64;
        send.write_chunk(chunk)
            .await
            .map_err(|e| StreamEnd::Transport(lost(e)))?;
        bar.inc(n);
    }
    Ok(hasher)
}

/// Accepts a Receipt only if it names exactly the bytes this client read.
fn verified(
    receipt: shared::protocol::Receipt,
    sha256: String,
    len: u64,
    bytes_sent: u64,
    t0: Instant,
    t_sent: Instant,
) -> Result<Sent, FileError> {
    if !receipt.sha256.eq_ignore_ascii_case(&sha256) || receipt.size != len {
        return Err(FileError::new(
            "verify",
            format!(
                "relay receipt ({} bytes, sha256 {}) does not match the source ({len} bytes, {sha256})",
                receipt.size, receipt.sha256
            ),
            false,
        ));
    }
    let relay_clocks = (receipt.bytes_received > 0).then(|| receipt.timings.clone());
    Ok(Sent {
        bytes: len,
        sha256,
        etag: receipt.etag,
        bytes_resumed: receipt.bytes_resumed,
        bytes_sent,
        retries: receipt.retries,
        storage_requests: receipt.requests,
        clocks: Clocks {
            wait_ms: 0,
            transfer_ms: (t_sent - t0).as_millis() as u64,
            commit_ms: t_sent.elapsed().as_millis() as u64,
        },
        relay_clocks,
    })
}

fn changed_or(e: std::io::Error) -> FileError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FileError::new("source_changed", format!("{e}; nothing committed"), false)
    } else {
        FileError::new(
            "source",
            format!("read failed: {e}; nothing committed"),
            false,
        )
    }
}

/// After a failed write, the relay has usually sent an Error explaining why.
async fn relay_reason(recv: &mut quinn::RecvStream) -> Option<FileError> {
    let msg = tokio::time::timeout(std::time::Duration::from_secs(5), read_frame(recv))
        .await
        .ok()?
        .ok()?;
    match msg {
        Message::Error(f) | Message::Reject(f) => Some(FileError::from_relay(f.code, f.message)),
        _ => None,
    }
}
