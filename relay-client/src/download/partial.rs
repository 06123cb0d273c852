//! The partial file a download is written to, and its sidecar: which blob and
//! which version (ETag, size) the partial's bytes are, so a rerun resumes only
//! a partial of the same version and starts any other over.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::safe_fs::{Entry, Folder, FsError};
use super::session::Partial;

/// What the sidecar records (small JSON beside the partial file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    pub container: String,
    pub blob: String,
    pub etag: String,
    pub size: u64,
}

/// The sidecar's largest size read back: anything bigger is not ours.
const SIDECAR_MAX: u64 = 64 * 1024;

/// An earlier run's partial of this blob in `folder`, if its sidecar names
/// this container and blob (anything else there is started over).
pub fn find(
    folder: &Folder,
    partial: &str,
    sidecar: &str,
    container: &str,
    blob: &str,
) -> Result<Option<Partial>, FsError> {
    let Entry::File { size: len, .. } = folder.entry(partial)? else {
        return Ok(None);
    };
    let Entry::File { size, .. } = folder.entry(sidecar)? else {
        return Ok(None);
    };
    if size > SIDECAR_MAX {
        return Ok(None);
    }
    let mut text = String::new();
    let read = folder
        .open_file(sidecar, false)?
        .take(SIDECAR_MAX)
        .read_to_string(&mut text);
    if read.is_err() {
        return Ok(None);
    }
    Ok(serde_json::from_str::<Sidecar>(&text)
        .ok()
        .filter(|s| s.container == container && s.blob == blob)
        .map(|s| Partial {
            len,
            etag: s.etag,
            size: s.size,
        }))
}

/// Records what the partial file is about to hold (written and synced before
/// its first byte, so a partial never outlives a sidecar that names it).
pub fn record(folder: &Folder, sidecar: &str, s: &Sidecar) -> Result<(), FsError> {
    let path = folder.path().join(sidecar);
    let text = serde_json::to_vec(s).map_err(|e| FsError::of(&path, std::io::Error::other(e)))?;
    let mut f = folder.open_file(sidecar, true)?;
    f.set_len(0).map_err(|e| FsError::of(&path, e))?;
    f.write_all(&text).map_err(|e| FsError::of(&path, e))?;
    f.sync_all().map_err(|e| FsError::of(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::safe_fs::tests::Scratch;

    #[test]
    fn a_partial_is_resumed_only_with_a_sidecar_naming_its_blob() {
        let s = Scratch::new("sidecar");
        let f = Folder::root(&s.0).expect("root");
        let (p, sc) = (".b.relay-partial", ".b.relay-partial.json");
        assert_eq!(find(&f, p, sc, "c", "x/b").expect("find"), None);
        std::fs::write(s.0.join(p), b"12345").expect("partial");
        // No sidecar: not resumed.
        assert_eq!(find(&f, p, sc, "c", "x/b").expect("find"), None);
        let side = Sidecar {
            container: "c".into(),
            blob: "x/b".into(),
            etag: "\"0x1\"".into(),
            size: 10,
        };
        record(&f, sc, &side).expect("record");
        assert_eq!(
            find(&f, p, sc, "c", "x/b").expect("find"),
            Some(Partial {
                len: 5,
                etag: "\"0x1\"".into(),
                size: 10
            })
        );
        // Another blob's sidecar (two names whose partials collide): not resumed.
        assert_eq!(find(&f, p, sc, "c", "y/b").expect("find"), None);
        assert_eq!(find(&f, p, sc, "d", "x/b").expect("find"), None);
        // Garbage in the sidecar: not resumed, not an error.
        std::fs::write(s.0.join(sc), b"{not json").expect("garbage");
        assert_eq!(find(&f, p, sc, "c", "x/b").expect("find"), None);
    }
}
