//! Reading a source file: a snapshot of size and mtime to detect changes, a prefix
//! hash for the same-source check, and a bounded reader thread (a few 1 MiB chunks
//! in flight, whatever the file's size).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

pub const CHUNK: usize = 1 << 20;
const CHUNKS_IN_FLIGHT: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub len: u64,
    pub mtime: Option<SystemTime>,
}

impl Snapshot {
    pub fn take(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            len: m.len(),
            mtime: m.modified().ok(),
        })
    }
}

/// SHA-256 state after the first `len` bytes (for comparing with a relay checkpoint).
pub async fn hash_prefix(path: PathBuf, len: u64) -> std::io::Result<Sha256> {
    tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(&path)?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut left = len;
        while left > 0 {
            let want = (left as usize).min(CHUNK);
            let n = f.read(&mut buf[..want])?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "file shrank while hashing its prefix",
                ));
            }
            h.update(&buf[..n]);
            left -= n as u64;
        }
        Ok(h)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Streams `[offset, offset + len)` as chunks from a blocking thread, each
/// passed through `each` there (its encoding, `send::stream_bytes`:
/// compressing on this thread overlaps with sending the chunks before it).
/// Ends early with an `UnexpectedEof` error if the file shrank.
pub fn read_range_with<T: Send + 'static>(
    path: PathBuf,
    offset: u64,
    len: u64,
    mut each: impl FnMut(Bytes) -> std::io::Result<T> + Send + 'static,
) -> mpsc::Receiver<std::io::Result<T>> {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let mut run = || -> std::io::Result<()> {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            let mut left = len;
            while left > 0 {
                let want = (left as usize).min(CHUNK);
                // Read into spare capacity: a zeroed buffer would cost a memset
                // of every byte before the read overwrites it.
                let mut buf = Vec::with_capacity(want);
                (&mut f).take(want as u64).read_to_end(&mut buf)?;
                if buf.len() < want {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shrank while it was being read",
                    ));
                }
                left -= want as u64;
                let item = each(Bytes::from(buf));
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    return Ok(()); // receiver gone (the transfer was abandoned), or told why
                }
            }
            Ok(())
        };
        if let Err(e) = run() {
            let _ = tx.blocking_send(Err(e));
        }
    });
    rx
}
