//! Reading a source file: a snapshot of size and mtime to detect changes, a prefix
//! hash for the same-source check, and a bounded reader thread (a few 1 MiB chunks
//! in flight, whatever the file's size).
//!
//! Every read of a source file opens it through `open`: without
//! `--follow-symlinks`, a name the walk saw as a file and someone has since
//! swapped for a symbolic link is refused at the open itself (`O_NOFOLLOW`),
//! and what was opened must still be a regular file (its descriptor's
//! `fstat`) and, when the walk saw it, that very file (its device and inode:
//! `O_NOFOLLOW` guards only the last component, and a folder on the path
//! swapped for a link would lead elsewhere). Else whoever may write in the
//! source folder could have a run send a file they cannot read themselves
//! but the user can (a key, a token).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
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
    /// The file's size and mtime; without `how.follow`, a link at `path` is
    /// `NotAFile::Link` (its target's size is nobody's business), and
    /// another file than the walk's is `NotAFile::Replaced`.
    pub fn take(path: &Path, how: Reading) -> std::io::Result<Self> {
        let m = if how.follow {
            std::fs::metadata(path)?
        } else {
            std::fs::symlink_metadata(path)?
        };
        if m.file_type().is_symlink() {
            return Err(NotAFile::Link.into());
        }
        how.check(&m)?;
        Ok(Self {
            len: m.len(),
            mtime: m.modified().ok(),
        })
    }
}

/// How each read opens a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    /// `--follow-symlinks`: a link at the name is read through.
    pub follow: bool,
    /// The file the walk saw, when it saw one: any other is refused.
    pub file: Option<FileId>,
}

/// A file by its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

impl Reading {
    /// Whether `m` is of the file the walk saw (any, when it saw none).
    fn check(&self, m: &std::fs::Metadata) -> std::io::Result<()> {
        match self.file {
            Some(id) if id != FileId::of(m) => Err(NotAFile::Replaced.into()),
            _ => Ok(()),
        }
    }
}

/// Why a name the walk gave as a file is not read now.
#[derive(Debug, thiserror::Error)]
pub enum NotAFile {
    #[error(
        "it is a symbolic link now (it was a file when walked): not followed without --follow-symlinks; nothing sent"
    )]
    Link,
    #[error("it is no longer a regular file; nothing sent")]
    Special,
    #[error(
        "it is no longer the file the walk saw (replaced, or a folder on its path swapped for a link); nothing sent"
    )]
    Replaced,
}

impl From<NotAFile> for std::io::Error {
    fn from(e: NotAFile) -> Self {
        std::io::Error::other(e)
    }
}

impl NotAFile {
    /// The refusal `e` carries, if it is one of these.
    pub fn of(e: &std::io::Error) -> Option<&NotAFile> {
        e.get_ref().and_then(|inner| inner.downcast_ref())
    }
}

/// Opens a source file for reading. Without `how.follow`, a symbolic link
/// at `path` is refused by the open itself (`O_NOFOLLOW`: no window between
/// a check and the open), and with or without it, what was opened must be a
/// regular file by its descriptor's `fstat`, and the walk's file if it saw
/// one (`how.file`). `O_NONBLOCK` keeps a FIFO swapped in from holding the
/// open until a writer comes; it is cleared once the descriptor is known to
/// be a regular file.
pub fn open(path: &Path, how: Reading) -> std::io::Result<File> {
    let follow = how.follow;
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f,
        // O_NOFOLLOW's answer to a link at the last component.
        Err(e) if !follow && e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(NotAFile::Link.into());
        }
        Err(e) => return Err(e),
    };
    let m = file.metadata()?;
    if !m.is_file() {
        return Err(NotAFile::Special.into());
    }
    how.check(&m)?;
    blocking(&file)?;
    Ok(file)
}

/// Clears `O_NONBLOCK` on a regular file's descriptor (reads of regular
/// files ignore it on Linux; cleared so that no other system surprises).
fn blocking(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for as long as `file` lives; F_GETFL and F_SETFL
    // take and return an int and touch no memory of ours.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// SHA-256 state after the first `len` bytes (for comparing with a relay checkpoint).
pub async fn hash_prefix(path: PathBuf, how: Reading, len: u64) -> std::io::Result<Sha256> {
    tokio::task::spawn_blocking(move || {
        let mut f = open(&path, how)?;
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
    how: Reading,
    offset: u64,
    len: u64,
    mut each: impl FnMut(Bytes) -> std::io::Result<T> + Send + 'static,
) -> mpsc::Receiver<std::io::Result<T>> {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    if len <= INLINE_BYTES {
        // One chunk and at most one error: always room in a new channel.
        read_chunks(&path, how, offset, len, &mut each, |item| {
            tx.try_send(item).is_ok()
        });
        return rx;
    }
    tokio::task::spawn_blocking(move || {
        read_chunks(&path, how, offset, len, &mut each, |item| {
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
    how: Reading,
    offset: u64,
    len: u64,
    each: &mut impl FnMut(Bytes) -> std::io::Result<T>,
    mut send: impl FnMut(std::io::Result<T>) -> bool,
) {
    let mut run = || -> std::io::Result<()> {
        let mut f = open(path, how)?;
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
        let mut rx = read_range_with(path, Reading::default(), offset, len, Ok);
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

    /// A fresh folder of its own for a test.
    fn fresh(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("source-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    /// The one file the walk finds below `tree`, as the upload gets it.
    fn walked(tree: &Path) -> crate::transfer::walk::Source {
        use crate::transfer::walk::{Found, Walk, WalkOptions};
        let files: Vec<_> = Walk::new(&[tree.to_path_buf()], WalkOptions::default())
            .filter_map(|f| match f {
                Found::File(src) => Some(src),
                _ => None,
            })
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files.into_iter().next().expect("one file")
    }

    /// The walk hands a file to the upload; before it is opened, someone who
    /// may write in the folder swaps it for a link to a file only the user
    /// can read. Every way the upload reads a source (its `stat`, the prefix
    /// hash, the ranged reader, the open that checks it is readable) refuses
    /// the link, and no byte of the target is handed on.
    #[tokio::test]
    async fn a_file_swapped_for_a_link_after_the_walk_is_never_read() {
        use crate::transfer::send_failure::unreadable;
        use crate::ui::error_code::ErrorCode;

        let dir = fresh("link");
        let tree = dir.join("tree");
        std::fs::create_dir_all(&tree).expect("tree");
        let secret = dir.join("secret");
        let secret_bytes = b"the user's key, not the attacker's".to_vec();
        std::fs::write(&secret, &secret_bytes).expect("secret");
        std::fs::write(tree.join("f.txt"), b"an ordinary file").expect("file");
        let src = &walked(&tree);
        assert!(!src.reading.follow);
        // The swap, after the walk and before any open.
        std::fs::remove_file(&src.path).expect("remove");
        std::os::unix::fs::symlink(&secret, &src.path).expect("link");

        let is_link = |e: &std::io::Error| matches!(NotAFile::of(e), Some(NotAFile::Link));
        let e = open(&src.path, src.reading).expect_err("open");
        assert!(is_link(&e), "{e}");
        assert_eq!(unreadable(e).code, ErrorCode::Symlink);
        let e = Snapshot::take(&src.path, src.reading).expect_err("stat");
        assert!(is_link(&e), "{e}");
        let len = secret_bytes.len() as u64;
        let e = hash_prefix(src.path.clone(), src.reading, len)
            .await
            .expect_err("hash");
        assert!(is_link(&e), "{e}");
        let mut rx = read_range_with(src.path.clone(), src.reading, 0, len, Ok);
        let mut items = 0;
        while let Some(item) = rx.recv().await {
            items += 1;
            let e = item.expect_err("no bytes of the target");
            assert!(is_link(&e), "{e}");
            assert_eq!(
                crate::transfer::send_failure::changed_or(e).code,
                ErrorCode::Symlink
            );
        }
        assert_eq!(items, 1, "one error, no chunk");
        // With --follow-symlinks, still not the file the walk saw: refused.
        let follow = Reading {
            follow: true,
            ..src.reading
        };
        let e = open(&src.path, follow).expect_err("another file");
        assert!(matches!(NotAFile::of(&e), Some(NotAFile::Replaced)), "{e}");
        // A link given with --follow-symlinks (the walk saw its target) is read.
        let given = Reading {
            follow: true,
            file: None,
        };
        let mut rx = read_range_with(src.path.clone(), given, 0, len, Ok);
        let got = rx.recv().await.expect("a chunk").expect("read");
        assert_eq!(got.as_ref(), &secret_bytes[..]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A FIFO swapped in is refused at once (the open does not wait for a
    /// writer), with or without --follow-symlinks.
    #[test]
    fn a_fifo_swapped_in_is_refused_without_blocking() {
        let dir = fresh("fifo");
        let fifo = dir.join("f");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for follow in [false, true] {
            let how = Reading { follow, file: None };
            let e = open(&fifo, how).expect_err("a FIFO");
            assert!(matches!(NotAFile::of(&e), Some(NotAFile::Special)), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `O_NOFOLLOW` guards the last component only: a folder on the path
    /// swapped for a link to a folder holding a file of the same name leads
    /// to that file. It is not the file the walk saw (device and inode), so
    /// every read refuses it.
    #[tokio::test]
    async fn a_folder_on_the_path_swapped_for_a_link_is_refused() {
        use crate::transfer::send_failure::unreadable;
        use crate::ui::error_code::ErrorCode;

        let dir = fresh("dirlink");
        let (tree, private) = (dir.join("tree"), dir.join("private"));
        std::fs::create_dir_all(tree.join("a")).expect("tree");
        std::fs::create_dir_all(&private).expect("private");
        std::fs::write(tree.join("a/id_key"), b"the attacker's decoy").expect("decoy");
        let secret = b"the user's key".to_vec();
        std::fs::write(private.join("id_key"), &secret).expect("secret");
        let src = walked(&tree);
        // The folder, not the file, becomes a link after the walk.
        std::fs::rename(tree.join("a"), dir.join("a.old")).expect("rename");
        std::os::unix::fs::symlink(&private, tree.join("a")).expect("link");
        let len = secret.len() as u64;
        let replaced = |e: &std::io::Error| matches!(NotAFile::of(e), Some(NotAFile::Replaced));
        let e = open(&src.path, src.reading).expect_err("open");
        assert!(replaced(&e), "{e}");
        assert_eq!(unreadable(e).code, ErrorCode::SourceChanged);
        let e = Snapshot::take(&src.path, src.reading).expect_err("stat");
        assert!(replaced(&e), "{e}");
        let e = hash_prefix(src.path.clone(), src.reading, len)
            .await
            .expect_err("hash");
        assert!(replaced(&e), "{e}");
        let mut rx = read_range_with(src.path.clone(), src.reading, 0, len, Ok);
        let item = rx.recv().await.expect("one item");
        assert!(item.is_err_and(|e| replaced(&e)), "no bytes of the target");
        assert!(rx.recv().await.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
