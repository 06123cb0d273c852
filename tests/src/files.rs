//! Deterministic test files and their hashes.

use std::io::Write;
use std::path::Path;

use rand::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

/// Writes `size` pseudo-random bytes from `seed`; returns the SHA-256 (hex).
pub fn write_random(path: &Path, size: u64, seed: u64) -> String {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display())),
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = (left as usize).min(buf.len());
        rng.fill_bytes(&mut buf[..n]);
        h.update(&buf[..n]);
        f.write_all(&buf[..n])
            .unwrap_or_else(|e| panic!("write: {e}"));
        left -= n as u64;
    }
    f.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    hex::encode(h.finalize())
}

pub fn sha256_file(path: &Path) -> String {
    let mut f =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf).unwrap_or_else(|e| panic!("read: {e}"));
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    hex::encode(h.finalize())
}

/// A scratch directory removed on drop.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "blob-relay-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir: {e}"));
        Self(p)
    }

    pub fn path(&self, rel: &str) -> std::path::PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
