//! A local file read and hashed to compare it, only if it stays the file
//! the walk saw while it is read (else what was hashed is nobody's bytes).

use std::io::Read;
use std::path::Path;

use relay_proto::sync::entry::FileStat;
use sha2::{Digest, Sha256};

use super::tree::file_stat;

/// SHA-256 (hex) of the file at `path`, if it is `stat` before and after.
pub fn hash_unchanged(path: &Path, stat: &FileStat) -> Option<String> {
    // A link swapped in is never read through (the walk never follows one).
    let mut f = crate::transfer::source::open(path, Default::default()).ok()?;
    let before = file_stat(&f.metadata().ok()?);
    if !before.same_file_as(stat) {
        return None;
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let after = file_stat(&f.metadata().ok()?);
    after.same_file_as(stat).then(|| hex::encode(h.finalize()))
}
