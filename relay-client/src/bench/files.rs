//! The bench's data: random files (nothing compresses) written in 1 MiB chunks
//! and hashed as they are written, so memory stays flat whatever the sizes;
//! and the check of a folder the files were downloaded into (`on_disk_differs`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rand::RngCore as _;
use sha2::{Digest, Sha256};

/// One generated file: its path relative to the bench directory (which is
/// also its blob name under the run's prefix), size and SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub name: String,
    pub size: u64,
    pub sha256: String,
}

/// What to generate: `large_count` files of `large_size` at the top and
/// `small_count` files of `small_size` in `small/`.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub large_size: u64,
    pub large_count: usize,
    pub small_size: u64,
    pub small_count: usize,
}

pub const SMALL_DIR: &str = "small";

/// The folder of the bench's work folder that holds the generated files (and
/// nothing else: AzCopy uploads its contents).
pub const DATA_DIR: &str = "data";

/// Writes the files under `dir` (created); returns them in upload order.
pub fn generate(dir: &Path, shape: Shape) -> std::io::Result<Vec<Generated>> {
    std::fs::create_dir_all(dir.join(SMALL_DIR))?;
    let mut out = Vec::new();
    for i in 1..=shape.large_count {
        out.push(write_random(
            dir,
            &format!("large-{i}.bin"),
            shape.large_size,
        )?);
    }
    for i in 1..=shape.small_count {
        let name = format!("{SMALL_DIR}/small-{i}.bin");
        out.push(write_random(dir, &name, shape.small_size)?);
    }
    Ok(out)
}

/// The paths to hand to `upload`: each large file, and the small directory
/// (uploaded as `small/...`, keeping its name).
pub fn upload_paths(dir: &Path, files: &[Generated]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = files
        .iter()
        .filter(|f| !f.name.starts_with(SMALL_DIR))
        .map(|f| dir.join(&f.name))
        .collect();
    if files.iter().any(|f| f.name.starts_with(SMALL_DIR)) {
        paths.push(dir.join(SMALL_DIR));
    }
    paths
}

/// The user's own files under `dir` (`bench --from`), read and hashed in
/// 1 MiB chunks; each named `DIRNAME/PATH`, as `upload DIR` names its blob.
pub fn from_dir(dir: &Path) -> std::io::Result<Vec<Generated>> {
    let top = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(std::io::Error::other)?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .map_err(std::io::Error::other)?
            .to_string_lossy()
            .into_owned();
        let mut file = std::fs::File::open(entry.path())?;
        let mut hash = Sha256::new();
        let size = std::io::copy(&mut file, &mut HashWriter(&mut hash))?;
        out.push(Generated {
            name: format!("{top}/{rel}"),
            size,
            sha256: hex::encode(hash.finalize()),
        });
    }
    Ok(out)
}

/// Hashes what is written to it.
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn write_random(dir: &Path, name: &str, size: u64) -> std::io::Result<Generated> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
    let mut hash = Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut rng = rand::rng();
    let mut left = size;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        rng.fill_bytes(&mut chunk[..n]);
        hash.update(&chunk[..n]);
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    file.flush()?;
    Ok(Generated {
        name: name.to_string(),
        size,
        sha256: hex::encode(hash.finalize()),
    })
}

/// The prefix (under the bench's own) the files are put at to be read back;
/// its last segment is the folder each download creates.
pub const STAGED: &str = "source";

/// Why the folder does not hold exactly the generated files: one missing or
/// whose SHA-256 differs (read back from disk, not taken from the report).
pub async fn on_disk_differs(top: &Path, files: &[Generated]) -> Option<String> {
    let (top, files) = (top.to_path_buf(), files.to_vec());
    let checked = tokio::task::spawn_blocking(move || {
        for f in &files {
            match sha256_of(&top.join(&f.name)) {
                Ok(sha) if sha == f.sha256 => {}
                Ok(_) => {
                    return Some(format!(
                        "{}: the downloaded file's SHA-256 differs from the generated file's",
                        f.name
                    ));
                }
                Err(e) => return Some(format!("{}: cannot read the downloaded file: {e}", f.name)),
            }
        }
        None
    })
    .await;
    checked.unwrap_or_else(|e| Some(format!("verifying: {e}")))
}

fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf)?;
        if n == 0 {
            return Ok(hex::encode(hash.finalize()));
        }
        hash.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_have_the_asked_sizes_and_their_hashes() {
        let dir = std::env::temp_dir().join(format!("bench-files-{}", std::process::id()));
        let shape = Shape {
            large_size: (1 << 20) + 17,
            large_count: 1,
            small_size: 1000,
            small_count: 3,
        };
        let files = generate(&dir, shape).expect("generate");
        assert_eq!(files.len(), 4);
        assert_eq!(
            files.iter().map(|f| f.size).sum::<u64>(),
            (1 << 20) + 17 + 3000
        );
        for f in &files {
            let bytes = std::fs::read(dir.join(&f.name)).expect("read");
            assert_eq!(bytes.len() as u64, f.size);
            assert_eq!(hex::encode(Sha256::digest(&bytes)), f.sha256);
        }
        let paths = upload_paths(&dir, &files);
        assert_eq!(paths, [dir.join("large-1.bin"), dir.join("small")]);
        // The same files as a user's directory: named as `upload DIR` names them.
        let mut found = from_dir(&dir).expect("walk");
        found.sort_by(|a, b| a.name.cmp(&b.name));
        let top = dir
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let mut want: Vec<Generated> = files
            .iter()
            .map(|f| Generated {
                name: format!("{top}/{}", f.name),
                ..f.clone()
            })
            .collect();
        want.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(found, want);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
