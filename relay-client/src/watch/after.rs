//! `--after-upload keep|delete|move DIR`: what becomes of a source file once
//! its blob is committed and verified, and only if the file is still the one
//! that was uploaded (same size and modification time). Remote blobs are
//! never touched.

use std::path::{Path, PathBuf};

use super::settle::Stat;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    Keep,
    Delete,
    /// Into this directory, keeping the path below the watched folder
    /// (its own name first, as in the blob name).
    Move(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum AfterError {
    #[error("--after-upload: expected keep, delete or move DIR, got {0:?}")]
    Parse(String),
    #[error("--after-upload move {0}: the directory must be outside the watched folders")]
    Inside(PathBuf),
}

impl After {
    pub fn parse(words: &[String]) -> Result<Self, AfterError> {
        match words {
            [k] if k == "keep" => Ok(After::Keep),
            [d] if d == "delete" => Ok(After::Delete),
            [m, dir] if m == "move" => Ok(After::Move(PathBuf::from(dir))),
            other => Err(AfterError::Parse(other.join(" "))),
        }
    }
}

/// Acts on `path` (uploaded as `stat`); `relative` is its place below the
/// move directory. Says what it did, or why it left the file.
pub fn act(after: &After, path: &Path, relative: &Path, stat: Stat) -> Result<(), String> {
    if *after == After::Keep {
        return Ok(());
    }
    let now = std::fs::metadata(path)
        .map(|m| Stat::of(&m))
        .map_err(|e| format!("cannot stat it: {e}"))?;
    if now != stat {
        return Err("changed since its upload; left in place".into());
    }
    match after {
        After::Keep => Ok(()),
        After::Delete => std::fs::remove_file(path).map_err(|e| format!("cannot delete it: {e}")),
        After::Move(dir) => {
            let to = dir.join(relative);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            match std::fs::rename(path, &to) {
                Ok(()) => Ok(()),
                // Another file system: copy, flush, then remove the source.
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => std::fs::copy(path, &to)
                    .and_then(|_| std::fs::File::open(&to)?.sync_all())
                    .and_then(|()| std::fs::remove_file(path))
                    .map_err(|e| format!("cannot move it to {}: {e}", to.display())),
                Err(e) => Err(format!("cannot move it to {}: {e}", to.display())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        let w = |s: &[&str]| After::parse(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["keep"]).ok(), Some(After::Keep));
        assert_eq!(w(&["delete"]).ok(), Some(After::Delete));
        assert_eq!(w(&["move", "/x"]).ok(), Some(After::Move("/x".into())));
        assert!(w(&["move"]).is_err());
        assert!(w(&["keep", "x"]).is_err());
    }

    #[test]
    fn a_file_changed_since_its_upload_is_left_in_place() {
        let dir = std::env::temp_dir().join(format!("after-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = dir.join("f");
        std::fs::write(&f, b"one").expect("write");
        let stat = Stat::of(&std::fs::metadata(&f).expect("stat"));
        std::fs::write(&f, b"one more").expect("write");
        assert!(act(&After::Delete, &f, Path::new("f"), stat).is_err());
        assert!(f.exists());
        let stat = Stat::of(&std::fs::metadata(&f).expect("stat"));
        let out = dir.join("done");
        act(&After::Move(out.clone()), &f, Path::new("in/f"), stat).expect("move");
        assert!(!f.exists());
        assert_eq!(std::fs::read(out.join("in/f")).expect("read"), b"one more");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
