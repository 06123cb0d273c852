//! One blob's bytes: what a download shares with the run (`Target`), a
//! `Fetch` stream through the relay (or `--direct`'s ranges) and its
//! sections, received into the partial file while they are hashed. The
//! driver of the session, one attempt at a time, is `attempt`.

use std::io::{Read, Seek, SeekFrom};
use std::time::Instant;

use indicatif::ProgressBar;
use md5::Md5;
use quinn::Connection;
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{Check, Encoding, Fetch, Message};
use relay_transport::frames::{read_frame, write_frame};
use sha2::{Digest, Sha256};

use super::batch::Batched;
use super::folder_sync::FolderSyncs;
use super::inflating::{Inflating, Slot, Wire, ask};
use super::piece::{Next, lost};
use super::safe_fs::{Entry, Folder, FsError};
use super::stream::{Body, Stream};
use crate::index::Index;
use crate::relay::open_turns::OpenTurns;
use crate::sign_in::Bearer;
use crate::transfer::overwrite::OverwriteMode;
use crate::transfer::send::sign_in_failed;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;
use relay_proto::session::download::{Blob, Compared, Hashes, Local};

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
    /// This machine's index of the destination folder (none: `--no-index`,
    /// or it could not be opened), and the file's path in it.
    pub index: Option<&'a Index>,
    pub index_path: String,
    /// How long to wait for another writer of the partial file that makes
    /// no progress (`--patience`).
    pub patience: std::time::Duration,
    /// The bytes that carried them, when some came compressed.
    pub wire: std::sync::Arc<Wire>,
    /// The folder fsyncs this file shares with the run's others.
    pub folder_syncs: &'a FolderSyncs,
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
        /// The bytes that carried `received`, if some came compressed.
        wire: Option<u64>,
    },
    Skipped {
        reason: String,
        etag: String,
        compared: Compared,
    },
}

pub(super) fn fs(e: FsError) -> FileError {
    let retry = false;
    FileError::new(e.code(), e.to_string(), retry)
}

/// What is at the final name, as the session sees it (nothing asked of the
/// index: `--dry-run`).
pub fn local(folder: &Folder, leaf: &str) -> Result<Local, FileError> {
    Ok(local_of(folder.entry(leaf).map_err(fs)?))
}

/// What an entry at the final name is, as the session sees it.
pub fn local_of(entry: Entry) -> Local {
    match entry {
        Entry::Absent => Local::Absent,
        Entry::File(st) => Local::File {
            size: st.size,
            mtime: st.mtime(),
            indexed: false,
        },
        Entry::Folder => Local::Folder,
        Entry::Symlink => Local::Symlink,
        Entry::Other => Local::Other,
    }
}

/// Where a file's bytes come from.
#[derive(Clone, Copy)]
pub enum Way<'a> {
    /// A `Fetch` stream on this relay connection; `compress` as the user
    /// asked (`--compress`).
    Relay {
        conn: &'a Connection,
        turns: &'a OpenTurns,
        compress: crate::transfer::compress::Mode,
    },
    /// Ranged reads straight from storage (`--direct`).
    Direct(&'a super::direct::DirectReads),
}

/// Opens a stream and sends the Fetch (asking for compressed sections where
/// `compress`, the handshake and a free decoder slot allow); the Source, or
/// the relay's refusal.
pub(super) async fn open(
    conn: &Connection,
    turns: &OpenTurns,
    t: &Target<'_>,
    offset: u64,
    etag: Option<String>,
    compress: crate::transfer::compress::Mode,
) -> Result<Result<Stream, relay_proto::protocol::Failure>, FileError> {
    let token = t.token.current().await.map_err(sign_in_failed)?;
    let (mut send, mut recv) = turns.open_bi(conn).await.map_err(lost)?;
    let asked = ask(compress, relay_transport::tls::agreed_zstd(conn))
        .and_then(|mode| Slot::take().map(|slot| (mode, slot)));
    let fetch = Message::Fetch(Fetch {
        version: PROTOCOL_VERSION,
        token,
        container: t.container.to_string(),
        blob: t.blob.to_string(),
        offset,
        etag,
        compress: asked.as_ref().map(|(mode, _)| *mode),
    });
    write_frame(&mut send, &fetch).await.map_err(lost)?;
    // The Fetch is all the client says on this stream.
    let _ = send.finish();
    match read_frame(&mut recv).await.map_err(lost)? {
        Message::Source(source) => {
            let inflating = match (source.encoding, asked) {
                (None, _) => None,
                (Some(Encoding::Zstd), Some((_, slot))) => Some(Inflating::new(
                    source.size.saturating_sub(source.offset),
                    slot,
                    t.wire.clone(),
                )),
                (Some(_), None) => {
                    return Err(FileError::new(
                        ErrorCode::Protocol,
                        "the relay sent compressed sections this client did not ask for",
                        false,
                    ));
                }
            };
            Ok(Ok(Stream {
                body: Body::Relay {
                    _send: send,
                    recv,
                    left: 0,
                    inflating,
                    wire: t.wire.clone(),
                },
                source,
            }))
        }
        Message::Reject(f) | Message::Error(f) => Ok(Err(f)),
        other => Err(FileError::new(
            ErrorCode::Protocol,
            format!("expected Source, got {}", other.name()),
            false,
        )),
    }
}

/// Hashes a file (or its first `limit` bytes) on a blocking thread.
pub(super) async fn hash_file(
    file: std::fs::File,
    limit: Option<u64>,
    with_md5: bool,
) -> Result<Hashes, FileError> {
    let (sha, md5) = hash_prefix(file, limit, with_md5).await?;
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
    .map_err(|e| FileError::new(ErrorCode::Internal, e.to_string(), false))?
    .map_err(|e| {
        FileError::new(
            ErrorCode::LocalIo,
            format!("cannot read the local file: {e}"),
            false,
        )
    })
}

type Received = (u64, Hashes, u64);

/// The partial file's first `from` bytes hashed (none: fresh hashers), and
/// the file cut to them and positioned after them.
async fn kept_prefix(
    mut file: std::fs::File,
    from: u64,
    with_md5: bool,
    path: &std::path::Path,
) -> Result<(Sha256, Option<Md5>, std::fs::File), FileError> {
    let io = |e: std::io::Error| fs(FsError::of(path, e));
    let have = file.metadata().map_err(io)?.len();
    if have < from {
        return Err(FileError::new(
            ErrorCode::LocalIo,
            format!("{}: the partial file shrank while resuming", path.display()),
            true,
        ));
    }
    let (sha, md5) = if from > 0 {
        let mut f = file.try_clone().map_err(io)?;
        f.seek(SeekFrom::Start(0)).map_err(io)?;
        hash_prefix(f, Some(from), with_md5).await?
    } else {
        (Sha256::new(), with_md5.then(Md5::new))
    };
    if have != from {
        file.set_len(from).map_err(io)?;
    }
    file.seek(SeekFrom::Start(from)).map_err(io)?;
    Ok((sha, md5, file))
}

/// The sections of one stream into the partial file from `from` (its first
/// `from` bytes re-hashed): (length, hashes, ranges the relay checked), or
/// the relay's Error. Each byte received is counted in `received`
/// as it arrives, so an attempt cut short still counts what it cost.
pub(super) async fn receive(
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
    // MD5 costs as much CPU as the rest of the receive path together: only a
    // blob checked by its Content-MD5 needs it.
    let with_md5 = s.source.check == Check::ContentMd5;
    let (mut sha, mut md5, file) = kept_prefix(file, from, with_md5, path).await?;
    let mut out = Batched::new(file, size.saturating_sub(from));
    let t0 = Instant::now();
    let mut at = from;
    // A stream that breaks (or a run stopped meanwhile) leaves what arrived
    // in the partial file for a resume: `out` writes what it holds when
    // dropped.
    let ranges = loop {
        match s.body.next(at, size).await? {
            Next::Bytes(bytes) => {
                sha.update(&bytes);
                if let Some(md5) = md5.as_mut() {
                    md5.update(&bytes);
                }
                out.write(&bytes).map_err(io)?;
                let n = bytes.len() as u64;
                at += n;
                received.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                bar.set_position(at);
            }
            Next::End { ranges_checked } => break ranges_checked,
            Next::Refused(f) => {
                // What arrived is good bytes of this version: kept for a resume.
                if out.flush().is_ok() {
                    let _ = tokio::task::block_in_place(|| out.file().sync_data());
                }
                return Ok(Err(f));
            }
        }
    };
    out.flush().map_err(io)?;
    // No fsync here: placing fsyncs the file once, after its modification
    // time and mode, before the rename (`attempt::place`); bytes that are
    // never placed need none (a resume re-hashes what it keeps, and the
    // whole file is checked before it takes its name).
    tracing::debug!(
        bytes = at - from,
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
