//! Folders and files under the destination without ever following a symbolic
//! link out of it: every component is opened relative to its parent's
//! descriptor with `O_NOFOLLOW`, so no path is ever resolved as a whole and a
//! link planted anywhere under the folder (before or during the run) is met as
//! a link and refused, never traversed. The destination folder itself is the
//! user's choice and is opened as given.

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
    pub fn code(&self) -> &'static str {
        match self {
            FsError::Symlink { .. } => "symlink",
            FsError::FileInTheWay { .. } | FsError::FolderInTheWay { .. } => "in_the_way",
            FsError::Special { .. } => "special_file",
            FsError::Permission { .. } => "permission",
            FsError::Full { .. } => "disk_full",
            FsError::Io { .. } => "local_io",
        }
    }
}

/// What is at a name in a folder, without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Absent,
    File { size: u64, mtime: i64 },
    Folder,
    Symlink,
    Other,
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
}

impl Folder {
    /// The destination folder, created (with its parents) if missing.
    pub fn root(path: &Path) -> Result<Self, FsError> {
        std::fs::create_dir_all(path).map_err(|e| FsError::of(path, e))?;
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
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
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
                match check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o777) }) {
                    Ok(_) => {}
                    // Another file of this run made it first.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(FsError::of(&path, e)),
                }
                open().map_err(|e| self.refusal(name, e))?
            }
            Err(e) => return Err(self.refusal(name, e)),
        };
        Ok(Folder {
            // SAFETY: just opened, owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path,
        })
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
            Ok(Entry::File { .. }) => FsError::FileInTheWay {
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
            libc::S_IFREG => Entry::File {
                size: u64::try_from(st.st_size).unwrap_or(0),
                mtime: st.st_mtime,
            },
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

    /// Makes the folder's entries (a rename) durable.
    pub fn sync(&self) -> Result<(), FsError> {
        // SAFETY: fsync on a descriptor we own.
        check(unsafe { libc::fsync(self.fd.as_raw_fd()) })
            .map(|_| ())
            .map_err(|e| FsError::of(&self.path, e))
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
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    /// A fresh folder under the system's temporary directory, removed on drop.
    pub struct Scratch(pub PathBuf);

    impl Scratch {
        pub fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!(
                "relay-dl-{tag}-{}-{}",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::fs::create_dir_all(&p).expect("scratch dir");
            Self(p)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(f: &Folder, comps: &[&str], body: &[u8]) -> Result<(), FsError> {
        let parent = f.parent_of(comps, true)?;
        let leaf = comps.last().copied().unwrap_or_default();
        if parent.entry(leaf)? == Entry::Folder {
            return Err(FsError::FolderInTheWay {
                path: parent.path().join(leaf).display().to_string(),
            });
        }
        let tmp = format!(".{leaf}.relay-partial");
        let mut file = parent.open_file(&tmp, true)?;
        file.write_all(body).expect("write");
        parent.rename(&tmp, leaf)
    }

    #[test]
    fn creates_folders_and_files_under_the_root() {
        let s = Scratch::new("create");
        let root = Folder::root(&s.0.join("dest/deeper")).expect("root");
        write(&root, &["a", "b", "c.txt"], b"hello").expect("write");
        let got = std::fs::read(s.0.join("dest/deeper/a/b/c.txt")).expect("read");
        assert_eq!(got, b"hello");
        assert!(!s.0.join("dest/deeper/a/b/.c.txt.relay-partial").exists());
        assert!(root.name_max() >= 14);
        let mut back = String::new();
        root.parent_of(&["a", "b", "c.txt"], false)
            .expect("parent")
            .open_file("c.txt", false)
            .expect("open")
            .read_to_string(&mut back)
            .expect("read");
        assert_eq!(back, "hello");
    }

    #[test]
    fn a_symlinked_folder_inside_the_root_is_not_followed() {
        let s = Scratch::new("link");
        let outside = s.0.join("outside");
        std::fs::create_dir_all(&outside).expect("outside");
        let dest = s.0.join("dest");
        std::fs::create_dir_all(&dest).expect("dest");
        symlink(&outside, dest.join("sub")).expect("symlink");
        let root = Folder::root(&dest).expect("root");
        let e = write(&root, &["sub", "x"], b"evil").expect_err("refused");
        assert!(matches!(e, FsError::Symlink { .. }), "{e:?}");
        assert!(e.to_string().contains("symbolic link"));
        assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
        // Deeper too: a link two levels down.
        std::fs::create_dir_all(dest.join("a")).expect("a");
        symlink(&outside, dest.join("a/b")).expect("symlink");
        assert!(matches!(
            write(&root, &["a", "b", "c", "x"], b"evil"),
            Err(FsError::Symlink { .. })
        ));
        assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
    }

    #[test]
    fn a_symlink_at_the_file_name_is_not_written_through() {
        let s = Scratch::new("leaf");
        let target = s.0.join("target");
        std::fs::write(&target, b"precious").expect("target");
        let dest = s.0.join("dest");
        std::fs::create_dir_all(&dest).expect("dest");
        symlink(&target, dest.join("f")).expect("symlink");
        let root = Folder::root(&dest).expect("root");
        assert_eq!(root.entry("f").expect("entry"), Entry::Symlink);
        assert!(matches!(
            root.open_file("f", true),
            Err(FsError::Symlink { .. })
        ));
        assert!(matches!(
            root.open_file("f", false),
            Err(FsError::Symlink { .. })
        ));
        // A partial name planted as a link is refused too.
        symlink(&target, dest.join(".g.relay-partial")).expect("symlink");
        assert!(matches!(
            root.open_file(".g.relay-partial", true),
            Err(FsError::Symlink { .. })
        ));
        assert_eq!(std::fs::read(&target).expect("read"), b"precious");
    }

    #[test]
    fn a_file_beside_a_folder_of_the_same_name_fails_only_the_one_that_cannot_be_placed() {
        // `x` first, then `x/y`: x/y fails, x is kept.
        let s = Scratch::new("xy");
        let root = Folder::root(&s.0).expect("root");
        write(&root, &["x"], b"file").expect("x");
        let e = write(&root, &["x", "y"], b"nested").expect_err("x/y");
        assert!(matches!(e, FsError::FileInTheWay { .. }), "{e:?}");
        assert_eq!(std::fs::read(s.0.join("x")).expect("x"), b"file");
        // `p/q` first, then `p`: p fails, p/q is kept.
        write(&root, &["p", "q"], b"nested").expect("p/q");
        let e = write(&root, &["p"], b"file").expect_err("p");
        assert!(matches!(e, FsError::FolderInTheWay { .. }), "{e:?}");
        assert_eq!(std::fs::read(s.0.join("p/q")).expect("p/q"), b"nested");
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let s = Scratch::new("fifo");
        let c = CString::new(s.0.join("pipe").as_os_str().as_encoded_bytes()).expect("c");
        // SAFETY: a valid path; the result is checked.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let root = Folder::root(&s.0).expect("root");
        assert_eq!(root.entry("pipe").expect("entry"), Entry::Other);
        assert!(matches!(
            root.open_file("pipe", false),
            Err(FsError::Special { .. })
        ));
        assert!(matches!(
            root.child("pipe", true),
            Err(FsError::Special { .. })
        ));
    }

    #[test]
    fn an_unwritable_destination_is_a_clear_error() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            eprintln!("skipped: root writes through any mode bits");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let s = Scratch::new("ro");
        let ro = s.0.join("ro");
        std::fs::create_dir_all(&ro).expect("ro");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        let root = Folder::root(&ro).expect("root");
        let e = write(&root, &["a", "b"], b"x").expect_err("refused");
        assert!(matches!(e, FsError::Permission { .. }), "{e:?}");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}
