//! Turns command-line paths into (source file, blob name) pairs, the way `cp -r`
//! and AzCopy do: a file keeps its name; a directory keeps its own name as the
//! first segment (`upload data/ --to c/p` gives `p/data/...`). Blob names use `/`.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    pub blob: String,
}

/// Splits `CONTAINER[/PREFIX]`.
pub fn parse_destination(to: &str) -> Result<(String, String), String> {
    let to = to.trim_start_matches('/');
    let (container, prefix) = to.split_once('/').unwrap_or((to, ""));
    relay_proto::blob_name::validate_container(container)?;
    Ok((container.to_string(), prefix.trim_matches('/').to_string()))
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

/// Walks every argument; symlinks and special files are reported, not followed.
/// Errors are per path so one unreadable entry does not stop the rest.
pub fn collect(paths: &[PathBuf], prefix: &str) -> (Vec<Source>, Vec<(PathBuf, String)>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for arg in paths {
        let meta = match std::fs::symlink_metadata(arg) {
            Ok(m) => m,
            Err(e) => {
                errors.push((arg.clone(), format!("cannot read: {e}")));
                continue;
            }
        };
        if meta.is_file() {
            match file_name(arg) {
                Some(name) => out.push(Source {
                    path: arg.clone(),
                    blob: blob_name(prefix, &[&name]),
                }),
                None => errors.push((arg.clone(), "file name is not valid UTF-8".into())),
            }
        } else if meta.is_dir() {
            let base = std::fs::canonicalize(arg).ok().and_then(|p| file_name(&p));
            walk_dir(arg, prefix, base.as_deref(), &mut out, &mut errors);
        } else {
            errors.push((
                arg.clone(),
                "not a regular file or directory (symlinks are not followed)".into(),
            ));
        }
    }
    (out, errors)
}

fn walk_dir(
    root: &Path,
    prefix: &str,
    base: Option<&str>,
    out: &mut Vec<Source>,
    errors: &mut Vec<(PathBuf, String)>,
) {
    let walker = walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name();
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let p = e
                    .path()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| root.to_path_buf());
                errors.push((p, format!("cannot read: {e}")));
                continue;
            }
        };
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        if !ft.is_file() {
            errors.push((
                entry.path().to_path_buf(),
                "skipped: not a regular file (symlinks are not followed)".into(),
            ));
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let segs: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        match segs {
            Some(mut segs) => {
                if let Some(b) = base {
                    segs.insert(0, b);
                }
                out.push(Source {
                    path: entry.path().to_path_buf(),
                    blob: blob_name(prefix, &segs),
                });
            }
            None => errors.push((entry.path().to_path_buf(), "path is not valid UTF-8".into())),
        }
    }
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name()?.to_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations() {
        assert_eq!(parse_destination("c1x"), Ok(("c1x".into(), "".into())));
        assert_eq!(
            parse_destination("data/a/b/"),
            Ok(("data".into(), "a/b".into()))
        );
        assert!(parse_destination("Bad").is_err());
    }

    #[test]
    fn names() {
        assert_eq!(blob_name("", &["a.bin"]), "a.bin");
        assert_eq!(
            blob_name("p/q", &["data", "x", "y.bin"]),
            "p/q/data/x/y.bin"
        );
    }

    #[test]
    fn directory_keeps_its_name() {
        let root = std::env::temp_dir().join(format!("walk-{}", std::process::id()));
        // A crashed run of an earlier process with this PID may have left it.
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data");
        std::fs::create_dir_all(data.join("sub")).expect("mkdir");
        std::fs::write(data.join("a.txt"), b"a").expect("write");
        std::fs::write(data.join("sub/b.txt"), b"b").expect("write");
        std::fs::write(root.join("top.bin"), b"t").expect("write");
        let (found, errors) = collect(
            &[data.clone(), root.join("top.bin"), root.join("missing")],
            "p",
        );
        let blobs: Vec<_> = found.iter().map(|s| s.blob.as_str()).collect();
        assert_eq!(blobs, ["p/data/a.txt", "p/data/sub/b.txt", "p/top.bin"]);
        assert_eq!(errors.len(), 1);
        let _ = std::fs::remove_dir_all(root);
    }
}
