//! Turns command-line paths into (source file, blob name) pairs, the way `cp -r`
//! and AzCopy do: a file keeps its name; a directory keeps its own name as the
//! first segment (`upload data/ --to c/p` gives `p/data/...`). Blob names use `/`.
//!
//! The walk is an iterator: it yields one entry at a time, so 100,000 files cost
//! the memory of one (plus 16 bytes of hash per blob name it has seen, which catches two
//! sources mapping to one blob before either is sent).

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::transfer::destination::{Destination, DestinationError, parse_destination};
use crate::transfer::filter::Filter;
use crate::transfer::manifest::Manifest;
use crate::transfer::source::{FileId, Reading};
use crate::ui::error_code::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    pub blob: String,
    /// Size when walked (the upload snapshots it again before sending).
    pub size: u64,
    /// The file's SHA-256 from `--checksums`: the relay commits only these bytes.
    pub sha256: Option<String>,
    /// How each read opens it (`source::open`): through a link at `path`
    /// only with `--follow-symlinks`, and only the file the walk saw (its
    /// device and inode), so a file or a folder on its path swapped for a
    /// link after the walk is refused, not sent.
    pub reading: Reading,
}

/// One thing the walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    File(Source),
    /// Not uploaded, not an error (a FIFO, a link not followed, a link loop).
    Skipped {
        path: PathBuf,
        reason: String,
    },
    /// Not uploaded, and the user must hear of it (exit 1).
    Failed {
        path: PathBuf,
        code: ErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, Default)]
pub struct WalkOptions {
    pub prefix: String,
    pub filter: Filter,
    pub follow_symlinks: bool,
    pub manifest: Option<Arc<Manifest>>,
}

/// Source arguments that do not exist or cannot be read, found before any
/// network step so a typo is said at once (exit 2), not after `--patience`.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct SourceErrors(pub Vec<SourceError>);

/// One source argument and why it cannot be read, as `PATH: REASON` (ripgrep's form).
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", .path.display(), io_reason(.source))]
pub struct SourceError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Checks that every argument exists and can be opened: a file for reading, a
/// directory for listing (what is inside is the walk's to report, per file).
/// A link not followed or a special file is left to the walk, which skips it.
pub fn check_sources(paths: &[PathBuf], follow_symlinks: bool) -> Result<(), SourceErrors> {
    let errors: Vec<SourceError> = paths
        .iter()
        .filter_map(|path| {
            check_source(path, follow_symlinks)
                .err()
                .map(|source| SourceError {
                    path: path.clone(),
                    source,
                })
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SourceErrors(errors))
    }
}

fn check_source(path: &Path, follow_symlinks: bool) -> std::io::Result<()> {
    let meta = if follow_symlinks {
        std::fs::metadata(path)?
    } else {
        std::fs::symlink_metadata(path)?
    };
    if meta.is_dir() {
        std::fs::read_dir(path).map(drop)
    } else if meta.is_file() {
        // Opening a regular file never blocks (a FIFO's open would: not opened).
        std::fs::File::open(path).map(drop)
    } else {
        Ok(())
    }
}

/// An I/O error as a person reads it: "No such file or directory", without
/// the "(os error 2)" the standard library adds.
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

/// What the name of every partial file a download writes ends with, and its
/// sidecar's (`download::place`): the client's own temporary files, which a
/// directory walk leaves out, as `watch` does.
pub const PARTIAL_SUFFIX: &str = ".relay-partial";
/// What an earlier client's sidecars ended with (`.NAME.relay-partial.json`).
pub const OLD_SIDECAR_SUFFIX: &str = ".relay-partial.json";

/// Whether a file name is a download's partial file or sidecar (this
/// client's, or an earlier one's).
pub fn is_partial_file(name: &str) -> bool {
    name.starts_with('.') && (name.ends_with(PARTIAL_SUFFIX) || name.ends_with(OLD_SIDECAR_SUFFIX))
}

/// Joins prefix and relative segments with `/`.
pub fn blob_name(prefix: &str, relative: &[&str]) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if !prefix.is_empty() {
        parts.push(prefix);
    }
    parts.extend_from_slice(relative);
    parts.join("/")
}

/// The walk over every argument, in order; directories sorted by name.
pub struct Walk {
    opts: WalkOptions,
    args: VecDeque<PathBuf>,
    dir: Option<DirWalk>,
    /// Blob name -> the source that took it.
    /// 128 bits of SHA-256 of each blob name given out: a few MiB for 100,000
    /// files, where the names themselves would cost tens (a false match needs a
    /// 128-bit collision).
    seen: HashSet<u128>,
}

struct DirWalk {
    root: PathBuf,
    /// The directory's own name, the first segment of its blobs.
    base: Option<String>,
    entries: walkdir::IntoIter,
}

impl Walk {
    pub fn new(paths: &[PathBuf], opts: WalkOptions) -> Self {
        Self {
            opts,
            args: paths.iter().cloned().collect(),
            dir: None,
            seen: HashSet::new(),
        }
    }

    fn argument(&mut self, arg: PathBuf) -> Option<Found> {
        let meta = if self.opts.follow_symlinks {
            std::fs::metadata(&arg)
        } else {
            std::fs::symlink_metadata(&arg)
        };
        let meta = match meta {
            Ok(m) => m,
            Err(e) => return Some(io_failure(arg, "cannot read", &e)),
        };
        if meta.is_dir() {
            let base = std::fs::canonicalize(&arg).ok().and_then(|p| file_name(&p));
            let entries = walkdir::WalkDir::new(&arg)
                .follow_links(self.opts.follow_symlinks)
                .sort_by_file_name()
                .into_iter();
            self.dir = Some(DirWalk {
                root: arg,
                base,
                entries,
            });
            return None;
        }
        let Some(name) = file_name(&arg) else {
            return Some(invalid_utf8(arg));
        };
        if !self.opts.filter.admits(&name) {
            return None;
        }
        if !meta.is_file() {
            return Some(not_regular(arg, meta.file_type().is_symlink()));
        }
        self.file(arg, &[&name], &meta)
    }

    /// The next entry of the directory being walked; `None` when it is done.
    fn dir_entry(&mut self) -> Option<Option<Found>> {
        let dir = self.dir.as_mut()?;
        let entry = match dir.entries.next()? {
            Ok(e) => e,
            Err(e) => return Some(Some(walk_error(&dir.root, e))),
        };
        let ft = entry.file_type();
        if ft.is_dir() {
            return Some(None);
        }
        let path = entry.path().to_path_buf();
        let Ok(rel) = path.strip_prefix(&dir.root) else {
            return Some(None);
        };
        let segs: Option<Vec<String>> = rel
            .components()
            .map(|c| c.as_os_str().to_str().map(str::to_string))
            .collect();
        let Some(segs) = segs else {
            return Some(Some(invalid_utf8(path)));
        };
        // A download's partial files, left by a run that was interrupted
        // (or is still running): never uploaded.
        if ft.is_file() && segs.last().is_some_and(|n| is_partial_file(n)) {
            return Some(None);
        }
        let relative = segs.join("/");
        // Filters first: what the user left out is not reported at all.
        if !self.opts.filter.admits(&relative) {
            return Some(None);
        }
        if !ft.is_file() {
            return Some(Some(not_regular(path, ft.is_symlink())));
        }
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(e) => return Some(Some(walk_error(&dir.root, e))),
        };
        let names: Vec<String> = dir.base.iter().cloned().chain(segs).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        Some(self.file(path.clone(), &refs, &meta))
    }

    /// A regular file that passed the filters: the manifest, then its blob name (once).
    fn file(&mut self, path: PathBuf, segs: &[&str], meta: &std::fs::Metadata) -> Option<Found> {
        let sha256 = match &self.opts.manifest {
            None => None,
            Some(m) => match m.lookup(&path) {
                Some(h) => Some(h.to_string()),
                None => {
                    return Some(Found::Failed {
                        message: format!("not listed in {}; not uploaded", m.file().display()),
                        path,
                        code: ErrorCode::NotInManifest,
                    });
                }
            },
        };
        let blob = blob_name(&self.opts.prefix, segs);
        if !self.seen.insert(name_hash(&blob)) {
            return Some(Found::Failed {
                message: format!(
                    "same destination blob {blob:?} as an earlier source; not uploaded"
                ),
                path,
                code: ErrorCode::DuplicateDestination,
            });
        }
        Some(Found::File(Source {
            path,
            blob,
            size: meta.len(),
            sha256,
            reading: Reading {
                follow: self.opts.follow_symlinks,
                file: Some(FileId::of(meta)),
            },
        }))
    }
}

impl Iterator for Walk {
    type Item = Found;

    fn next(&mut self) -> Option<Found> {
        loop {
            match self.dir_entry() {
                Some(Some(found)) => return Some(found),
                Some(None) => continue,
                None => self.dir = None,
            }
            let arg = self.args.pop_front()?;
            if let Some(found) = self.argument(arg) {
                return Some(found);
            }
        }
    }
}

fn not_regular(path: PathBuf, symlink: bool) -> Found {
    let reason = if symlink {
        "symbolic link (add --follow-symlinks to follow it)"
    } else {
        "not a regular file"
    };
    Found::Skipped {
        path,
        reason: reason.into(),
    }
}

fn invalid_utf8(path: PathBuf) -> Found {
    Found::Failed {
        path,
        code: ErrorCode::Source,
        message: "path is not valid UTF-8; not uploaded".into(),
    }
}

fn io_failure(path: PathBuf, what: &str, e: &std::io::Error) -> Found {
    let message = if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!("permission denied: {what} it (check its permissions)")
    } else {
        format!("{what}: {e}")
    };
    Found::Failed {
        path,
        code: ErrorCode::Source,
        message,
    }
}

fn walk_error(root: &Path, e: walkdir::Error) -> Found {
    let path = e
        .path()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.to_path_buf());
    if let Some(ancestor) = e.loop_ancestor() {
        return Found::Skipped {
            path,
            reason: format!("symbolic link loops back to {}", ancestor.display()),
        };
    }
    match e.io_error() {
        Some(io) if io.kind() == std::io::ErrorKind::NotFound => Found::Skipped {
            path,
            reason: "broken symbolic link".into(),
        },
        Some(io) => io_failure(path, "cannot read", io),
        None => Found::Failed {
            path,
            code: ErrorCode::Source,
            message: format!("cannot read: {e}"),
        },
    }
}

fn name_hash(blob: &str) -> u128 {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(blob.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name()?.to_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_sources_are_named_each_in_one_error() {
        let dir = std::env::temp_dir().join(format!("walk-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap_or_else(|e| panic!("{e}"));
        let (a, b) = (dir.join("a"), dir.join("b"));
        assert!(check_sources(&[dir.clone(), file.clone()], false).is_ok());
        let err = check_sources(&[a.clone(), file, b.clone()], false)
            .err()
            .map(|e| e.to_string());
        let want = format!(
            "{}: No such file or directory; {}: No such file or directory",
            a.display(),
            b.display()
        );
        assert_eq!(err, Some(want));
        // A link not followed is the walk's to skip, even a dangling one.
        let link = dir.join("dangling");
        let _ = std::os::unix::fs::symlink(dir.join("gone"), &link);
        assert!(check_sources(std::slice::from_ref(&link), false).is_ok());
        assert!(check_sources(&[link], true).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names() {
        assert_eq!(blob_name("", &["a.bin"]), "a.bin");
        assert_eq!(
            blob_name("p/q", &["data", "x", "y.bin"]),
            "p/q/data/x/y.bin"
        );
    }

    fn scratch(tag: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("walk-{tag}-{}", std::process::id()));
        // A crashed run of an earlier process with this PID may have left it.
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("mkdir");
        root
    }

    fn files(found: &[Found]) -> Vec<&str> {
        found
            .iter()
            .filter_map(|f| match f {
                Found::File(s) => Some(s.blob.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn directory_keeps_its_name() {
        let root = scratch("name");
        let data = root.join("data");
        std::fs::create_dir_all(data.join("sub")).expect("mkdir");
        std::fs::write(data.join("a.txt"), b"a").expect("write");
        std::fs::write(data.join("sub/b.txt"), b"b").expect("write");
        std::fs::write(root.join("top.bin"), b"t").expect("write");
        // A download's partial files and sidecars, this client's and an
        // earlier one's: left out.
        for junk in [
            ".relay-0123456789abcdef0123456789abcdef.relay-partial",
            ".relay-0123456789abcdef0123456789abcdef.meta.relay-partial",
            "sub/.c.txt.relay-partial",
            "sub/.c.txt.relay-partial.json",
        ] {
            std::fs::write(data.join(junk), b"j").expect("write");
        }
        let opts = WalkOptions {
            prefix: "p".into(),
            ..Default::default()
        };
        let found: Vec<Found> = Walk::new(
            &[data.clone(), root.join("top.bin"), root.join("missing")],
            opts,
        )
        .collect();
        assert_eq!(
            files(&found),
            ["p/data/a.txt", "p/data/sub/b.txt", "p/top.bin"]
        );
        assert_eq!(found.len(), 4);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn duplicates_are_caught_while_walking() {
        let root = scratch("dup");
        std::fs::create_dir_all(root.join("a")).expect("mkdir");
        std::fs::write(root.join("x.bin"), b"1").expect("write");
        std::fs::write(root.join("a/x.bin"), b"2").expect("write");
        let found: Vec<Found> = Walk::new(
            &[root.join("x.bin"), root.join("a/x.bin")],
            Default::default(),
        )
        .collect();
        assert_eq!(files(&found), ["x.bin"]);
        assert!(
            matches!(
                &found[1],
                Found::Failed {
                    code: ErrorCode::DuplicateDestination,
                    ..
                }
            ),
            "{found:?}"
        );
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn links_are_skipped_or_followed_without_looping() {
        let root = scratch("links");
        let data = root.join("data");
        std::fs::create_dir_all(data.join("sub")).expect("mkdir");
        std::fs::write(data.join("sub/f.txt"), b"f").expect("write");
        std::os::unix::fs::symlink(data.join("sub/f.txt"), data.join("link.txt")).expect("ln");
        std::os::unix::fs::symlink(&data, data.join("sub/loop")).expect("ln");
        let plain: Vec<Found> =
            Walk::new(std::slice::from_ref(&data), Default::default()).collect();
        assert_eq!(files(&plain), ["data/sub/f.txt"]);
        assert_eq!(
            plain
                .iter()
                .filter(|f| matches!(f, Found::Skipped { .. }))
                .count(),
            2
        );
        let opts = WalkOptions {
            follow_symlinks: true,
            ..Default::default()
        };
        let followed: Vec<Found> = Walk::new(std::slice::from_ref(&data), opts).collect();
        assert_eq!(files(&followed), ["data/link.txt", "data/sub/f.txt"]);
        assert!(
            followed.iter().any(
                |f| matches!(f, Found::Skipped { reason, .. } if reason.contains("loops back"))
            ),
            "{followed:?}"
        );
        let _ = std::fs::remove_dir_all(root);
    }
}
