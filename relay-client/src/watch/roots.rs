//! Which watched paths are uploaded, and as which blob: the same names as
//! `upload DIR` gives (`PREFIX/DIRNAME/relative/path`), the same
//! `--include/--exclude`, plus the names a watch leaves alone (temporary
//! files: `*.part`, `~*`, `.*.swp`, a download's `.*.relay-partial`, and
//! `--ignore`).

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::transfer::filter::Filter;
use crate::transfer::walk::blob_name;

/// Temporary names writers use before the final rename (this client's own
/// `download` among them: its partial files and their sidecars).
pub const DEFAULT_IGNORE: &[&str] = &[
    "*.part",
    "~*",
    ".*.swp",
    "*.tmp",
    ".~lock.*",
    ".*.relay-partial",
    ".*.relay-partial.json",
];

#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("{0}: not a directory (watch takes directories)")]
    NotDir(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--ignore {glob:?}: {source}")]
    Glob {
        glob: String,
        source: globset::Error,
    },
}

#[derive(Debug, Clone)]
struct Root {
    /// Canonical (absolute, links resolved): event paths start with it.
    path: PathBuf,
    /// Its own name, the first segment of its blobs.
    base: String,
}

/// A file to upload: its blob name and the path below its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub blob: String,
    pub relative: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Roots {
    roots: Vec<Root>,
    prefix: String,
    filter: Filter,
    ignore: GlobSet,
    /// Paths never uploaded (the journal and its side files).
    own: Vec<PathBuf>,
}

impl Roots {
    pub fn new(
        dirs: &[PathBuf],
        prefix: &str,
        filter: Filter,
        ignore: &[String],
    ) -> Result<Self, RootError> {
        let mut roots = Vec::new();
        for d in dirs {
            let path = std::fs::canonicalize(d).map_err(|source| RootError::Io {
                path: d.clone(),
                source,
            })?;
            if !path.is_dir() {
                return Err(RootError::NotDir(d.clone()));
            }
            let base = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            roots.push(Root { path, base });
        }
        let mut set = GlobSetBuilder::new();
        for g in ignore {
            let glob = Glob::new(g).map_err(|source| RootError::Glob {
                glob: g.clone(),
                source,
            })?;
            set.add(glob);
        }
        let ignore = set.build().map_err(|source| RootError::Glob {
            glob: ignore.join(" "),
            source,
        })?;
        Ok(Self {
            roots,
            prefix: prefix.to_string(),
            filter,
            ignore,
            own: Vec::new(),
        })
    }

    /// Never uploads `file` (nor its `-wal`/`-shm` companions).
    pub fn leave_out(&mut self, file: &Path) {
        let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut s = file.clone().into_os_string();
            s.push(suffix);
            self.own.push(PathBuf::from(s));
        }
    }

    pub fn dirs(&self) -> Vec<PathBuf> {
        self.roots.iter().map(|r| r.path.clone()).collect()
    }

    /// Whether `path` lies under a watched directory.
    pub fn contains(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(&r.path))
    }

    /// The blob for `path`, or `None` when it is not uploaded (outside the
    /// roots, a temporary name, filtered out, not UTF-8).
    pub fn name(&self, path: &Path) -> Option<Named> {
        if self.own.iter().any(|o| o == path) {
            return None;
        }
        let root = self
            .roots
            .iter()
            .filter(|r| path.starts_with(&r.path))
            .max_by_key(|r| r.path.as_os_str().len())?;
        let rel = path.strip_prefix(&root.path).ok()?;
        let segs: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        let segs = segs?;
        let file = segs.last()?;
        if self.ignore.is_match(file) {
            return None;
        }
        if !self.filter.admits(&segs.join("/")) {
            return None;
        }
        let mut all: Vec<&str> = Vec::with_capacity(segs.len() + 1);
        if !root.base.is_empty() {
            all.push(&root.base);
        }
        all.extend(segs.iter().copied());
        Some(Named {
            blob: blob_name(&self.prefix, &all),
            relative: Path::new(&root.base).join(rel),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_upload_and_leaves_temporary_files_alone() {
        let dir = std::env::temp_dir().join(format!("roots-test-{}/inbox", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let ignore: Vec<String> = DEFAULT_IGNORE
            .iter()
            .map(|s| s.to_string())
            .chain(["*.lock".to_string()])
            .collect();
        let filter = Filter::new(&[], &["skip/**".into()]).expect("filter");
        let mut roots =
            Roots::new(std::slice::from_ref(&dir), "lab", filter, &ignore).expect("roots");
        let root = std::fs::canonicalize(&dir).expect("canon");
        roots.leave_out(&root.join("j.sqlite"));
        let blob = |rel: &str| roots.name(&root.join(rel)).map(|n| n.blob);
        assert_eq!(blob("a.txt").as_deref(), Some("lab/inbox/a.txt"));
        assert_eq!(
            blob("run/1/b.dat").as_deref(),
            Some("lab/inbox/run/1/b.dat")
        );
        for temp in [
            "a.part",
            "~a.docx",
            ".a.txt.swp",
            "x.tmp",
            "y.lock",
            "skip/z",
            // A download into the watched folder, interrupted or running.
            ".relay-0123456789abcdef0123456789abcdef.relay-partial",
            ".relay-0123456789abcdef0123456789abcdef.meta.relay-partial",
            "run/.b.bin.relay-partial",
            "run/.b.bin.relay-partial.json",
        ] {
            assert_eq!(blob(temp), None, "{temp}");
        }
        assert_eq!(roots.name(Path::new("/elsewhere/a.txt")), None);
        assert_eq!(blob("j.sqlite-wal"), None);
        assert_eq!(
            roots.name(&root.join("run/x")).map(|n| n.relative),
            Some(PathBuf::from("inbox/run/x"))
        );
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    }
}
