//! Giving a verified partial file its final name, never over a file nobody
//! asked to replace.
//!
//! - Nothing was at the name when the download was decided: the partial file
//!   takes the name only if it is still free (`renameat2(RENAME_NOREPLACE)`);
//!   a file that appeared meanwhile (or one whose name differs only in case,
//!   on a file system that folds case) is kept and the file refused.
//! - `--overwrite` decided to replace the local file it saw (and compared):
//!   the two swap names atomically (`RENAME_EXCHANGE`), and the one swapped
//!   out must be the very version seen (inode, size, modification time),
//!   else they swap back and the file is refused. That version is held open
//!   and locked meanwhile, so no second download takes it for its partial.
//!
//! File systems without these flags (NFS, FUSE file systems, older kernels)
//! fall back: a hard link then an unlink (fails if the name is taken: no
//! replacement either), else the check and the rename under an exclusive
//! lock on the folder, which every run of this client takes there. Only a
//! writer that is not this client can then slip a file in between the check
//! and the rename, on such a file system only.

use std::fs::File;
use std::io;

use super::safe_fs::{Entry, Folder, FsError, Lock, Stat, stat_file, try_lock};

/// Why the partial file was not placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Something is at the name now that was not when the download was decided.
    Appeared,
    /// The local file is no longer the version that was compared.
    Changed,
}

impl Refused {
    pub fn message(self) -> &'static str {
        match self {
            Refused::Appeared => {
                "a file appeared at this name while the blob was downloaded (or one whose name differs only in case, where the file system folds case); not replaced without --overwrite, and the download is discarded"
            }
            Refused::Changed => {
                "the local file changed, or was replaced, after it was compared; that version is not replaced, and the download is discarded (rerun to compare it)"
            }
        }
    }
}

const RENAME_NOREPLACE: libc::c_uint = 1;
const RENAME_EXCHANGE: libc::c_uint = 2;

fn cname(name: &str) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(target_os = "linux")]
fn rename2(dir: &Folder, from: &str, to: &str, flags: libc::c_uint) -> io::Result<()> {
    let (a, b) = (cname(from)?, cname(to)?);
    let fd = dir.raw_fd();
    // SAFETY: valid descriptor and NUL-terminated strings; the result is checked.
    let r = unsafe { libc::syscall(libc::SYS_renameat2, fd, a.as_ptr(), fd, b.as_ptr(), flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
fn rename2(_: &Folder, _: &str, _: &str, _: libc::c_uint) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// Whether an error says the file system (or kernel) lacks the operation.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::EPERM)
    )
}

fn os(dir: &Folder, name: &str) -> impl Fn(io::Error) -> FsError {
    let path = dir.path().join(name);
    move |e| FsError::of(&path, e)
}

/// Places `partial` at `leaf` only if nothing is there.
pub fn without_replacing(
    dir: &Folder,
    partial: &str,
    leaf: &str,
) -> Result<Result<(), Refused>, FsError> {
    match rename2(dir, partial, leaf, RENAME_NOREPLACE) {
        Ok(()) => return Ok(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(Err(Refused::Appeared)),
        Err(e) if unsupported(&e) && e.raw_os_error() != Some(libc::EPERM) => {}
        Err(e) => return Err(os(dir, leaf)(e)),
    }
    match link(dir, partial, leaf) {
        Ok(()) => {
            dir.remove_file(partial)?;
            return Ok(Ok(()));
        }
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(Err(Refused::Appeared)),
        Err(e) if unsupported(&e) || e.raw_os_error() == Some(libc::EMLINK) => {}
        Err(e) => return Err(os(dir, leaf)(e)),
    }
    let _guard = FolderLock::take(dir)?;
    if dir.entry(leaf)? != Entry::Absent {
        return Ok(Err(Refused::Appeared));
    }
    rename_over(dir, partial, leaf)?;
    Ok(Ok(()))
}

/// Places `partial` at `leaf` in place of the version `seen` there, and of
/// no other.
pub fn replacing(
    dir: &Folder,
    partial: &str,
    leaf: &str,
    seen: &Stat,
) -> Result<Result<(), Refused>, FsError> {
    match dir.entry(leaf)? {
        // Gone meanwhile: nothing is replaced by taking the free name.
        Entry::Absent => return without_replacing(dir, partial, leaf),
        Entry::File(now) if now.same_version(seen) => {}
        _ => return Ok(Err(Refused::Changed)),
    }
    let old = match dir.open_file(leaf, false) {
        Ok(f) => f,
        Err(_) => return Ok(Err(Refused::Changed)),
    };
    let held = stat_file(&old).map_err(os(dir, leaf))?;
    let locked = try_lock(&old).map_err(os(dir, leaf))?;
    if !held.same_version(seen) || locked == Lock::Held {
        return Ok(Err(Refused::Changed));
    }
    match rename2(dir, partial, leaf, RENAME_EXCHANGE) {
        Ok(()) => swapped(dir, partial, leaf, &old, seen),
        Err(e) if unsupported(&e) && e.raw_os_error() != Some(libc::EPERM) => {
            let _guard = FolderLock::take(dir)?;
            match dir.entry(leaf)? {
                Entry::File(now) if now.same_version(seen) && now.same_inode(&held) => {
                    rename_over(dir, partial, leaf)?;
                    Ok(Ok(()))
                }
                _ => Ok(Err(Refused::Changed)),
            }
        }
        Err(e) => Err(os(dir, leaf)(e)),
    }
}

/// After the exchange: the version swapped out (now at `partial`) must be the
/// one seen; it is removed, or swapped back.
fn swapped(
    dir: &Folder,
    partial: &str,
    leaf: &str,
    old: &File,
    seen: &Stat,
) -> Result<Result<(), Refused>, FsError> {
    let held = stat_file(old).map_err(os(dir, leaf))?;
    let out = match dir.entry(partial)? {
        Entry::File(st) => st.same_inode(&held) && held.same_version(seen),
        _ => false,
    };
    if out {
        dir.remove_file(partial)?;
        return Ok(Ok(()));
    }
    rename2(dir, partial, leaf, RENAME_EXCHANGE).map_err(os(dir, leaf))?;
    Ok(Err(Refused::Changed))
}

fn link(dir: &Folder, from: &str, to: &str) -> io::Result<()> {
    let (a, b) = (cname(from)?, cname(to)?);
    let fd = dir.raw_fd();
    // SAFETY: valid descriptor and strings; the result is checked.
    if unsafe { libc::linkat(fd, a.as_ptr(), fd, b.as_ptr(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `renameat`, replacing whatever is at `to` (only under `FolderLock`, after
/// the check).
fn rename_over(dir: &Folder, from: &str, to: &str) -> Result<(), FsError> {
    let (a, b) = (
        cname(from).map_err(os(dir, to))?,
        cname(to).map_err(os(dir, to))?,
    );
    let fd = dir.raw_fd();
    // SAFETY: valid descriptor and strings; the result is checked.
    if unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) } < 0 {
        return Err(os(dir, to)(io::Error::last_os_error()));
    }
    Ok(())
}

/// An exclusive lock on a folder, on a descriptor of its own (a lock is per
/// open file: the folder's shared descriptor would not keep this process's
/// other files out). A file system that takes no locks on folders is used
/// without one.
struct FolderLock {
    /// Held open while the lock is wanted; closing it lets go.
    _held: Option<File>,
}

impl FolderLock {
    fn take(dir: &Folder) -> Result<Self, FsError> {
        let dot = cname(".").map_err(os(dir, "."))?;
        // SAFETY: valid descriptor and string; the result is checked.
        let fd = unsafe {
            libc::openat(
                dir.raw_fd(),
                dot.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(os(dir, ".")(io::Error::last_os_error()));
        }
        // SAFETY: just opened, owned by nothing else.
        let file = File::from(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        });
        // The lock is held for one stat and one rename: waiting on it in
        // place is brief, and off the async workers.
        let r = tokio::task::block_in_place(|| {
            // SAFETY: flock on the descriptor just opened.
            unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) }
        });
        Ok(FolderLock {
            _held: (r == 0).then_some(file),
        })
    }
}

#[cfg(test)]
#[path = "placing_tests.rs"]
mod tests;
