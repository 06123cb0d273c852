//! The partial file a download is written to: its one writer, and its sidecar
//! (which blob and which version, ETag and size, its bytes are), so a rerun
//! resumes only a partial of the same version and starts any other over.
//!
//! One writer: the partial file is opened (created private, 0600, if
//! missing) and locked with `flock(LOCK_EX | LOCK_NB)` before anything is
//! decided about its blob, and the lock is held until the file is placed or
//! removed. A lock taken on a file that another writer renamed into place or
//! removed between our open and our lock guards nothing, so after the lock
//! the name must still be that inode, or it all starts again (the lock-file
//! dance). A second run that finds the lock held waits, without blocking a
//! thread, while the holder makes progress (its partial file grows or is
//! touched), then decides from the top: usually the file is now placed and
//! identical. A holder that shows no progress for `--patience` fails the
//! file as `in_use` (not `busy`: that is the relay saying it is full). The
//! lock dies with its process, so `kill -9` never leaves a file locked.

use std::fs::File;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::safe_fs::{Entry, Folder, FsError, Lock, Stat, stat_file, try_lock, try_lock_shared};
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;
use relay_proto::session::download::Partial;

/// What the sidecar records (small JSON beside the partial file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    pub container: String,
    pub blob: String,
    pub etag: String,
    pub size: u64,
}

/// The sidecar's largest size read back: anything bigger is not ours.
const SIDECAR_MAX: u64 = 64 * 1024;

/// Times the lock-file dance is tried before giving up (each retry means
/// another writer placed or removed the file between two system calls).
const DANCE_MAX: u32 = 64;

/// The partial file, open and locked by this attempt.
#[derive(Debug)]
pub struct Held {
    pub file: File,
    /// Made by this attempt (empty: nothing of an earlier run is in it).
    pub created: bool,
}

/// Opens and locks the partial file `name`: `None` when another writer
/// holds it.
pub fn take(folder: &Folder, name: &str) -> Result<Option<Held>, FsError> {
    let path = folder.path().join(name);
    for _ in 0..DANCE_MAX {
        let (file, created) = folder.open_partial(name)?;
        match try_lock(&file).map_err(|e| FsError::of(&path, e))? {
            Lock::Held => return Ok(None),
            Lock::Taken | Lock::Unsupported => {}
        }
        if folder.still_named(&file, name)? {
            return Ok(Some(Held { file, created }));
        }
    }
    Err(FsError::of(
        &path,
        std::io::Error::other("another writer keeps replacing this partial file"),
    ))
}

/// Takes the partial file's lock, waiting while another writer holds it and
/// makes progress; `in_use` once it has made none for `patience`.
pub async fn lock(folder: &Folder, name: &str, patience: Duration) -> Result<Held, FileError> {
    let fs = |e: FsError| FileError::new(e.code(), e.to_string(), false);
    wait_while_held(folder, name, patience, || take(folder, name).map_err(fs)).await
}

/// Waits until no other download holds the file at `name` (its writer keeps
/// the partial file's lock on it from the rename into place until its row is
/// in this machine's index, so a run that looks meanwhile would find a file
/// it cannot yet compare); `in_use` once the holder made no progress for
/// `patience`. Nothing there, or a file system without locks: no wait.
pub async fn settled(folder: &Folder, name: &str, patience: Duration) -> Result<(), FileError> {
    let fs = |e: FsError| FileError::new(e.code(), e.to_string(), false);
    let free = || -> Result<Option<()>, FileError> {
        let file = match folder.entry(name).map_err(fs)? {
            Entry::File(_) => folder.open_file(name, false).map_err(fs)?,
            _ => return Ok(Some(())),
        };
        let path = folder.path().join(name);
        match try_lock_shared(&file).map_err(|e| fs(FsError::of(&path, e)))? {
            Lock::Held => Ok(None),
            Lock::Taken | Lock::Unsupported => Ok(Some(())),
        }
    };
    wait_while_held(folder, name, patience, free).await
}

/// Tries `take` until it succeeds, waiting (without blocking a thread) while
/// the file at `name` changes; `in_use` once it has not changed for `patience`.
async fn wait_while_held<T>(
    folder: &Folder,
    name: &str,
    patience: Duration,
    mut take: impl FnMut() -> Result<Option<T>, FileError>,
) -> Result<T, FileError> {
    let fs = |e: FsError| FileError::new(e.code(), e.to_string(), false);
    let mut delay = Duration::from_millis(20);
    let mut seen: Option<Stat> = None;
    let mut since = Instant::now();
    loop {
        if let Some(taken) = take()? {
            return Ok(taken);
        }
        let now = match folder.entry(name).map_err(fs)? {
            Entry::File(st) => Some(st),
            _ => None,
        };
        if now != seen {
            seen = now;
            since = Instant::now();
        } else if since.elapsed() >= patience {
            return Err(FileError::new(
                ErrorCode::InUse,
                format!(
                    "another download into this folder holds {} and made no progress for {patience:?}; rerun when it has ended",
                    folder.path().join(name).display()
                ),
                false,
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// An earlier run's partial of this blob (the file `held`), if its sidecar
/// names this container and blob (anything else there is started over).
pub fn find(
    folder: &Folder,
    held: &Held,
    sidecar: &str,
    container: &str,
    blob: &str,
) -> Result<Option<Partial>, FsError> {
    if held.created {
        return Ok(None);
    }
    let len = stat_file(&held.file)
        .map_err(|e| FsError::of(folder.path(), e))?
        .size;
    let Entry::File(side) = folder.entry(sidecar)? else {
        return Ok(None);
    };
    if side.size > SIDECAR_MAX {
        return Ok(None);
    }
    let mut text = String::new();
    let read = folder
        .open_file(sidecar, false)?
        .take(SIDECAR_MAX)
        .read_to_string(&mut text);
    if read.is_err() {
        return Ok(None);
    }
    Ok(serde_json::from_str::<Sidecar>(&text)
        .ok()
        .filter(|s| s.container == container && s.blob == blob)
        .map(|s| Partial {
            len,
            etag: s.etag,
            size: s.size,
        }))
}

/// Blobs smaller than this are not resumed: they get no sidecar, so a
/// partial file of one is started over. Fetching one again costs less than
/// the sidecar's write and fsync on every download of it (a rerun after an
/// interruption fetches again at most `--parallel` such files).
pub const RESUME_MIN: u64 = 1 << 20;

/// Whether a download of a blob of `size` bytes keeps a sidecar, so that its
/// partial file can be resumed.
pub fn resumable(size: u64) -> bool {
    size >= RESUME_MIN
}

/// Records what the partial file is about to hold (written and synced before
/// its first byte, so a partial never outlives a sidecar that names it).
/// Private like the partial file.
pub fn record(folder: &Folder, sidecar: &str, s: &Sidecar) -> Result<(), FsError> {
    let path = folder.path().join(sidecar);
    let text = serde_json::to_vec(s).map_err(|e| FsError::of(&path, std::io::Error::other(e)))?;
    let (mut f, _) = folder.open_partial(sidecar)?;
    f.set_len(0).map_err(|e| FsError::of(&path, e))?;
    f.write_all(&text).map_err(|e| FsError::of(&path, e))?;
    f.sync_all().map_err(|e| FsError::of(&path, e))
}

/// Removes the partial file (still locked by `held`) and its sidecar.
pub fn remove(folder: &Folder, name: &str, sidecar: &str, held: &Held) -> Result<(), FsError> {
    folder.remove_file(sidecar)?;
    if folder.still_named(&held.file, name)? {
        folder.remove_file(name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::place::{partial_name, sidecar_name};
    use crate::download::safe_fs::tests::Scratch;

    #[test]
    fn a_partial_is_resumed_only_with_a_sidecar_naming_its_blob() {
        let s = Scratch::new("sidecar");
        let f = Folder::root(&s.0, None).expect("root");
        let (p, sc) = (partial_name("c", "x/b"), sidecar_name("c", "x/b"));
        let held = take(&f, &p).expect("take").expect("free");
        assert!(held.created);
        // Made by this attempt: nothing to resume.
        assert_eq!(find(&f, &held, &sc, "c", "x/b").expect("find"), None);
        drop(held);
        std::fs::write(s.0.join(&p), b"12345").expect("partial");
        let held = take(&f, &p).expect("take").expect("free");
        assert!(!held.created);
        // No sidecar: not resumed.
        assert_eq!(find(&f, &held, &sc, "c", "x/b").expect("find"), None);
        let side = Sidecar {
            container: "c".into(),
            blob: "x/b".into(),
            etag: "\"0x1\"".into(),
            size: 10,
        };
        record(&f, &sc, &side).expect("record");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(s.0.join(&sc))
                .expect("meta")
                .permissions(),
        );
        assert_eq!(mode & 0o077, 0, "sidecar {mode:o}");
        assert_eq!(
            find(&f, &held, &sc, "c", "x/b").expect("find"),
            Some(Partial {
                len: 5,
                etag: "\"0x1\"".into(),
                size: 10
            })
        );
        // A sidecar of another blob: not resumed.
        assert_eq!(find(&f, &held, &sc, "c", "y/b").expect("find"), None);
        assert_eq!(find(&f, &held, &sc, "d", "x/b").expect("find"), None);
        // Garbage in the sidecar: not resumed, not an error.
        std::fs::write(s.0.join(&sc), b"{not json").expect("garbage");
        assert_eq!(find(&f, &held, &sc, "c", "x/b").expect("find"), None);
        remove(&f, &p, &sc, &held).expect("remove");
        assert!(!s.0.join(&p).exists() && !s.0.join(&sc).exists());
    }

    #[test]
    fn one_writer_holds_a_partial_file_and_a_renamed_one_is_not_held() {
        let s = Scratch::new("lock");
        let f = Folder::root(&s.0, None).expect("root");
        let p = partial_name("c", "b");
        let first = take(&f, &p).expect("take").expect("free");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(s.0.join(&p)).expect("meta").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "created private");
        // A second writer (another open file, as another run has) waits.
        let other = Folder::root(&s.0, None).expect("root");
        assert!(take(&other, &p).expect("take").is_none());
        // The first places its file (renames it away) and lets go: the second
        // takes a new partial file, not the placed one.
        std::fs::rename(s.0.join(&p), s.0.join("b")).expect("place");
        drop(first);
        let second = take(&other, &p).expect("take").expect("free");
        assert!(second.created);
        let placed = std::fs::metadata(s.0.join("b")).expect("b");
        let held = stat_file(&second.file).expect("stat");
        assert_ne!(
            (held.dev, held.ino),
            (
                std::os::unix::fs::MetadataExt::dev(&placed),
                std::os::unix::fs::MetadataExt::ino(&placed)
            )
        );
    }

    #[tokio::test]
    async fn a_holder_that_makes_no_progress_is_in_use_after_patience() {
        let s = Scratch::new("busy");
        let f = Folder::root(&s.0, None).expect("root");
        let p = partial_name("c", "b");
        let _holder = take(&f, &p).expect("take").expect("free");
        let other = Folder::root(&s.0, None).expect("root");
        let e = lock(&other, &p, Duration::from_millis(50))
            .await
            .expect_err("busy");
        assert_eq!(e.code, ErrorCode::InUse);
        assert!(e.message.contains("another download"), "{}", e.message);
    }
}
