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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use relay_proto::sync::entry::{FileStat, Identity, LocalEntry};
use relay_proto::sync::join::Gap;
use relay_proto::sync::order::NameOrder;
use relay_proto::sync::walk_order::{Child, SortedWalk, Tree, joined, shown};

use crate::transfer::filter::Filter;
use crate::transfer::walk::is_partial_file;

/// A local folder as the walk reads it.
pub struct FsTree {
    root: PathBuf,
}

impl FsTree {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
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

    fn read_dir(&mut self, path: &str) -> Result<Vec<Child<FileStat>>, String> {
        let dir = if path.is_empty() {
            self.root.clone()
        } else {
            self.root.join(path)
        };
        let entries = std::fs::read_dir(&dir).map_err(|e| reason(&e))?;
        let mut children = Vec::new();
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    children.push(Child::Failed(format!("{}: {}", shown(path), reason(&e))));
                    continue;
                }
            };
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                let lossy = entry.file_name().to_string_lossy().into_owned();
                children.push(Child::Failed(format!(
                    "{}: {lossy:?}: name is not valid UTF-8; not synced",
                    shown(path)
                )));
                continue;
            };
            // `DirEntry::metadata`: a link is looked at, never followed
            // (`fstatat` with `AT_SYMLINK_NOFOLLOW`), and relative to the
            // folder read: no walk of the whole path per file, which was
            // nearly half of the walk's `lstat` time in a re-run's profile.
            match entry.metadata() {
                Ok(m) if m.is_dir() => children.push(Child::Dir { name }),
                Ok(m) if m.is_file() && !is_partial_file(&name) => children.push(Child::File {
                    name,
                    file: file_stat(&m),
                }),
                // Links, FIFOs, sockets, devices, partial files: not part of a sync.
                Ok(_) => {}
                Err(e) => children.push(Child::Failed(format!(
                    "{}: {}",
                    joined(path, &name),
                    reason(&e)
                ))),
            }
        }
        Ok(children)
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

/// The folder's files in `order`, filtered, as the merge's local input.
pub fn local_entries(
    root: &Path,
    order: NameOrder,
    filter: Filter,
) -> impl Iterator<Item = Result<LocalEntry, Gap>> + use<> {
    SortedWalk::new(FsTree::new(root), order).filter_map(move |walked| match walked {
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
