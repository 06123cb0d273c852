//! One blob through the relay: the driver of `session`. It looks at what is on
//! disk, performs each action (hash the local file, open a `Fetch` stream,
//! receive its sections into the partial file, place it) and feeds back what
//! happened; every decision is the session's.

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Instant;

use indicatif::ProgressBar;
use md5::Md5;
use quinn::{Connection, RecvStream, SendStream};
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{Check, Fetch, Message, Source, app_error};
use relay_transport::frames::{read_frame, write_frame};
use sha2::{Digest, Sha256};

use super::partial::{self, Sidecar};
use super::place::{partial_name, sidecar_name};
use super::safe_fs::{Entry, Folder, FsError};
use super::session::{Action, Blob, Event, Failed, Hashes, Local, Session};
use crate::commands::args::OverwriteMode;
use crate::relay::open_turns::OpenTurns;
use crate::sign_in::Bearer;
use crate::transfer::send::sign_in_failed;
use crate::ui::report::FileError;

/// The largest piece of a section read from QUIC at once (no copy: quinn's own
/// buffer), so a file's memory is this, not its size.
const READ_CHUNK: usize = 1 << 20;

/// What one file shares with the run.
pub struct Target<'a> {
    pub token: &'a Bearer,
    pub container: &'a str,
    pub blob: &'a str,
    pub listed: Blob,
    /// The folder that holds the file (created) and its name there.
    pub folder: &'a Folder,
    pub leaf: &'a str,
    pub overwrite: OverwriteMode,
    /// Bytes of this blob received so far, over every attempt of the run.
    pub received: std::sync::atomic::AtomicU64,
}

/// How a file ended.
#[derive(Debug)]
pub enum Done {
    Placed {
        size: u64,
        sha256: String,
        etag: String,
        check: Check,
        ranges_checked: u64,
        resumed: u64,
        received: u64,
        /// MD5 (hex) of the written file.
        md5: String,
    },
    Skipped {
        reason: String,
        etag: String,
    },
}

fn lost(e: impl std::fmt::Display) -> FileError {
    FileError::new("connection", format!("connection to relay lost: {e}"), true)
}

fn fs(e: FsError) -> FileError {
    let retry = false;
    FileError::new(e.code(), e.to_string(), retry)
}

fn failed(f: Failed) -> FileError {
    FileError::new(f.code, f.message, f.retryable)
}

/// What is at the final name, as the session sees it.
pub fn local(folder: &Folder, leaf: &str) -> Result<Local, FileError> {
    Ok(match folder.entry(leaf).map_err(fs)? {
        Entry::Absent => Local::Absent,
        Entry::File { size, mtime } => Local::File { size, mtime },
        Entry::Folder => Local::Folder,
        Entry::Symlink => Local::Symlink,
        Entry::Other => Local::Other,
    })
}

/// Where a file's bytes come from.
#[derive(Clone, Copy)]
pub enum Way<'a> {
    /// A `Fetch` stream on this relay connection.
    Relay {
        conn: &'a Connection,
        turns: &'a OpenTurns,
    },
    /// Ranged reads straight from storage (`--direct`).
    Direct(&'a super::direct::DirectReads),
}

/// An open download after its Source: where the bytes come from.
pub(super) struct Stream {
    pub(super) body: Body,
    pub(super) source: Source,
}

pub(super) enum Body {
    Relay {
        _send: SendStream,
        recv: RecvStream,
        /// Bytes left in the current `Data` section.
        left: u64,
    },
    Direct(super::direct::Ranges),
}

/// The next piece of a file's bytes.
pub(super) enum Next {
    Bytes(bytes::Bytes),
    /// Every byte came; the ranges the relay (or this client) checked.
    End {
        ranges_checked: u64,
    },
    Refused(relay_proto::protocol::Failure),
}

impl Body {
    fn stop(&mut self) {
        if let Body::Relay { recv, .. } = self {
            let _ = recv.stop(app_error::CLIENT_ABORT.into());
        }
    }

    /// The next bytes at `at` of a blob of `size`.
    async fn next(&mut self, at: u64, size: u64) -> Result<Next, FileError> {
        let (recv, left) = match self {
            Body::Direct(r) => return r.next().await,
            Body::Relay { recv, left, .. } => (recv, left),
        };
        while *left == 0 {
            match read_frame(recv).await.map_err(lost)? {
                Message::Data(d) => {
                    if d.len > size - at {
                        return Err(FileError::new(
                            "protocol",
                            format!("a section of {} bytes past the blob's end at {at}", d.len),
                            false,
                        ));
                    }
                    *left = d.len;
                }
                Message::Sent(sent) => {
                    return Ok(Next::End {
                        ranges_checked: sent.ranges_checked,
                    });
                }
                Message::Error(f) | Message::Reject(f) => return Ok(Next::Refused(f)),
                other => {
                    return Err(FileError::new(
                        "protocol",
                        format!("expected Data or Sent, got {}", other.name()),
                        false,
                    ));
                }
            }
        }
        let max = usize::try_from(*left).unwrap_or(usize::MAX).min(READ_CHUNK);
        let chunk = recv
            .read_chunk(max, true)
            .await
            .map_err(lost)?
            .ok_or_else(|| lost("the stream ended inside a section"))?;
        *left -= chunk.bytes.len() as u64;
        Ok(Next::Bytes(chunk.bytes))
    }
}

pub async fn download(way: Way<'_>, t: &Target<'_>, bar: &ProgressBar) -> Result<Done, FileError> {
    let name_max = t.folder.name_max();
    let part = partial_name(t.leaf, name_max);
    let side = sidecar_name(&part);
    let here = local(t.folder, t.leaf)?;
    let earlier = partial::find(t.folder, &part, &side, t.container, t.blob).map_err(fs)?;
    let (mut session, mut action) = Session::new(t.listed.clone(), here, earlier, t.overwrite);
    let mut stream: Option<Stream> = None;
    let mut ranges_checked = 0u64;
    let mut last_etag = t.listed.etag.clone();
    let mut written: Option<Hashes> = None;
    loop {
        let event = match action {
            Action::HashLocal => {
                let file = t.folder.open_file(t.leaf, false).map_err(fs)?;
                Event::LocalHashed(hash_file(file, None).await?)
            }
            Action::Fetch {
                offset,
                etag,
                compare_only,
            } => {
                if let Some(mut old) = stream.take() {
                    old.body.stop();
                }
                let opened = match way {
                    Way::Relay { conn, turns } => open(conn, turns, t, offset, etag).await?,
                    Way::Direct(d) => d.open(t.container, t.blob, offset, etag).await?,
                };
                match opened {
                    Ok(s) => {
                        let src = s.source.clone();
                        last_etag = src.etag.clone();
                        if compare_only {
                            let mut s = s;
                            s.body.stop();
                        } else {
                            stream = Some(s);
                        }
                        Event::Source(src)
                    }
                    Err(refusal) => Event::Refused(refusal),
                }
            }
            Action::Receive { from, fresh } => {
                let Some(s) = stream.as_mut() else {
                    return Err(FileError::new("internal", "no stream to receive", false));
                };
                let file = t.folder.open_file(&part, true).map_err(fs)?;
                if fresh {
                    partial::record(
                        t.folder,
                        &side,
                        &Sidecar {
                            container: t.container.to_string(),
                            blob: t.blob.to_string(),
                            etag: s.source.etag.clone(),
                            size: s.source.size,
                        },
                    )
                    .map_err(fs)?;
                }
                let path = t.folder.path().join(&part);
                match receive(s, file, from, &path, bar, &t.received).await? {
                    Ok((len, hashes, ranges)) => {
                        ranges_checked = ranges;
                        written = Some(hashes.clone());
                        Event::Received { len, hashes }
                    }
                    Err(refusal) => Event::Refused(refusal),
                }
            }
            Action::Place { check, resumed } => {
                let Some(s) = stream.take() else {
                    return Err(FileError::new("internal", "no stream to place", false));
                };
                // A folder or link that appeared at the name meanwhile is not replaced.
                match local(t.folder, t.leaf)? {
                    Local::Folder | Local::Symlink | Local::Other => {
                        return Err(FileError::new(
                            "in_the_way",
                            "something other than a file appeared at the file's name; the download is kept as a partial file",
                            false,
                        ));
                    }
                    _ => {}
                }
                set_mtime(t.folder, &part, s.source.last_modified)?;
                t.folder.rename(&part, t.leaf).map_err(fs)?;
                t.folder.remove_file(&side).map_err(fs)?;
                t.folder.sync().map_err(fs)?;
                let h = written.take().unwrap_or(Hashes {
                    sha256: String::new(),
                    md5: String::new(),
                });
                return Ok(Done::Placed {
                    size: s.source.size,
                    sha256: h.sha256,
                    md5: h.md5,
                    etag: s.source.etag,
                    check,
                    ranges_checked,
                    resumed,
                    received: t.received.load(std::sync::atomic::Ordering::Relaxed),
                });
            }
            Action::Skip(reason) => {
                return Ok(Done::Skipped {
                    reason,
                    etag: last_etag,
                });
            }
            Action::Fail(f) => return Err(failed(f)),
        };
        action = session.handle(event);
    }
}

/// Gives the verified file its blob's Last-Modified as modification time, as
/// rclone and AzCopy do, so `--overwrite=if-newer` on a rerun compares the
/// blob with the version it was downloaded from, not with the download's time.
fn set_mtime(folder: &Folder, name: &str, last_modified: Option<u64>) -> Result<(), FileError> {
    let Some(secs) = last_modified else {
        return Ok(());
    };
    let file = folder.open_file(name, false).map_err(fs)?;
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    file.set_modified(when)
        .map_err(|e| fs(FsError::of(&folder.path().join(name), e)))
}

/// Opens a stream and sends the Fetch; the Source, or the relay's refusal.
async fn open(
    conn: &Connection,
    turns: &OpenTurns,
    t: &Target<'_>,
    offset: u64,
    etag: Option<String>,
) -> Result<Result<Stream, relay_proto::protocol::Failure>, FileError> {
    let token = t.token.current().await.map_err(sign_in_failed)?;
    let (mut send, mut recv) = turns.open_bi(conn).await.map_err(lost)?;
    let fetch = Message::Fetch(Fetch {
        version: PROTOCOL_VERSION,
        token,
        container: t.container.to_string(),
        blob: t.blob.to_string(),
        offset,
        etag,
    });
    write_frame(&mut send, &fetch).await.map_err(lost)?;
    // The Fetch is all the client says on this stream.
    let _ = send.finish();
    match read_frame(&mut recv).await.map_err(lost)? {
        Message::Source(source) => Ok(Ok(Stream {
            body: Body::Relay {
                _send: send,
                recv,
                left: 0,
            },
            source,
        })),
        Message::Reject(f) | Message::Error(f) => Ok(Err(f)),
        other => Err(FileError::new(
            "protocol",
            format!("expected Source, got {}", other.name()),
            false,
        )),
    }
}

/// Hashes a file (or its first `limit` bytes) on a blocking thread.
async fn hash_file(file: std::fs::File, limit: Option<u64>) -> Result<Hashes, FileError> {
    let (sha, md5) = hash_prefix(file, limit, true).await?;
    Ok(Hashes {
        sha256: hex::encode(sha.finalize()),
        md5: md5.map(|m| hex::encode(m.finalize())).unwrap_or_default(),
    })
}

/// SHA-256 (always: the report names it) and, when `with_md5`, MD5 of a
/// file's first `limit` bytes.
async fn hash_prefix(
    file: std::fs::File,
    limit: Option<u64>,
    with_md5: bool,
) -> Result<(Sha256, Option<Md5>), FileError> {
    tokio::task::spawn_blocking(move || {
        let mut sha = Sha256::new();
        let mut md5 = with_md5.then(Md5::new);
        let mut r = file.take(limit.unwrap_or(u64::MAX));
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Ok::<_, std::io::Error>((sha, md5));
            }
            sha.update(&buf[..n]);
            if let Some(md5) = md5.as_mut() {
                md5.update(&buf[..n]);
            }
        }
    })
    .await
    .map_err(|e| FileError::new("internal", e.to_string(), false))?
    .map_err(|e| {
        FileError::new(
            "local_io",
            format!("cannot read the local file: {e}"),
            false,
        )
    })
}

type Received = (u64, Hashes, u64);

/// The sections of one stream into the partial file from `from` (its first
/// `from` bytes re-hashed), then fsync: (length, hashes, ranges the relay
/// checked), or the relay's Error. Each byte received is counted in `received`
/// as it arrives, so an attempt cut short still counts what it cost.
async fn receive(
    s: &mut Stream,
    file: std::fs::File,
    from: u64,
    path: &std::path::Path,
    bar: &ProgressBar,
    received: &std::sync::atomic::AtomicU64,
) -> Result<Result<Received, relay_proto::protocol::Failure>, FileError> {
    let io = |e: std::io::Error| fs(FsError::of(path, e));
    let size = s.source.size;
    bar.set_length(size);
    bar.set_position(from);
    let have = file.metadata().map_err(io)?.len();
    if have < from {
        return Err(FileError::new(
            "local_io",
            format!("{}: the partial file shrank while resuming", path.display()),
            true,
        ));
    }
    let prefix = file.try_clone().map_err(io)?;
    // MD5 costs as much CPU as the rest of the receive path together: only a
    // blob checked by its Content-MD5 needs it.
    let with_md5 = s.source.check == Check::ContentMd5;
    let (mut sha, mut md5) = if from > 0 {
        let mut f = prefix;
        f.seek(SeekFrom::Start(0)).map_err(io)?;
        hash_prefix(f, Some(from), with_md5).await?
    } else {
        (Sha256::new(), with_md5.then(Md5::new))
    };
    let mut file = file;
    file.set_len(from).map_err(io)?;
    file.seek(SeekFrom::Start(from)).map_err(io)?;
    let t0 = Instant::now();
    let mut at = from;
    let mut got = 0u64;
    let ranges = loop {
        match s.body.next(at, size).await? {
            Next::Bytes(bytes) => {
                sha.update(&bytes);
                if let Some(md5) = md5.as_mut() {
                    md5.update(&bytes);
                }
                tokio::task::block_in_place(|| file.write_all(&bytes)).map_err(io)?;
                let n = bytes.len() as u64;
                at += n;
                got += n;
                received.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                bar.set_position(at);
            }
            Next::End { ranges_checked } => break ranges_checked,
            Next::Refused(f) => {
                // What arrived is good bytes of this version: kept for a resume.
                let _ = tokio::task::block_in_place(|| file.sync_data());
                return Ok(Err(f));
            }
        }
    };
    tokio::task::block_in_place(|| file.sync_all()).map_err(io)?;
    tracing::debug!(
        bytes = got,
        ms = t0.elapsed().as_millis() as u64,
        "received"
    );
    Ok(Ok((
        at,
        Hashes {
            sha256: hex::encode(sha.finalize()),
            md5: md5.map(|m| hex::encode(m.finalize())).unwrap_or_default(),
        },
        ranges,
    )))
}
