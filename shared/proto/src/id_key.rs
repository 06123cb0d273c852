//! The secret that makes resume state trustworthy.
//!
//! Anyone who can write to the storage account (a SAS holder, direct mode's
//! credentials) can stage blocks under any ID and set any metadata. Resume reads
//! the hash midstate from block IDs, and "already committed" from blob metadata,
//! so both carry a MAC under a key only relays hold: IDs and seals made without it
//! are ignored. The key is shared by every relay of a deployment (`--id-key-file`),
//! so any relay resumes any transfer; direct mode keeps a key of its own per user.
//!
//! The MAC inputs also name the **owner** (the token that started a transfer), so
//! another token never learns or continues someone else's transfer.

use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a key; written as 64 hex characters.
pub const ID_KEY_LEN: usize = 32;

/// Metadata name of the seal the relay sets on every blob it commits.
pub const SEAL_METADATA_KEY: &str = "relay_seal";

/// Metadata name of the writer's mark the relay sets beside the seal
/// (`IdKey::writer_mark`).
pub const WRITER_METADATA_KEY: &str = "relay_writer";

#[derive(Clone, PartialEq, Eq)]
pub struct IdKey([u8; ID_KEY_LEN]);

impl std::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdKey(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdKeyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{0}: expected exactly 64 hex characters (a 256-bit key; make one with `openssl rand -hex 32`)"
    )]
    Format(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl IdKey {
    pub fn from_bytes(bytes: [u8; ID_KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// A fresh random key (tests, and direct mode's first run).
    pub fn random() -> Self {
        Self(rand::random())
    }

    pub fn from_hex(text: &str, what: &str) -> Result<Self, IdKeyError> {
        let bytes = hex::decode(text.trim()).map_err(|_| IdKeyError::Format(what.into()))?;
        let key: [u8; ID_KEY_LEN] = bytes
            .try_into()
            .map_err(|_| IdKeyError::Format(what.into()))?;
        Ok(Self(key))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn load(path: &Path) -> Result<Self, IdKeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| IdKeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_hex(&text, &path.display().to_string())
    }

    /// Loads the key at `path`, creating it (mode 0600) on first use.
    ///
    /// Several processes may create it at once (two uploads started together
    /// on a new machine). The key is written whole to a file of this process's
    /// own, then hard-linked to `path`, which fails if `path` exists: the
    /// first link wins, everyone else reads the winner's key, and no reader
    /// ever sees a half-written file (`create_new` + write did let one).
    pub fn load_or_create(path: &Path) -> Result<Self, IdKeyError> {
        if path.exists() {
            return Self::load(path);
        }
        let write_error = |source| IdKeyError::Write {
            path: path.display().to_string(),
            source,
        };
        let key = Self::random();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(write_error)?;
        }
        let draft = Self::draft_path(path);
        let linked =
            Self::write_draft(&draft, &key).and_then(|()| std::fs::hard_link(&draft, path));
        let _ = std::fs::remove_file(&draft);
        let created = match linked {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
            // A filesystem without hard links: create it in place (exclusive,
            // so still one key, but a reader at that instant could see it short).
            Err(_) => Self::write_draft(path, &key),
        };
        match created {
            Ok(()) => Ok(key),
            // Another process created it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load(path),
            Err(source) => Err(write_error(source)),
        }
    }

    /// A name beside `path` that no other process or thread uses.
    fn draft_path(path: &Path) -> std::path::PathBuf {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(
            ".{}-{:016x}.draft",
            std::process::id(),
            rand::random::<u64>()
        ));
        path.with_file_name(name)
    }

    /// Writes `key` to a new file (mode 0600) and flushes it to disk.
    fn write_draft(draft: &Path, key: &IdKey) -> std::io::Result<()> {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut file = opts.open(draft)?;
        std::io::Write::write_all(&mut file, key.to_hex().as_bytes())?;
        file.sync_all()
    }

    pub(crate) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        // HMAC accepts keys of any length; 32 bytes cannot fail.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        for p in parts {
            // Length-prefixed, so ("ab","c") and ("a","bc") differ.
            mac.update(&(p.len() as u64).to_be_bytes());
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }

    /// The seal stored with a committed blob: proof that a holder of this key
    /// verified that `sha256_hex` is the SHA-256 of this blob's `size` bytes.
    pub fn seal(&self, container: &str, blob: &str, size: u64, sha256_hex: &str) -> String {
        let mac = self.mac(&[
            b"blob-relay/seal/v1",
            container.as_bytes(),
            blob.as_bytes(),
            &size.to_be_bytes(),
            sha256_hex.to_ascii_lowercase().as_bytes(),
        ]);
        hex::encode(&mac[..16])
    }

    /// Whether `seal` is this key's seal for these facts (constant time).
    pub fn verify_seal(
        &self,
        seal: &str,
        container: &str,
        blob: &str,
        size: u64,
        sha256_hex: &str,
    ) -> bool {
        use subtle::ConstantTimeEq;
        let ours = self.seal(container, blob, size, sha256_hex);
        ours.as_bytes().ct_eq(seal.as_bytes()).into()
    }
}

impl IdKey {
    /// The writer's mark stored with a committed blob: which owner (token or
    /// principal) committed this version of `container/blob`, so that what
    /// depends on the blob's content (whether it already holds a file, its
    /// ETag) is told to its writer even when the writer may not read the
    /// container. A MAC over the owner and the blob's facts: it reveals no
    /// identity, and two blobs of one writer carry unrelated marks.
    pub fn writer_mark(
        &self,
        owner: &Owner,
        container: &str,
        blob: &str,
        size: u64,
        sha256_hex: &str,
    ) -> String {
        let mac = self.mac(&[
            b"blob-relay/writer/v1",
            &owner.0,
            container.as_bytes(),
            blob.as_bytes(),
            &size.to_be_bytes(),
            sha256_hex.to_ascii_lowercase().as_bytes(),
        ]);
        hex::encode(&mac[..16])
    }

    /// Whether `mark` names `owner` as the writer of this version (constant time).
    pub fn verify_writer_mark(
        &self,
        mark: &str,
        owner: &Owner,
        container: &str,
        blob: &str,
        size: u64,
        sha256_hex: &str,
    ) -> bool {
        use subtle::ConstantTimeEq;
        let ours = self.writer_mark(owner, container, blob, size, sha256_hex);
        ours.as_bytes().ct_eq(mark.as_bytes()).into()
    }
}

/// Who may see and continue a transfer's resume state: the SHA-256 of the token
/// that started it, or of the Entra ID principal's tenant and object ID (direct mode: a fixed owner, its key is per user anyway).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(pub [u8; 32]);

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Owner({})", hex::encode(&self.0[..4]))
    }
}

impl Owner {
    pub fn of_token(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// An Entra ID principal: its tenant and object ID, which stay the same
    /// across token refreshes. In its own domain, apart from token hashes (a
    /// static token cannot contain the NUL separators).
    pub fn of_principal(tenant: &str, object_id: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"blob-relay/entra\0");
        h.update(tenant.as_bytes());
        h.update(b"\0");
        h.update(object_id.as_bytes());
        Self(h.finalize().into())
    }

    pub fn direct() -> Self {
        Self(Sha256::digest(b"blob-relay/direct-mode").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_bad_keys() {
        let k = IdKey::random();
        assert_eq!(IdKey::from_hex(&k.to_hex(), "k").ok(), Some(k.clone()));
        assert!(IdKey::from_hex(&format!(" {}\n", k.to_hex()), "k").is_ok());
        assert!(IdKey::from_hex("abcd", "k").is_err());
        assert!(IdKey::from_hex(&"zz".repeat(32), "k").is_err());
        assert!(format!("{k:?}").contains(".."), "never printed");
    }

    #[test]
    fn seal_binds_every_fact_and_the_key() {
        let k = IdKey::random();
        let s = k.seal("c", "b", 10, "AB");
        assert!(k.verify_seal(&s, "c", "b", 10, "ab"));
        assert!(!k.verify_seal(&s, "c2", "b", 10, "ab"));
        assert!(!k.verify_seal(&s, "c", "b2", 10, "ab"));
        assert!(!k.verify_seal(&s, "c", "b", 11, "ab"));
        assert!(!k.verify_seal(&s, "c", "b", 10, "ac"));
        assert!(!IdKey::random().verify_seal(&s, "c", "b", 10, "ab"));
        assert!(!k.verify_seal("", "c", "b", 10, "ab"));
    }

    #[test]
    fn writer_mark_binds_the_owner_every_fact_and_the_key() {
        let k = IdKey::random();
        let (me, you) = (Owner::of_token("me-token"), Owner::of_token("you-token"));
        let m = k.writer_mark(&me, "c", "b", 10, "AB");
        assert!(k.verify_writer_mark(&m, &me, "c", "b", 10, "ab"));
        assert!(!k.verify_writer_mark(&m, &you, "c", "b", 10, "ab"));
        assert!(!k.verify_writer_mark(&m, &me, "c2", "b", 10, "ab"));
        assert!(!k.verify_writer_mark(&m, &me, "c", "b2", 10, "ab"));
        assert!(!k.verify_writer_mark(&m, &me, "c", "b", 11, "ab"));
        assert!(!k.verify_writer_mark(&m, &me, "c", "b", 10, "ac"));
        assert!(!IdKey::random().verify_writer_mark(&m, &me, "c", "b", 10, "ab"));
        // Not the seal, and not linkable across blobs of one writer.
        assert_ne!(m, k.seal("c", "b", 10, "ab"));
        assert_ne!(m, k.writer_mark(&me, "c", "b2", 10, "ab"));
        assert!(!k.verify_writer_mark("", &me, "c", "b", 10, "ab"));
    }

    #[test]
    fn load_or_create_keeps_the_first_key() {
        let dir = std::env::temp_dir().join(format!("idkey-test-{}", std::process::id()));
        let path = dir.join("sub/key");
        let a = IdKey::load_or_create(&path).expect("create");
        let b = IdKey::load_or_create(&path).expect("load");
        assert_eq!(a, b);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o077, 0, "no access for group or others");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two relay-clients started together on a machine without a key both
    /// create it: each must get the one key, complete, never a half-written
    /// file (seen in the suite: "expected exactly 64 hex characters").
    #[test]
    fn processes_creating_the_key_at_once_all_read_the_same_whole_key() {
        const THREADS: usize = 16;
        let dir = std::env::temp_dir().join(format!("idkey-race-{}", std::process::id()));
        for round in 0..40 {
            let path = dir.join(format!("key-{round}"));
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(THREADS));
            let keys: Vec<Result<IdKey, String>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|_| {
                        let barrier = barrier.clone();
                        let path = &path;
                        s.spawn(move || {
                            barrier.wait();
                            IdKey::load_or_create(path).map_err(|e| e.to_string())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                    .collect()
            });
            let first = keys[0]
                .clone()
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            for k in &keys {
                assert_eq!(k.as_ref().ok(), Some(&first), "round {round}: {k:?}");
            }
            assert_eq!(
                IdKey::load(&path).ok(),
                Some(first),
                "round {round}: the file"
            );
        }
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(
            leftovers.len(),
            40,
            "no temporary files left: {leftovers:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
