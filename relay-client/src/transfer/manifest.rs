//! `--checksums SHA256SUMS`: the format `sha256sum` writes (`HASH  PATH`, or
//! `HASH *PATH` in binary mode), paths relative to the manifest's directory. Each
//! listed file's hash goes in its Offer, and the relay commits the file only if
//! the bytes it received hash to it: the manifest is a precondition, not a report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why `--checksums` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("--checksums {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    /// `line` counts from 1.
    #[error(
        "--checksums {}:{line}: expected \"SHA256  PATH\" (as sha256sum writes)",
        file.display()
    )]
    Line { file: PathBuf, line: usize },
}

#[derive(Debug)]
pub struct Manifest {
    file: PathBuf,
    /// Canonical path -> SHA-256 (lowercase hex).
    hashes: HashMap<PathBuf, String>,
}

impl Manifest {
    pub fn load(file: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(file).map_err(|source| ManifestError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        let dir = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut hashes = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (hash, path) = parse_line(line).ok_or_else(|| ManifestError::Line {
                file: file.to_path_buf(),
                line: n + 1,
            })?;
            // A listed file that does not exist cannot be uploaded: nothing to map.
            if let Ok(p) = std::fs::canonicalize(dir.join(path)) {
                hashes.insert(p, hash.to_ascii_lowercase());
            }
        }
        Ok(Self {
            file: file.to_path_buf(),
            hashes,
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The listed hash of `path`, if the manifest lists it.
    pub fn lookup(&self, path: &Path) -> Option<&str> {
        let p = std::fs::canonicalize(path).ok()?;
        self.hashes.get(&p).map(String::as_str)
    }
}

fn parse_line(line: &str) -> Option<(&str, &str)> {
    let (hash, rest) = line.split_once(' ')?;
    let valid = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    // Text mode has a second space, binary mode a '*'.
    let path = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*'))?;
    (valid && !path.is_empty()).then_some((hash, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_sha256sum_writes() {
        let root = std::env::temp_dir().join(format!("manifest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("d")).expect("mkdir");
        std::fs::write(root.join("d/a.txt"), b"a").expect("write");
        let h = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb";
        std::fs::write(
            root.join("SUMS"),
            format!("{}  d/a.txt\n{h} *d/gone.txt\n", h.to_uppercase()),
        )
        .expect("write");
        let m = Manifest::load(&root.join("SUMS")).expect("manifest");
        assert_eq!(m.lookup(&root.join("d/a.txt")), Some(h));
        assert_eq!(m.lookup(&root.join("SUMS")), None);
        std::fs::write(root.join("BAD"), "xyz  d/a.txt\n").expect("write");
        assert!(Manifest::load(&root.join("BAD")).is_err_and(|e| e.to_string().contains("BAD:1")));
        let _ = std::fs::remove_dir_all(root);
    }
}
