//! Local deletes below DEST, by descriptor: every folder on the way is
//! opened from DEST's descriptor with `O_NOFOLLOW` (`download::safe_fs`), so
//! a symbolic link anywhere in the path, planted before the run or during
//! it, is met as a link and never followed; only a regular file is removed
//! (renamed aside and `unlinkat` on its parent's descriptor), only while its
//! `stat` is still the one the walk saw (a file saved over or edited since is
//! someone's work), and a file this machine placed only while its `stat` is
//! also still the one the index recorded. Folders are never removed, empty or
//! not.

use std::path::Path;

use relay_proto::sync::delete::Origin;
use relay_proto::sync::entry;

use crate::download::placing::without_replacing;
use crate::download::safe_fs::{Entry, Folder, FsError, Stat};
use crate::index::{FileStat, Index, IndexError};

/// What the index says this machine placed, by name below DEST.
pub trait PlacedRecords {
    /// The `stat` recorded right after placing `name`, if any.
    fn recorded(&self, name: &str) -> Result<Option<FileStat>, IndexError>;
    /// `name` is gone: its record describes nothing any more.
    fn forget(&self, name: &str) -> Result<(), IndexError>;
}

impl PlacedRecords for Index {
    fn recorded(&self, name: &str) -> Result<Option<FileStat>, IndexError> {
        Ok(self.get(name)?.map(|r| r.stat))
    }

    fn forget(&self, name: &str) -> Result<(), IndexError> {
        Index::forget(self, name)
    }
}

/// Why a local candidate was not deleted, when it should have been.
#[derive(Debug, thiserror::Error)]
pub enum LocalDeleteError {
    #[error("{name:?} is not a plain relative name below DEST; refused")]
    BadName { name: String },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("{path}: DEST is not a folder")]
    NotAFolder { path: String },
}

/// What deleting one local candidate came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalOutcome {
    Deleted,
    AlreadyGone,
    /// Kept: not the file the merge saw (the reason).
    Kept(String),
}

/// The `/`-separated components of a candidate's name, or `None` if it is
/// not a plain relative name: empty, absolute, with an empty, `.` or `..`
/// component, or a NUL. Such a name never comes from a walk below DEST, so
/// it is refused rather than cleaned up.
pub fn components(name: &str) -> Option<Vec<&str>> {
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    let parts: Vec<&str> = name.split('/').collect();
    let plain = |p: &&str| !p.is_empty() && *p != "." && *p != "..";
    parts.iter().all(plain).then_some(parts)
}

/// Deletes local candidates below one DEST.
pub struct LocalDeleter<'a> {
    root: Folder,
    records: &'a (dyn PlacedRecords + Sync),
}

impl<'a> LocalDeleter<'a> {
    /// DEST, opened as given (it is the user's choice, and may itself be a
    /// link); it must already be a folder: a delete never creates one.
    pub fn open(
        dest: &Path,
        records: &'a (dyn PlacedRecords + Sync),
    ) -> Result<Self, LocalDeleteError> {
        if !dest.is_dir() {
            return Err(LocalDeleteError::NotAFolder {
                path: dest.display().to_string(),
            });
        }
        Ok(Self {
            root: Folder::root(dest, None)?,
            records,
        })
    }

    /// Deletes `name` if it is still what the merge saw: the file must still
    /// have the `stat` the walk saw (`walked`), and a `Placed` one also the
    /// `stat` the index recorded, right before it is unlinked. Changed since
    /// (even during this run, even with `--delete-unknown`), it is someone's
    /// work and kept.
    pub fn delete(
        &self,
        name: &str,
        origin: Origin,
        walked: &entry::FileStat,
    ) -> Result<LocalOutcome, LocalDeleteError> {
        let bad = || LocalDeleteError::BadName {
            name: name.to_string(),
        };
        let parts = components(name).ok_or_else(bad)?;
        let (leaf, dirs) = parts.split_last().ok_or_else(bad)?;
        let Some(parent) = self.walk(dirs)? else {
            self.records.forget(name)?;
            return Ok(LocalOutcome::AlreadyGone);
        };
        let now = match parent.entry(leaf)? {
            Entry::File(stat) => stat,
            Entry::Absent => {
                self.records.forget(name)?;
                return Ok(LocalOutcome::AlreadyGone);
            }
            Entry::Symlink => return Ok(kept("a symbolic link is there now (not followed)")),
            Entry::Folder => return Ok(kept("a folder is there now")),
            Entry::Other => return Ok(kept("not a regular file")),
        };
        if !as_walked(&now, walked) {
            return Ok(kept(CHANGED_SINCE_WALK));
        }
        if origin == Origin::Placed {
            match self.records.recorded(name)? {
                Some(recorded) if recorded == index_stat(&now) => {}
                Some(_) => return Ok(kept("changed since this machine placed it")),
                None => return Ok(kept("the index no longer says this machine placed it")),
            }
        }
        let outcome = unlink_if_still(&parent, leaf, &now)?;
        if matches!(outcome, LocalOutcome::Deleted | LocalOutcome::AlreadyGone) {
            self.records.forget(name)?;
        }
        Ok(outcome)
    }

    /// The folder holding the leaf, opened component by component with
    /// `O_NOFOLLOW`; `None` if a component is missing (or a file: then
    /// nothing below it exists). A link is an error, never traversed; one
    /// swapped in between the look and the open fails the open (ELOOP).
    fn walk(&self, dirs: &[&str]) -> Result<Option<Folder>, LocalDeleteError> {
        let mut at = self.root.parent_of(&[], false)?;
        for d in dirs {
            match at.entry(d)? {
                Entry::Folder => at = at.child(d, false)?,
                Entry::Absent | Entry::File(_) | Entry::Other => return Ok(None),
                Entry::Symlink => {
                    return Err(FsError::Symlink {
                        path: at.path().join(d).display().to_string(),
                    }
                    .into());
                }
            }
        }
        Ok(Some(at))
    }
}

const MOVED: &str = "replaced while it was being deleted";

/// The reason a file edited or saved over between the walk and its delete
/// is kept (a `KeptChanged` outcome, reported as a skip with this reason).
pub const CHANGED_SINCE_WALK: &str = "changed since the walk saw it";

/// Whether `now` is still the file the walk saw: size and modification time,
/// and where the walk had one its identity (inode, device, change time; a
/// write in place within the same modification time still moves the change
/// time, and a file saved over is a new inode).
fn as_walked(now: &Stat, walked: &entry::FileStat) -> bool {
    let same_identity = walked
        .identity
        .is_none_or(|id| (id.ino, id.dev, id.ctime_ns) == (now.ino, now.dev, now.ctime_ns));
    now.size == walked.size && now.mtime_ns == walked.mtime_ns && same_identity
}

/// Removes `leaf` from `parent` only if it is still the version `seen`
/// (the one just checked against the index). It is first renamed to a name
/// of this run's own, so that what is looked at again and then unlinked is
/// what was taken away: an editor saving over the file between the check and
/// the unlink (a new inode at the name) gets its file put back, not deleted.
/// (The change time is not compared: the rename itself changes it.)
pub fn unlink_if_still(parent: &Folder, leaf: &str, seen: &Stat) -> Result<LocalOutcome, FsError> {
    let aside = format!(".relay-deleting-{:016x}", rand::random::<u64>());
    match parent.rename(leaf, &aside) {
        Ok(()) => {}
        Err(FsError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
            return Ok(LocalOutcome::AlreadyGone);
        }
        Err(e) => return Err(e),
    }
    match parent.entry(&aside)? {
        Entry::File(taken) if taken.same_version(seen) => {
            parent.remove_file(&aside)?;
            Ok(LocalOutcome::Deleted)
        }
        _ => put_back(parent, &aside, leaf).map(|()| kept(MOVED)),
    }
}

/// Gives `leaf` back what was taken aside, unless its name was taken again
/// meanwhile: then the file stays under the aside name, and the error says
/// where. The name is taken only if still free (`placing::without_replacing`:
/// `renameat2(RENAME_NOREPLACE)` or its fallbacks), never by a look and then
/// a rename, which would replace a file saved there in between.
fn put_back(parent: &Folder, aside: &str, leaf: &str) -> Result<(), FsError> {
    match without_replacing(parent, aside, leaf)? {
        Ok(()) => Ok(()),
        Err(_) => {
            let path = parent.path().join(leaf).display().to_string();
            let kept_as = parent.path().join(aside).display().to_string();
            let why =
                format!("changed while being deleted and its name taken again; kept as {kept_as}");
            Err(FsError::Io {
                path,
                source: std::io::Error::other(why),
            })
        }
    }
}

fn kept(why: &str) -> LocalOutcome {
    LocalOutcome::Kept(why.to_string())
}

/// A `stat` in the index's form.
pub fn index_stat(s: &Stat) -> FileStat {
    FileStat {
        size: s.size,
        mtime_ns: s.mtime_ns,
        ctime_ns: s.ctime_ns,
        ino: s.ino,
        dev: s.dev,
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
pub(crate) mod tests;
