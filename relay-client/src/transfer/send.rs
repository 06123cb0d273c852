//! One file through the relay: the driver of `relay_proto::session::client`. The
//! session decides which Offer goes next (eager, plain after a redirect, with the
//! file's SHA-256 after "exists"), where a plain stream starts and whether the
//! Receipt names our bytes; this module moves the bytes and frames of each stream
//! (Offer, Plan, Start and bytes, Trailer, Receipt).

use std::collections::BTreeMap;
use std::time::Instant;

use indicatif::ProgressBar;
use quinn::{Connection, RecvStream, SendStream};
use relay_proto::checkpoint::Checkpoint;
use relay_proto::codec::FrameError;
use relay_proto::exchange::{EagerAnswer, eager_answer};
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{
    Encoding, Message, Offer, Overwrite, Receipt, Start, Trailer, app_error,
};
use relay_proto::session::client::{
    Action, ClientSession, Event, Failed, Replaces, StreamEnd, prefix_to_check, start_offset,
};
use relay_transport::frames::{read_frame, write_frame};
use sha2::{Digest, Sha256};

use crate::relay::open_turns::OpenTurns;
use crate::transfer::compress::Mode;
use crate::transfer::priority::{Order, stream_priority};
pub use crate::transfer::send_failure::sign_in_failed;
use crate::transfer::send_failure::{changed_or, frame_err, lost, unexpected, unreadable};
use crate::transfer::source::{Snapshot, hash_prefix, read_range_with};
use crate::transfer::walk::Source;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::{ClientTimings, FileError, Spent};

/// What every file of one run shares.
#[derive(Debug, Clone)]
pub struct Options {
    /// What each Offer carries: a static token, or an Entra ID token kept fresh.
    pub token: crate::sign_in::Bearer,
    pub container: String,
    pub overwrite: Overwrite,
    pub block_size: Option<u64>,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Ask for a Content-MD5 of every byte on each committed blob.
    pub put_md5: bool,
    /// `--compress`: used only on a connection where both ends announced it.
    pub compress: Mode,
    /// Which files' bytes go first on a connection (`priority`).
    pub order: Order,
}

#[derive(Debug, Clone)]
pub struct Sent {
    pub bytes: u64,
    pub sha256: String,
    pub etag: String,
    pub bytes_resumed: u64,
    pub bytes_sent: u64,
    /// Compressed on the wire: the bytes that carried `bytes_sent`.
    pub wire_bytes: Option<u64>,
    pub retries: u32,
    pub storage_requests: u32,
    pub timings: ClientTimings,
    /// The relay's timings (none from a relay that moved no bytes).
    pub relay_timings: Option<relay_proto::protocol::Timings>,
    /// The blob already held exactly these bytes (the relay checked its seal):
    /// nothing was sent or committed.
    pub identical: bool,
    /// The Content-MD5 (hex) this upload's commit gave the blob (`--put-md5`).
    pub content_md5: Option<String>,
    /// Times the file went on over a new connection after the network went
    /// away (set by the retry loop, `crate::transfer::file`).
    pub reconnects: u32,
    /// Direct mode: storage requests its watch gave up (`watch.rs`).
    pub abandoned: Option<relay_storage::retry::Abandoned>,
}

pub async fn send_file(
    conn: &Connection,
    turns: &OpenTurns,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
) -> Result<Sent, FileError> {
    let size = Snapshot::take(&src.path, src.reading)
        .map_err(unreadable)?
        .len;
    // With a manifest's hash (`--checksums`) the first Offer already carries it.
    let (mut session, mut action) =
        ClientSession::with_sha256(size, Replaces::from(&opts.overwrite), src.sha256.clone());
    let mut last: Option<Stream> = None;
    // Every stream's bytes, for the report of a file that fails.
    let mut bytes_sent = 0;
    loop {
        let event = match action {
            Action::Offer { eager, sha256 } => {
                let (end, stream) = attempt(conn, turns, src, opts, bar, sha256, eager).await?;
                bytes_sent += stream.bytes_sent;
                last = Some(stream);
                Event::Stream(end)
            }
            Action::HashWholeFile => Event::WholeFileHashed(whole_file_sha256(src).await?),
            Action::Done(receipt) => {
                let stream = last.ok_or_else(|| {
                    FileError::new(ErrorCode::Protocol, "a Receipt without a stream", false)
                })?;
                return Ok(stream.sent(receipt));
            }
            Action::Fail(Failed::Relay(f)) => {
                let spent = Spent {
                    bytes_sent,
                    storage_requests: f.requests.unwrap_or(0),
                };
                return Err(FileError::from_relay(f.code, f.message)
                    .with_existing(f.existing)
                    .with_spent(spent));
            }
            Action::Fail(Failed::Protocol(m)) => {
                return Err(FileError::new(ErrorCode::Protocol, m, false));
            }
            Action::Fail(Failed::Verify(m)) => {
                return Err(FileError::new(ErrorCode::Verify, m, false));
            }
        };
        action = session.handle(event);
    }
}

async fn whole_file_sha256(src: &Source) -> Result<String, FileError> {
    let before = Snapshot::take(&src.path, src.reading).map_err(unreadable)?;
    let h = hash_prefix(src.path.clone(), src.reading, before.len)
        .await
        .map_err(unreadable)?;
    if Snapshot::take(&src.path, src.reading).map_err(unreadable)? != before {
        return Err(FileError::new(
            ErrorCode::SourceChanged,
            "file changed while it was being hashed; nothing committed",
            false,
        ));
    }
    Ok(hex::encode(h.finalize()))
}

/// One stream's facts, for the file's report once its Receipt is accepted.
struct Stream {
    sha256: String,
    len: u64,
    bytes_sent: u64,
    wire_bytes: Option<u64>,
    /// The relay answered the Offer's SHA-256 with a Receipt, no bytes sent.
    identical: bool,
    t0: Instant,
    t_sent: Instant,
}

impl Stream {
    fn sent(self, receipt: Receipt) -> Sent {
        let relay_timings = (receipt.bytes_received > 0).then(|| receipt.timings.clone());
        Sent {
            bytes: self.len,
            sha256: self.sha256,
            etag: receipt.etag,
            bytes_resumed: receipt.bytes_resumed,
            bytes_sent: self.bytes_sent,
            wire_bytes: self.wire_bytes,
            retries: receipt.retries,
            storage_requests: receipt.requests,
            timings: ClientTimings {
                wait_ms: 0,
                transfer_ms: (self.t_sent - self.t0).as_millis() as u64,
                commit_ms: self.t_sent.elapsed().as_millis() as u64,
            },
            relay_timings,
            // Or the relay's Put Blob of a small file (not probed first) found
            // an earlier commit of exactly these bytes.
            identical: self.identical || receipt.earlier_commit,
            content_md5: receipt.content_md5,
            reconnects: 0,
            abandoned: None,
        }
    }
}

/// How a stream's bytes travel: `encoding` from the Start, `mode` for the
/// encoder's choices.
#[derive(Debug)]
struct Wire {
    encoding: Option<Encoding>,
    mode: Mode,
    /// Wire bytes of the file's chunks sent so far.
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Whose congestion state tells the encoder the link's pace.
    conn: Connection,
}

/// Why the body (bytes and Trailer) stopped before the end.
enum BodyEnd {
    /// The source could not be read or changed: the file fails, nothing retried.
    Source(FileError),
    /// The stream or connection failed; the relay may have said why.
    Transport(FileError),
}

/// One stream: an eager Offer (bytes follow at once, a round trip saved), or a
/// plain one, with `known_sha256` (the whole file's) when the relay may answer
/// with a Receipt and no bytes. Returns how the relay ended the stream; a lost
/// connection or an unreadable source is an error.
async fn attempt(
    conn: &Connection,
    turns: &OpenTurns,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
    known_sha256: Option<String>,
    eager: bool,
) -> Result<(StreamEnd, Stream), FileError> {
    let t0 = Instant::now();
    let before = Snapshot::take(&src.path, src.reading).map_err(unreadable)?;
    bar.set_length(before.len);
    // Compressed chunks only where both ends announced them (version skew
    // either way: plain, no error).
    let how = Wire {
        encoding: (opts.compress != Mode::Off && relay_transport::tls::agreed_zstd(conn))
            .then_some(Encoding::Zstd),
        mode: opts.compress,
        sent: Default::default(),
        conn: conn.clone(),
    };

    let (mut send, mut recv) = offer(
        conn,
        turns,
        src,
        opts,
        before.len,
        known_sha256.clone(),
        eager,
    )
    .await?;
    let stream = Stream {
        sha256: known_sha256.clone().unwrap_or_default(),
        len: before.len,
        bytes_sent: 0,
        wire_bytes: None,
        identical: false,
        t0,
        t_sent: t0,
    };
    let body = if eager {
        eager_body(&mut send, &mut recv, src, &before, bar, &how).await?
    } else {
        plain_body(&mut send, &mut recv, src, &before, bar, known_sha256, &how).await?
    };
    answered(stream, body, &how)
}

/// Opens the file's stream (in the order files started: `stream_priority`)
/// and sends its Offer, with a token that has life left.
async fn offer(
    conn: &Connection,
    turns: &OpenTurns,
    src: &Source,
    opts: &Options,
    size: u64,
    known_sha256: Option<String>,
    eager: bool,
) -> Result<(SendStream, RecvStream), FileError> {
    let (mut send, recv) = turns.open_bi(conn).await.map_err(lost)?;
    // Files go out in the order their streams opened, not interleaved: quinn
    // sends a higher priority's buffered data first and round-robins equal
    // ones. Interleaved, 128 small files in flight all finish at the end of
    // the window together and their Put Blobs reach storage as one burst while
    // the link idles; in order, each file is received whole early and
    // published while the next ones travel. A watch puts one-block files
    // ahead of bigger ones (`priority`).
    let order = stream_priority(opts.order, send.id().index(), size, opts.block_size);
    let _ = send.set_priority(order);
    // Asked per Offer: a file resumed over a new connection, and every later
    // file, goes with a token that has life left (`sign_in::bearer`).
    let token = opts.token.current().await.map_err(sign_in_failed)?;
    let offer = Offer {
        version: PROTOCOL_VERSION,
        token,
        container: opts.container.clone(),
        blob: src.blob.clone(),
        size,
        content_type: opts.content_type.clone(),
        metadata: opts.metadata.clone(),
        overwrite: opts.overwrite.clone(),
        sha256: known_sha256,
        block_size: opts.block_size,
        eager,
        put_md5: opts.put_md5,
        progress: true,
    };
    write_frame(&mut send, &Message::Offer(offer))
        .await
        .map_err(|e| frame_err("sending the Offer", e))?;
    Ok((send, recv))
}

/// How the relay ended the stream after its body: a Receipt, a refusal, or
/// (before the body was through) whatever ended it.
fn answered(mut stream: Stream, body: Body, how: &Wire) -> Result<(StreamEnd, Stream), FileError> {
    let (start, answer) = match body {
        Body::Answered {
            start,
            sha256,
            sent_at,
            answer,
        } => {
            stream.sha256 = sha256;
            stream.t_sent = sent_at;
            (start, answer)
        }
        Body::Ended(end) => {
            stream.t_sent = Instant::now();
            // A Receipt instead of a Plan: the blob already holds this file.
            stream.identical = matches!(end, StreamEnd::Receipt { .. });
            return Ok((end, stream));
        }
    };
    stream.bytes_sent = stream.len - start;
    stream.wire_bytes = how
        .encoding
        .map(|_| how.sent.load(std::sync::atomic::Ordering::Relaxed));
    let end = match answer {
        Message::Receipt(receipt) => StreamEnd::Receipt {
            receipt,
            sha256: stream.sha256.clone(),
        },
        Message::Error(f) => StreamEnd::Refused(f),
        other => return Err(unexpected("a Receipt", &other)),
    };
    Ok((end, stream))
}

/// How a stream's body went: every byte and the Trailer sent from `start` and
/// the relay's answer (a Receipt or an Error), or the relay ended the stream
/// before the body was through.
enum Body {
    Answered {
        start: u64,
        sha256: String,
        /// When the Trailer went out (the end of `transfer_ms`).
        sent_at: Instant,
        answer: Message,
    },
    Ended(StreamEnd),
}

/// How long a stream whose write failed waits for the relay's reason.
const REASON_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the relay's next frame that is not a `Progress`; each `Progress`
/// moves the file's bar to the bytes the relay has staged, so the bar counts
/// what storage holds, not what is queued in QUIC.
async fn answer(recv: &mut quinn::RecvStream, bar: &ProgressBar) -> Result<Message, FrameError> {
    loop {
        match read_frame(recv).await? {
            Message::Progress(p) => {
                let staged = p.staged.min(bar.length().unwrap_or(u64::MAX));
                if staged > bar.position() {
                    bar.set_position(staged);
                }
            }
            other => return Ok(other),
        }
    }
}

/// Sends the body (bytes and Trailer, `send_body`) while reading the relay's
/// answer: its `Progress` frames as they come, then its Receipt or Error,
/// which may come early (a refusal mid-body ends the body).
async fn body_and_answer(
    body: impl Future<Output = Result<String, BodyEnd>>,
    reading: impl Future<Output = Result<Message, FrameError>>,
    start: u64,
) -> Result<Body, FileError> {
    tokio::pin!(body);
    tokio::pin!(reading);
    let mut sent: Option<(String, Instant)> = None;
    let frame = loop {
        tokio::select! {
            frame = &mut reading => break frame,
            done = &mut body, if sent.is_none() => match done {
                Ok(sha256) => sent = Some((sha256, Instant::now())),
                Err(BodyEnd::Source(e)) => return Err(e),
                // The relay may have stopped us with a reason; prefer its message.
                Err(BodyEnd::Transport(e)) => {
                    return match tokio::time::timeout(REASON_WAIT, &mut reading).await {
                        Ok(Ok(Message::Error(f) | Message::Reject(f))) => {
                            Ok(Body::Ended(StreamEnd::Refused(f)))
                        }
                        _ => Err(e),
                    };
                }
            },
        }
    };
    let answer = match frame {
        // After the whole body, an Error answers it: the bytes went (the
        // report counts them).
        Ok(Message::Error(f)) if sent.is_some() => Message::Error(f),
        Ok(Message::Error(f) | Message::Reject(f)) => {
            return Ok(Body::Ended(StreamEnd::Refused(f)));
        }
        Ok(answer) => answer,
        Err(e) => return Err(frame_err("reading the Receipt", e)),
    };
    // An answer while the body was still going out can only be a Receipt
    // whose Trailer's last write was not yet polled through: let it finish.
    let (sha256, sent_at) = match sent {
        Some(done) => done,
        None => match body.await {
            Ok(sha256) => (sha256, Instant::now()),
            Err(BodyEnd::Source(e) | BodyEnd::Transport(e)) => return Err(e),
        },
    };
    Ok(Body::Answered {
        start,
        sha256,
        sent_at,
        answer,
    })
}

/// A plain stream: the Plan (or a Reject, or a Receipt when the Offer proved the
/// file), the same-source check, Start, bytes and Trailer, and the answer.
async fn plain_body(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    src: &Source,
    before: &Snapshot,
    bar: &ProgressBar,
    known_sha256: Option<String>,
    how: &Wire,
) -> Result<Body, FileError> {
    let plan = match read_frame(recv)
        .await
        .map_err(|e| frame_err("reading the Plan", e))?
    {
        Message::Plan(p) => {
            crate::ui::version::note_relay(p.relay_version.as_deref());
            p
        }
        Message::Reject(f) => return Ok(Body::Ended(StreamEnd::Refused(f))),
        Message::Receipt(receipt) if known_sha256.is_some() => {
            let _ = send.finish();
            let sha256 = known_sha256.unwrap_or_default();
            return Ok(Body::Ended(StreamEnd::Receipt { receipt, sha256 }));
        }
        other => return Err(unexpected("a Plan", &other)),
    };
    let (start, hasher) = resume_from(src, &plan, before.len).await?;
    let start_frame = Start {
        offset: start,
        encoding: how.encoding,
    };
    write_frame(send, &Message::Start(start_frame))
        .await
        .map_err(|e| frame_err("sending Start", e))?;
    // What is resumed is staged already.
    bar.set_position(start);
    let body = send_body(send, src, start, before, hasher, how);
    body_and_answer(body, answer(recv, bar), start).await
}

/// The eager body: `Start{0}`, every byte and the Trailer go out at once, while the
/// relay's first frame is awaited. That frame alone decides the stream
/// (`relay_proto::exchange`), whenever it arrives: before the first byte, mid-body, or
/// after the Trailer.
async fn eager_body(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    src: &Source,
    before: &Snapshot,
    bar: &ProgressBar,
    how: &Wire,
) -> Result<Body, FileError> {
    let mut body = Box::pin(async {
        let start = Start {
            offset: 0,
            encoding: how.encoding,
        };
        write_frame(send, &Message::Start(start))
            .await
            .map_err(|e| BodyEnd::Transport(frame_err("sending Start", e)))?;
        bar.set_position(0);
        send_body(send, src, 0, before, Sha256::new(), how).await
    });
    let mut sent = None;
    let first = {
        let mut reading = Box::pin(read_frame(recv));
        loop {
            tokio::select! {
                frame = &mut reading => break frame,
                // A failed write is not yet an answer: the relay's frame says why.
                done = &mut body, if sent.is_none() => match done {
                    Err(BodyEnd::Source(e)) => return Err(e),
                    other => sent = Some(other),
                },
            }
        }
    };
    let answer_frame = match first {
        Ok(frame) => {
            if let Message::Plan(p) = &frame {
                crate::ui::version::note_relay(p.relay_version.as_deref());
            }
            eager_answer(&frame)
        }
        Err(e) => return Err(frame_err("reading the Plan", e)),
    };
    match answer_frame {
        EagerAnswer::Proceed => {}
        EagerAnswer::Redirect { resume_offset } => {
            drop(body);
            tracing::debug!(path = %src.path.display(), resume_offset, "relay has staged blocks; re-offering");
            let _ = send.reset(app_error::RESUME_ON_NEW_STREAM.into());
            return Ok(Body::Ended(StreamEnd::Redirected { resume_offset }));
        }
        EagerAnswer::Refused(f) => {
            drop(body);
            let _ = send.reset(app_error::REJECTED.into());
            return Ok(Body::Ended(StreamEnd::Refused(f)));
        }
        EagerAnswer::Unexpected(name) => {
            return Err(FileError::new(
                ErrorCode::Protocol,
                format!("expected a Plan, got {name}"),
                false,
            ));
        }
    }
    // The Plan said go on: the rest of the body (or what it ended with) and
    // the answer, with the relay's Progress frames on the way.
    let rest = async {
        match sent {
            Some(done) => done,
            None => body.await,
        }
    };
    body_and_answer(rest, answer(recv, bar), 0).await
}

/// Sends bytes `[start, len)`, checks the source did not change, then the Trailer
/// with the SHA-256 of the whole file; returns that SHA-256 (hex).
async fn send_body(
    send: &mut quinn::SendStream,
    src: &Source,
    start: u64,
    before: &Snapshot,
    hasher: Sha256,
    how: &Wire,
) -> Result<String, BodyEnd> {
    let hasher = stream_bytes(send, src, start, before.len, hasher, how).await?;
    let after =
        Snapshot::take(&src.path, src.reading).map_err(|e| BodyEnd::Source(unreadable(e)))?;
    if &after != before {
        let _ = send.reset(app_error::CLIENT_ABORT.into());
        return Err(BodyEnd::Source(FileError::new(
            ErrorCode::SourceChanged,
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
    .map_err(|e| BodyEnd::Transport(frame_err("sending the Trailer", e)))?;
    let _ = send.finish();
    Ok(sha256)
}

/// Where to start after a Plan (`start_offset`: the Plan's resume offset if our
/// own prefix hashes to the relay's checkpoint, else 0) and the hash state there.
async fn resume_from(
    src: &Source,
    plan: &relay_proto::protocol::Plan,
    len: u64,
) -> Result<(u64, Sha256), FileError> {
    let Some(offset) = prefix_to_check(plan, len) else {
        return Ok((0, Sha256::new()));
    };
    let ours = hash_prefix(src.path.clone(), src.reading, offset)
        .await
        .map_err(unreadable)?;
    match start_offset(plan, len, Checkpoint::of(&ours)) {
        0 => {
            tracing::info!(path = %src.path.display(), "staged blocks are from a different source; starting from zero");
            Ok((0, Sha256::new()))
        }
        start => Ok((start, ours)),
    }
}

/// Sends the file's bytes `[start, len)`, hashing them on the way: as they are,
/// or (`Start{encoding: zstd}`) as chunks, each plain or compressed as
/// `compress::Policy` decides from the sender's measured pace (`wire`).
async fn stream_bytes(
    send: &mut quinn::SendStream,
    src: &Source,
    start: u64,
    len: u64,
    mut hasher: Sha256,
    how: &Wire,
) -> Result<Sha256, BodyEnd> {
    let meter = std::sync::Arc::new(crate::transfer::wire::Meter::default());
    let (path, count) = (src.path.clone(), len - start);
    let mut pieces = match how.encoding {
        None => read_range_with(path, src.reading, start, count, |raw| {
            Ok(crate::transfer::wire::Piece {
                head: bytes::Bytes::new(),
                wire: raw.clone(),
                raw,
            })
        }),
        Some(Encoding::Zstd) => {
            let encoder = crate::transfer::wire::encoder(how.mode, meter.clone()).map_err(|e| {
                BodyEnd::Source(FileError::new(ErrorCode::Compress, e.to_string(), false))
            })?;
            read_range_with(path, src.reading, start, count, encoder)
        }
    };
    while let Some(piece) = pieces.recv().await {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                let _ = send.reset(app_error::CLIENT_ABORT.into());
                return Err(BodyEnd::Source(changed_or(e)));
            }
        };
        hasher.update(&piece.raw);
        // Under `--max-rate` the chunk goes out in metered pieces (`crate::relay::rate`).
        let wire_len = piece.wire_len() as u64;
        for mut rest in [piece.head, piece.wire] {
            while !rest.is_empty() {
                let part = crate::relay::rate::next_piece(&mut rest).await;
                send.write_chunk(part)
                    .await
                    .map_err(|e| BodyEnd::Transport(lost(e)))?;
            }
        }
        if how.encoding.is_some() {
            meter.observe(&how.conn);
        }
        how.sent
            .fetch_add(wire_len, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(hasher)
}
