//! The relay's state directory: what must survive a restart so clients keep
//! trusting it and uploads keep resuming. It holds the self-signed certificate and
//! its key (made once, replaced only by `relay-server cert rotate`), the
//! certificate's fingerprint for operators and scripts, and the block-ID key when
//! no `--id-key-file` is given.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::connection::tls::{Identity, TlsError};

pub const CERT_FILE: &str = "tls-cert.pem";
pub const KEY_FILE: &str = "tls-key.pem";
/// `AB:CD:...` and a newline: what clients pass to `--relay-cert-sha256`.
pub const FINGERPRINT_FILE: &str = "tls-cert.sha256";
pub const ID_KEY_FILE: &str = "id.key";

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "no state directory: give --state-dir (or RELAY_STATE_DIR); neither STATE_DIRECTORY, XDG_STATE_HOME nor HOME is set"
    )]
    NoDefault,
    #[error("state directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Identity(#[from] TlsError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `$STATE_DIRECTORY` (systemd's `StateDirectory=`), else
/// `$XDG_STATE_HOME/blob-relay`, else `~/.local/state/blob-relay`.
pub fn default_dir() -> Result<PathBuf, StateError> {
    default_dir_from(|k| std::env::var_os(k))
}

fn default_dir_from(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, StateError> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = set("STATE_DIRECTORY") {
        // systemd may list several, separated by ':'; ours is the first.
        let first = d.to_string_lossy().split(':').next().map(PathBuf::from);
        return first.ok_or(StateError::NoDefault);
    }
    if let Some(d) = set("XDG_STATE_HOME") {
        return Ok(d.join("blob-relay"));
    }
    set("HOME")
        .map(|h| h.join(".local/state/blob-relay"))
        .ok_or(StateError::NoDefault)
}

/// The state directory the relay uses.
#[derive(Debug, Clone)]
pub struct StateDir {
    pub path: PathBuf,
}

impl StateDir {
    /// `explicit`, or the default; not created until something is written.
    pub fn resolve(explicit: Option<&Path>) -> Result<Self, StateError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => default_dir()?,
        };
        Ok(Self { path })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The certificate and key kept here, if both exist.
    pub fn load_identity(&self) -> Result<Option<Identity>, StateError> {
        let (cert, key) = (self.file(CERT_FILE), self.file(KEY_FILE));
        if !cert.exists() && !key.exists() {
            return Ok(None);
        }
        Identity::from_pem_files(&cert, &key)
            .map(Some)
            .map_err(StateError::Identity)
    }

    /// The kept identity, or a new self-signed one for `names`, written here
    /// (key mode 0600) so the next start presents the same certificate.
    pub fn load_or_create_identity(&self, names: &[String]) -> Result<Identity, StateError> {
        if let Some(id) = self.load_identity()? {
            // Rewritten every start: a deleted or stale fingerprint file heals.
            self.write_fingerprint(&id)?;
            return Ok(id);
        }
        self.create_identity(names)
    }

    /// Makes a new self-signed certificate and key and puts them in place of any
    /// old ones (each file replaced by rename, so a reader sees old or new, never
    /// half). Clients pinned to the old fingerprint must be given the new one.
    pub fn create_identity(&self, names: &[String]) -> Result<Identity, StateError> {
        let (id, cert_pem, key_pem) =
            Identity::self_signed_pem(names.to_vec()).map_err(StateError::Identity)?;
        self.ensure_dir()?;
        write_atomic(&self.file(KEY_FILE), key_pem.as_bytes(), 0o600)?;
        write_atomic(&self.file(CERT_FILE), cert_pem.as_bytes(), 0o644)?;
        self.write_fingerprint(&id)?;
        Ok(id)
    }

    fn write_fingerprint(&self, id: &Identity) -> Result<(), StateError> {
        let path = self.file(FINGERPRINT_FILE);
        let text = format!("{}\n", id.fingerprint);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            return Ok(());
        }
        write_atomic(&path, text.as_bytes(), 0o644)
    }

    fn ensure_dir(&self) -> Result<(), StateError> {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&self.path).map_err(io(&self.path))
    }
}

/// Writes `bytes` to a temporary file beside `path` with `mode`, then renames it
/// over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        ".{}.tmp{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, mode);
    let write = || -> std::io::Result<()> {
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("relay-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn default_follows_systemd_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let d = |p: &'static [(&'static str, &'static str)]| default_dir_from(env(p)).ok();
        assert_eq!(
            d(&[
                ("STATE_DIRECTORY", "/var/lib/blob-relay:/x"),
                ("HOME", "/h")
            ]),
            Some(PathBuf::from("/var/lib/blob-relay"))
        );
        assert_eq!(
            d(&[("XDG_STATE_HOME", "/s"), ("HOME", "/h")]),
            Some(PathBuf::from("/s/blob-relay"))
        );
        assert_eq!(
            d(&[("HOME", "/h"), ("XDG_STATE_HOME", "")]),
            Some(PathBuf::from("/h/.local/state/blob-relay"))
        );
        assert!(d(&[]).is_none());
    }

    #[test]
    fn identity_is_made_once_and_kept_until_rotated() {
        let dir = StateDir {
            path: scratch("keep"),
        };
        let names = vec!["localhost".to_string()];
        assert!(dir.load_identity().ok().flatten().is_none());
        let first = dir.load_or_create_identity(&names).expect("create");
        let again = dir.load_or_create_identity(&names).expect("load");
        assert_eq!(first.fingerprint, again.fingerprint);
        assert_eq!(first.certs, again.certs);
        let fp = std::fs::read_to_string(dir.file(FINGERPRINT_FILE)).expect("fp");
        assert_eq!(fp, format!("{}\n", first.fingerprint));
        let mode = std::fs::metadata(dir.file(KEY_FILE))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A lost fingerprint file is written again from the certificate.
        std::fs::remove_file(dir.file(FINGERPRINT_FILE)).expect("rm");
        dir.load_or_create_identity(&names).expect("load");
        assert_eq!(
            std::fs::read_to_string(dir.file(FINGERPRINT_FILE)).expect("fp"),
            fp
        );

        let rotated = dir.create_identity(&names).expect("rotate");
        assert_ne!(rotated.fingerprint, first.fingerprint);
        let loaded = dir.load_or_create_identity(&names).expect("load");
        assert_eq!(loaded.fingerprint, rotated.fingerprint);
        assert!(loaded.server_crypto().is_ok(), "key matches certificate");
        let _ = std::fs::remove_dir_all(&dir.path);
    }

    #[test]
    fn a_half_present_identity_is_an_error_not_a_silent_new_one() {
        let dir = StateDir {
            path: scratch("half"),
        };
        dir.create_identity(&["localhost".into()]).expect("create");
        std::fs::remove_file(dir.file(KEY_FILE)).expect("rm");
        let e = dir
            .load_or_create_identity(&["localhost".into()])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(KEY_FILE), "{e}");
        let _ = std::fs::remove_dir_all(&dir.path);
    }
}
