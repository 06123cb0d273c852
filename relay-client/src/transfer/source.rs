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
///
/// A range of at most `INLINE_BYTES` is read at once on the caller's thread
/// instead: handing a small file to a blocking thread and its chunk back cost
/// more in wake-ups than the read itself (docs/PERFORMANCE.md, "CPU per small
/// file"), and it is one read of at most 64 KiB, like the `stat` every file
/// already makes in place.
pub fn read_range_with<T: Send + 'static>(
    path: PathBuf,
    offset: u64,
    len: u64,
    mut each: impl FnMut(Bytes) -> std::io::Result<T> + Send + 'static,
) -> mpsc::Receiver<std::io::Result<T>> {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    if len <= INLINE_BYTES {
        // One chunk and at most one error: always room in a new channel.
        read_chunks(&path, offset, len, &mut each, |item| {
            tx.try_send(item).is_ok()
        });
        return rx;
    }
    tokio::task::spawn_blocking(move || {
        read_chunks(&path, offset, len, &mut each, |item| {
            tx.blocking_send(item).is_ok()
        });
    });
    rx
}

/// Ranges read in place by `read_range_with` (less than a `CHUNK`).
pub const INLINE_BYTES: u64 = 64 * 1024;

/// Reads the range in chunks through `each`, handing each result (or the
/// error that ended the reading) to `send`, until `send` says the receiver is
/// gone.
fn read_chunks<T>(
    path: &Path,
    offset: u64,
    len: u64,
    each: &mut impl FnMut(Bytes) -> std::io::Result<T>,
    mut send: impl FnMut(std::io::Result<T>) -> bool,
) {
    let mut run = || -> std::io::Result<()> {
        let mut f = std::fs::File::open(path)?;
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
            if !send(item) || failed {
                return Ok(()); // receiver gone (the transfer was abandoned), or told why
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        let _ = send(Err(e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk `read_range_with` hands over, joined, or the error it ended with.
    async fn read_all(path: PathBuf, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let mut rx = read_range_with(path, offset, len, Ok);
        let mut got = Vec::new();
        while let Some(item) = rx.recv().await {
            got.extend_from_slice(&item?);
        }
        Ok(got)
    }

    #[tokio::test]
    async fn ranges_read_in_place_and_on_a_thread_alike() {
        let dir = std::env::temp_dir().join(format!("source-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("f.bin");
        let size = INLINE_BYTES as usize + 10;
        let bytes: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        // In place (at most INLINE_BYTES), then on the blocking thread.
        for (offset, len) in [
            (3, 100),
            (0, INLINE_BYTES),
            (0, INLINE_BYTES + 1),
            (5, INLINE_BYTES + 5),
        ] {
            let got = read_all(path.clone(), offset, len).await.expect("read");
            let (o, l) = (offset as usize, len as usize);
            assert!(got == bytes[o..o + l], "range {offset}+{len}");
        }
        // A file shorter than the range says so, whichever way it was read.
        for len in [INLINE_BYTES, INLINE_BYTES + 20] {
            let e = read_all(path.clone(), 20, len).await.expect_err("shrank");
            assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "len {len}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
