//! Folders and files under the destination without ever following a symbolic
//! link out of it: every component is opened relative to its parent's
//! descriptor with `O_NOFOLLOW`, so no path is ever resolved as a whole and a
//! link planted anywhere under the folder (before or during the run) is met as
//! a link and refused, never traversed. The destination folder itself is the
//! user's choice and is opened as given.

use crate::ui::error_code::ErrorCode;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::place::NAME_MAX;

/// Why a file cannot be placed (a per-file error, said with the local path).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(
        "{path}: a symbolic link is in the way; not followed (nothing is written through a link)"
    )]
    Symlink { path: String },
    #[error("{path}: a file is where a folder must be (another blob has this name)")]
    FileInTheWay { path: String },
    #[error("{path}: a folder is where the file must be (other blobs are under this name)")]
    FolderInTheWay { path: String },
    #[error("{path}: not a regular file or folder; refused")]
    Special { path: String },
    #[error("{path}: permission denied (the destination is not writable)")]
    Permission { path: String },
    #[error("{path}: no space left on the device")]
    Full { path: String },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

impl FsError {
    /// The error of an operation on `path`, named by what the user can fix.
    pub fn of(path: &Path, source: io::Error) -> Self {
        let path = path.display().to_string();
        match source.raw_os_error() {
            Some(libc::ELOOP) => FsError::Symlink { path },
            Some(libc::ENOTDIR) => FsError::FileInTheWay { path },
            Some(libc::EISDIR) => FsError::FolderInTheWay { path },
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                FsError::Permission { path }
            }
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => FsError::Full { path },
            _ => FsError::Io { path, source },
        }
    }

    /// A code for the report.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::Symlink { .. } => ErrorCode::Symlink,
            FsError::FileInTheWay { .. } | FsError::FolderInTheWay { .. } => ErrorCode::InTheWay,
            FsError::Special { .. } => ErrorCode::SpecialFile,
            FsError::Permission { .. } => ErrorCode::Permission,
            FsError::Full { .. } => ErrorCode::DiskFull,
            FsError::Io { .. } => ErrorCode::LocalIo,
        }
    }
}

/// What is at a name in a folder, without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Absent,
    File(Stat),
    Folder,
    Symlink,
    Other,
}

/// One version of a file as `stat` sees it: which inode, its size and times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Its permission bits.
    pub mode: u32,
}

impl Stat {
    fn of(st: &libc::stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: st.st_mtime.saturating_mul(1_000_000_000) + st.st_mtime_nsec,
            ctime_ns: st.st_ctime.saturating_mul(1_000_000_000) + st.st_ctime_nsec,
            mode: st.st_mode & 0o777,
        }
    }

    /// The modification time in whole seconds since the epoch.
    pub fn mtime(&self) -> i64 {
        self.mtime_ns.div_euclid(1_000_000_000)
    }

    /// Whether `other` is this very version: the same inode, size and
    /// modification time. (Not the change time: renaming a file changes it.)
    pub fn same_version(&self, other: &Stat) -> bool {
        (self.dev, self.ino, self.size, self.mtime_ns)
            == (other.dev, other.ino, other.size, other.mtime_ns)
    }

    /// Whether `other` is the same inode (for a lock taken on a name).
    pub fn same_inode(&self, other: &Stat) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// The `stat` of an open file.
pub fn stat_file(file: &File) -> io::Result<Stat> {
    // SAFETY: all zeros is a valid `stat`; fstat writes it before it is read.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor the caller owns.
    check(unsafe { libc::fstat(file.as_raw_fd(), &mut st) })?;
    Ok(Stat::of(&st))
}

/// The process's umask, read once (Linux reports it in /proc/self/status;
/// elsewhere it is set and put back before any file of the run is created).
pub fn process_umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let reported = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok());
        reported.unwrap_or_else(|| {
            // SAFETY: umask only swaps the mask; the old one is put back.
            let old = unsafe { libc::umask(0o077) };
            // SAFETY: as above.
            unsafe { libc::umask(old) };
            old
        })
    })
}

/// Sets a file's permission bits. A file system that keeps none (vfat,
/// exFAT) refuses with EPERM though the file is ours: its mount options
/// decide, and that is not an error.
pub fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    // SAFETY: fchmod on a descriptor the caller owns; the result is checked.
    match check(unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) }) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EOPNOTSUPP)) => Ok(()),
        r => r.map(|_| ()),
    }
}

/// What one writer's exclusive lock on a file said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    Taken,
    /// Another open file holds it (another run, or another file of this run).
    Held,
    /// The file system takes no locks (some network and FUSE file systems):
    /// nothing keeps a second writer out there.
    Unsupported,
}

/// Takes `flock(LOCK_EX | LOCK_NB)` on `file`: never waits. The lock lives
/// as long as the open file (any process that dies drops it).
pub fn try_lock(file: &File) -> io::Result<Lock> {
    flock_now(file, libc::LOCK_EX)
}

/// Takes `flock(LOCK_SH | LOCK_NB)` on `file`: `Held` while a writer holds
/// the exclusive lock (a download placing or replacing that very file).
pub fn try_lock_shared(file: &File) -> io::Result<Lock> {
    flock_now(file, libc::LOCK_SH)
}

fn flock_now(file: &File, how: libc::c_int) -> io::Result<Lock> {
    // SAFETY: flock on a descriptor the caller owns; the result is checked.
    match check(unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) }) {
        Ok(_) => Ok(Lock::Taken),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(Lock::Held),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) =>
        {
            Ok(Lock::Unsupported)
        }
        Err(e) => Err(e),
    }
}

fn cname(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A folder opened by descriptor, and its path for messages.
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    path: PathBuf,
    /// `--umask`: the mask for the folders and files the run makes (else
    /// the process's own).
    umask: Option<u32>,
}

impl Folder {
    /// The destination folder, created (with its parents) if missing, and
    /// then made durable in its parent.
    pub fn root(path: &Path, umask: Option<u32>) -> Result<Self, FsError> {
        let made = !path.exists();
        std::fs::create_dir_all(path).map_err(|e| FsError::of(path, e))?;
        if made {
            if let Some(mask) = umask {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::Permissions::from_mode(0o777 & !mask);
                std::fs::set_permissions(path, mode).map_err(|e| FsError::of(path, e))?;
            }
            sync_parent(path);
        }
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| FsError::of(path, io::Error::from_raw_os_error(libc::EINVAL)))?;
        // SAFETY: `c` is a valid NUL-terminated string; the result is checked.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })
        .map_err(|e| FsError::of(path, e))?;
        Ok(Self {
            // SAFETY: `fd` was just opened and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_path_buf(),
            umask,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor, for the placing calls (`placing`).
    pub(super) fn raw_fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// The mode a file placed here takes: 0666 less the umask, as `cp`,
    /// `curl` and `rclone` give new files.
    pub fn file_mode(&self) -> u32 {
        0o666 & !self.umask.unwrap_or_else(process_umask)
    }

    /// The file system's longest name in this folder (`NAME_MAX` if unknown).
    pub fn name_max(&self) -> usize {
        // SAFETY: fpathconf only reads the descriptor we own.
        let n = unsafe { libc::fpathconf(self.fd.as_raw_fd(), libc::_PC_NAME_MAX) };
        usize::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(NAME_MAX)
    }

    /// The child folder `name`, created if missing; a link or a file there is
    /// refused.
    pub fn child(&self, name: &str, create: bool) -> Result<Folder, FsError> {
        let path = self.path.join(name);
        let c = cname(name).map_err(|e| FsError::of(&path, e))?;
        let open = || {
            // SAFETY: valid descriptor and string; the result is checked.
            check(unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            })
        };
        let fd = match open() {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
                // SAFETY: as above.
                let made =
                    match check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o777) }) {
                        Ok(_) => true,
                        // Another file of this run made it first.
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
                        Err(e) => return Err(FsError::of(&path, e)),
                    };
                let fd = open().map_err(|e| self.refusal(name, e))?;
                if made {
                    self.made(fd, &path)?;
                }
                fd
            }
            Err(e) => return Err(self.refusal(name, e)),
        };
        Ok(Folder {
            // SAFETY: just opened, owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path,
            umask: self.umask,
        })
    }

    /// A folder this run just made: `--umask`'s mode (mkdir took the
    /// process's), then its entry made durable here, so a placed file is
    /// never lost with the folder that holds it.
    fn made(&self, fd: libc::c_int, path: &Path) -> Result<(), FsError> {
        if let Some(mask) = self.umask {
            // SAFETY: fchmod on the descriptor just opened; result checked.
            check(unsafe { libc::fchmod(fd, (0o777 & !mask) as libc::mode_t) })
                .map_err(|e| FsError::of(path, e))?;
        }
        self.sync()
    }

    /// Opening `name` as a folder failed: say what is there instead. With
    /// `O_DIRECTORY | O_NOFOLLOW` a link gives ELOOP on Linux but ENOTDIR on
    /// some systems, so the entry is looked at rather than the errno trusted.
    fn refusal(&self, name: &str, e: io::Error) -> FsError {
        let path = self.path.join(name);
        match self.entry(name) {
            Ok(Entry::Symlink) => FsError::Symlink {
                path: path.display().to_string(),
            },
            Ok(Entry::File(_)) => FsError::FileInTheWay {
                path: path.display().to_string(),
            },
            Ok(Entry::Other) => FsError::Special {
                path: path.display().to_string(),
            },
            _ => FsError::of(&path, e),
        }
    }

    /// The folder that holds the file at `components` (all but the last),
    /// created as needed.
    pub fn parent_of(&self, components: &[&str], create: bool) -> Result<Folder, FsError> {
        let mut at = self.child_self()?;
        if let Some((_, dirs)) = components.split_last() {
            for d in dirs {
                at = at.child(d, create)?;
            }
        }
        Ok(at)
    }

    fn child_self(&self) -> Result<Folder, FsError> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| FsError::of(&self.path, e))?;
        Ok(Folder {
            fd,
            path: self.path.clone(),
            umask: self.umask,
        })
    }

    /// What is at `name` here, not following a link.
    pub fn entry(&self, name: &str) -> Result<Entry, FsError> {
        let path = self.path.join(name);
        let c = cname(name).map_err(|e| FsError::of(&path, e))?;
        // SAFETY: `st` is written by fstatat before it is read; all zeros is a
        // valid `stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(Entry::Absent),
                _ => Err(FsError::of(&path, e)),
            };
        }
        Ok(match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Entry::File(Stat::of(&st)),
            libc::S_IFDIR => Entry::Folder,
            libc::S_IFLNK => Entry::Symlink,
            _ => Entry::Other,
        })
    }

    /// Opens the regular file `name` here with `O_NOFOLLOW`: for reading, or
    /// for writing (created if missing, never truncated here).
    pub fn open_file(&self, name: &str, write: bool) -> Result<File, FsError> {
        let path = self.path.join(name);
        let c = cname(name).map_err(|e| FsError::of(&path, e))?;
        let flags = if write {
            libc::O_RDWR | libc::O_CREAT
        } else {
            libc::O_RDONLY
        } | libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK;
        // SAFETY: valid descriptor and string; the result is checked.
        let fd = check(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, 0o666) })
            .map_err(|e| FsError::of(&path, e))?;
        // SAFETY: just opened, owned by nothing else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // O_NONBLOCK kept a FIFO from blocking the open; a regular file only.
        let meta = file.metadata().map_err(|e| FsError::of(&path, e))?;
        if !meta.is_file() {
            return Err(FsError::Special {
                path: path.display().to_string(),
            });
        }
        set_blocking(&file).map_err(|e| FsError::of(&path, e))?;
        Ok(file)
    }

    /// Opens the partial file `name` for writing, created private (0600) if
    /// missing: (the file, whether this call created it). A link or
    /// anything but a regular file there is refused.
    pub fn open_partial(&self, name: &str) -> Result<(File, bool), FsError> {
        let path = self.path.join(name);
        let c = cname(name).map_err(|e| FsError::of(&path, e))?;
        let base = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
        loop {
            // SAFETY: valid descriptor and string; the result is checked.
            let made = check(unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    base | libc::O_CREAT | libc::O_EXCL,
                    0o600,
                )
            });
            let (fd, created) = match made {
                Ok(fd) => (fd, true),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    // SAFETY: as above.
                    match check(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), base) }) {
                        Ok(fd) => (fd, false),
                        // Removed between the two calls: create it after all.
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                        Err(e) => return Err(FsError::of(&path, e)),
                    }
                }
                Err(e) => return Err(FsError::of(&path, e)),
            };
            // SAFETY: just opened, owned by nothing else.
            let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            let meta = file.metadata().map_err(|e| FsError::of(&path, e))?;
            if !meta.is_file() {
                return Err(FsError::Special {
                    path: path.display().to_string(),
                });
            }
            set_blocking(&file).map_err(|e| FsError::of(&path, e))?;
            return Ok((file, created));
        }
    }

    /// Whether `name` here still is the inode `file` has open (a lock taken
    /// on a file another writer has since renamed or removed guards nothing).
    pub fn still_named(&self, file: &File, name: &str) -> Result<bool, FsError> {
        let path = self.path.join(name);
        let held = stat_file(file).map_err(|e| FsError::of(&path, e))?;
        Ok(match self.entry(name)? {
            Entry::File(now) => now.same_inode(&held),
            _ => false,
        })
    }

    /// Removes the file `name` here if it is there (never a folder).
    pub fn remove_file(&self, name: &str) -> Result<(), FsError> {
        let path = self.path.join(name);
        let c = cname(name).map_err(|e| FsError::of(&path, e))?;
        // SAFETY: valid descriptor and string; the result is checked.
        match check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(FsError::of(&path, e)),
        }
    }

    /// Renames `from` to `to` within this folder (replacing a file at `to`;
    /// a folder at `to` is refused by the system). The link `to` names is
    /// replaced, never followed.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let path = self.path.join(to);
        let (a, b) = (
            cname(from).map_err(|e| FsError::of(&path, e))?,
            cname(to).map_err(|e| FsError::of(&path, e))?,
        );
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid descriptor and strings; the result is checked.
        check(unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) })
            .map_err(|e| FsError::of(&path, e))?;
        Ok(())
    }

    /// The folder's device and inode: which folder this is, whatever its path.
    pub fn identity(&self) -> Result<(u64, u64), FsError> {
        // SAFETY: all zeros is a valid `stat`; fstat writes it before it is read.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor we own.
        check(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })
            .map_err(|e| FsError::of(&self.path, e))?;
        Ok((st.st_dev, st.st_ino))
    }

    /// Makes the folder's entries (a rename) durable.
    pub fn sync(&self) -> Result<(), FsError> {
        // SAFETY: fsync on a descriptor we own.
        check(unsafe { libc::fsync(self.fd.as_raw_fd()) })
            .map(|_| ())
            .map_err(|e| FsError::of(&self.path, e))
    }
}

/// Makes a folder's entry durable in its parent (best effort: the folder is
/// the user's `--to`, and a parent that cannot be opened is theirs too).
fn sync_parent(path: &Path) {
    let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return;
    };
    if let Ok(dir) = File::open(parent) {
        let _ = dir.sync_all();
    }
}

fn set_blocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; results checked.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) })?;
    Ok(())
}

#[cfg(test)]
#[path = "safe_fs_tests.rs"]
pub(crate) mod tests;
