//! The local side of a sync: a `Tree` over `std::fs` for the core's
//! `SortedWalk`, so the folder is walked in the merge's order, and its files
//! as the merge's `LocalEntry`s.
//!
//! Names are mapped as `transfer::walk` maps an upload's: path segments
//! below the folder joined by `/`. Symbolic links are never followed (a link
//! is not a file of the tree, on either side of a sync), the client's own
//! partial files are left out, and `--include/--exclude` apply to the name
//! below the folder. A folder that cannot be read and a name that is not
//! UTF-8 become a `Gap`: the walk goes on, and the source is incomplete.
//! A folder wider than the walk's bound is sorted in runs kept in an
//! unnamed temporary file (`runs`), so its width costs no memory.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use relay_proto::sync::entry::{FileStat, Identity, LocalEntry};
use relay_proto::sync::join::Gap;
use relay_proto::sync::order::NameOrder;
use relay_proto::sync::walk_order::{Child, SortedWalk, Tree, joined, shown};
use relay_proto::sync::wide_dir::{Run, SORT_IN_MEMORY};

use super::runs::RunFile;

use crate::transfer::filter::Filter;
use crate::transfer::walk::is_partial_file;

/// A local folder as the walk reads it.
pub struct FsTree {
    root: PathBuf,
    runs: RunFile,
}

impl FsTree {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            runs: RunFile::default(),
        }
    }
}

/// A file's `stat` as the sync compares it (the index keeps the same).
pub fn file_stat(meta: &std::fs::Metadata) -> FileStat {
    FileStat {
        size: meta.len(),
        mtime_ns: meta.mtime().saturating_mul(1_000_000_000) + meta.mtime_nsec(),
        identity: Some(Identity {
            ino: meta.ino(),
            dev: meta.dev(),
            ctime_ns: meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec(),
        }),
    }
}

impl Tree for FsTree {
    type File = FileStat;
    type Entries = FsEntries;

    fn read_dir(&mut self, path: &str) -> Result<FsEntries, String> {
        let dir = if path.is_empty() {
            self.root.clone()
        } else {
            self.root.join(path)
        };
        let entries = std::fs::read_dir(&dir).map_err(|e| reason(&e))?;
        Ok(FsEntries {
            path: path.to_string(),
            entries,
        })
    }

    fn spill(&mut self, run: Vec<Child<FileStat>>) -> Result<Run<FileStat>, String> {
        self.runs.spill(run)
    }
}

/// One folder's entries as the file system gives them, one at a time (the
/// walk decides how many it holds).
pub struct FsEntries {
    path: String,
    entries: std::fs::ReadDir,
}

impl Iterator for FsEntries {
    type Item = Child<FileStat>;

    fn next(&mut self) -> Option<Child<FileStat>> {
        loop {
            let entry = self.entries.next()?;
            if let Some(child) = self.child(entry) {
                return Some(child);
            }
        }
    }
}

impl FsEntries {
    /// One entry as the walk's child; `None` for what a sync leaves out.
    fn child(&self, entry: std::io::Result<std::fs::DirEntry>) -> Option<Child<FileStat>> {
        let path = self.path.as_str();
        let entry = match entry {
            Ok(e) => e,
            Err(e) => return Some(Child::Failed(format!("{}: {}", shown(path), reason(&e)))),
        };
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            let lossy = entry.file_name().to_string_lossy().into_owned();
            return Some(Child::Failed(format!(
                "{}: {lossy:?}: name is not valid UTF-8; not synced",
                shown(path)
            )));
        };
        // `DirEntry::metadata`: a link is looked at, never followed
        // (`fstatat` with `AT_SYMLINK_NOFOLLOW`), and relative to the
        // folder read: no walk of the whole path per file, which was
        // nearly half of the walk's `lstat` time in a re-run's profile.
        match entry.metadata() {
            Ok(m) if m.is_dir() => Some(Child::Dir { name }),
            Ok(m) if m.is_file() && !is_partial_file(&name) => Some(Child::File {
                name,
                file: file_stat(&m),
            }),
            // Links, FIFOs, sockets, devices, partial files: not part of a sync.
            Ok(_) => None,
            Err(e) => Some(Child::Failed(format!(
                "{}: {}",
                joined(path, &name),
                reason(&e)
            ))),
        }
    }
}

/// An I/O error without the "(os error N)" the standard library adds.
fn reason(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        return "permission denied: cannot read it (check its permissions)".into();
    }
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

/// Entries of one folder sorted in memory before the rest are sorted in
/// runs in TMPDIR: [`SORT_IN_MEMORY`], or `RELAY_SYNC_SORT_WIDTH` (at least
/// 1), which lowers the walk's memory or lets a test make a folder "wide".
fn sort_width() -> usize {
    std::env::var("RELAY_SYNC_SORT_WIDTH")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(SORT_IN_MEMORY, |w| w.max(1))
}

/// The folder's files in `order`, filtered, as the merge's local input.
pub fn local_entries(
    root: &Path,
    order: NameOrder,
    filter: Filter,
) -> impl Iterator<Item = Result<LocalEntry, Gap>> + use<> {
    let walk = SortedWalk::new(FsTree::new(root), order).with_width(sort_width());
    walk.filter_map(move |walked| match walked {
        Err(gap) => Some(Err(gap)),
        Ok(w) if filter.admits(&w.name) => Some(Ok(LocalEntry {
            name: w.name,
            stat: w.file,
        })),
        Ok(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sync-tree-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    #[test]
    fn the_walk_is_in_blob_order_and_leaves_out_links_and_partial_files() {
        let d = temp("order");
        for f in ["a.b", "a0", "a/x", "a-c", "z/.f.relay-partial"] {
            let p = d.join(f);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, f).expect("write");
        }
        std::os::unix::fs::symlink(d.join("a0"), d.join("link")).expect("symlink");
        let names: Vec<String> = local_entries(&d, NameOrder::Utf16, Filter::default())
            .map(|e| e.map(|e| e.name).unwrap_or_else(|g| g.0))
            .collect();
        assert_eq!(names, ["a-c", "a.b", "a/x", "a0"]);
        let only: Vec<String> = local_entries(
            &d,
            NameOrder::Utf16,
            Filter::new(&["a*".into()], &["a/*".into()]).expect("filter"),
        )
        .filter_map(|e| e.ok().map(|e| e.name))
        .collect();
        assert_eq!(only, ["a-c", "a.b", "a0"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_folder_wider_than_the_bound_walks_as_a_narrow_one() {
        let d = temp("wide");
        for i in 0..500 {
            std::fs::write(d.join(format!("f{i}")), "x").expect("write");
        }
        for sub in ["f1", "f1.", "f1-"] {
            let folder = d.join(format!("{sub}d"));
            std::fs::create_dir_all(&folder).expect("mkdir");
            std::fs::write(folder.join("in"), "y").expect("write");
        }
        let names = |width: usize| -> Vec<String> {
            SortedWalk::new(FsTree::new(&d), NameOrder::Utf16)
                .with_width(width)
                .map(|w| w.map(|w| w.name).unwrap_or_else(|g| g.0))
                .collect()
        };
        let narrow = names(SORT_IN_MEMORY);
        assert_eq!(narrow.len(), 503);
        assert_eq!(names(7), narrow);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unreadable_folder_is_a_gap_and_the_walk_goes_on() {
        use std::os::unix::fs::PermissionsExt;
        let d = temp("gap");
        std::fs::create_dir_all(d.join("locked")).expect("mkdir");
        std::fs::write(d.join("locked/f"), "x").expect("write");
        std::fs::write(d.join("m"), "x").expect("write");
        let perms = std::fs::Permissions::from_mode(0o000);
        std::fs::set_permissions(d.join("locked"), perms).expect("chmod");
        if std::fs::read_dir(d.join("locked")).is_ok() {
            // Running as root: permissions do not stop a read.
            let _ =
                std::fs::set_permissions(d.join("locked"), std::fs::Permissions::from_mode(0o755));
            let _ = std::fs::remove_dir_all(&d);
            return;
        }
        let got: Vec<Result<String, Gap>> = local_entries(&d, NameOrder::Utf16, Filter::default())
            .map(|e| e.map(|e| e.name))
            .collect();
        let _ = std::fs::set_permissions(d.join("locked"), std::fs::Permissions::from_mode(0o755));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(matches!(&got[0], Err(Gap(why)) if why.contains("locked")));
        assert_eq!(got[1], Ok("m".to_string()));
        let _ = std::fs::remove_dir_all(&d);
    }
}
