//! Bearer tokens from a file: `TOKEN [container,container...]` per line, `#` comments.
//! Only SHA-256 digests of tokens are kept, compared in constant time; the file is
//! re-read when it changes, so removing a line revokes (expires) that token.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    AnyContainer,
    Containers(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// Unknown, revoked or empty token.
    Unknown,
    /// Valid token, but not for this container.
    Container(String),
}

impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthError::Unknown => f.write_str("unknown or expired token"),
            AuthError::Container(c) => write!(f, "token may not write container {c:?}"),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    digest: [u8; 32],
    grant: Grant,
}

/// Parses a tokens file; errors name the line.
pub fn parse_tokens(text: &str) -> Result<Vec<(String, Grant)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let token = parts.next().unwrap_or_default();
        if token.len() < 16 {
            return Err(format!(
                "tokens file line {}: token shorter than 16 characters",
                n + 1
            ));
        }
        let grant = match parts.next() {
            None => Grant::AnyContainer,
            Some(list) => {
                let cs: Vec<String> = list
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect();
                for c in &cs {
                    shared::blob_name::validate_container(c)
                        .map_err(|e| format!("tokens file line {}: {e}", n + 1))?;
                }
                Grant::Containers(cs)
            }
        };
        if parts.next().is_some() {
            return Err(format!(
                "tokens file line {}: expected TOKEN [containers]",
                n + 1
            ));
        }
        out.push((token.to_string(), grant));
    }
    if out.is_empty() {
        return Err("tokens file has no tokens".into());
    }
    Ok(out)
}

pub struct TokenStore {
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    entries: Vec<Entry>,
    mtime: Option<SystemTime>,
    checked: Instant,
}

/// How often the file's mtime is looked at.
const RECHECK: Duration = Duration::from_secs(2);

impl TokenStore {
    pub fn load(path: &Path) -> Result<Self, String> {
        let (entries, mtime) = read(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                entries,
                mtime,
                checked: Instant::now(),
            }),
        })
    }

    pub fn check(&self, token: &str, container: &str) -> Result<(), AuthError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.checked.elapsed() >= RECHECK {
            st.checked = Instant::now();
            let mtime = std::fs::metadata(&self.path)
                .and_then(|m| m.modified())
                .ok();
            if mtime != st.mtime {
                match read(&self.path) {
                    Ok((entries, m)) => {
                        tracing::info!(path = %self.path.display(), tokens = entries.len(), "tokens reloaded");
                        st.entries = entries;
                        st.mtime = m;
                    }
                    // Keep serving the last good list rather than locking everyone out.
                    Err(e) => {
                        tracing::error!(error = %e, "tokens file unreadable; keeping previous tokens")
                    }
                }
            }
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Compare against every entry so timing does not reveal which matched.
        let mut found: Option<&Entry> = None;
        for e in &st.entries {
            if bool::from(e.digest.ct_eq(&digest)) {
                found = Some(e);
            }
        }
        match found.map(|e| &e.grant) {
            None => Err(AuthError::Unknown),
            Some(Grant::AnyContainer) => Ok(()),
            Some(Grant::Containers(cs)) if cs.iter().any(|c| c == container) => Ok(()),
            Some(Grant::Containers(_)) => Err(AuthError::Container(container.to_string())),
        }
    }
}

fn read(path: &Path) -> Result<(Vec<Entry>, Option<SystemTime>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read tokens file {}: {e}", path.display()))?;
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let entries = parse_tokens(&text)?
        .into_iter()
        .map(|(t, grant)| Entry {
            digest: Sha256::digest(t.as_bytes()).into(),
            grant,
        })
        .collect();
    Ok((entries, mtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grants_and_comments() {
        let t = parse_tokens("# ops\nabcdefghijklmnop0001\nabcdefghijklmnop0002 data,logs\n")
            .expect("ok");
        assert_eq!(t[0].1, Grant::AnyContainer);
        assert_eq!(
            t[1].1,
            Grant::Containers(vec!["data".into(), "logs".into()])
        );
        assert!(parse_tokens("short").is_err());
        assert!(parse_tokens("").is_err());
        assert!(parse_tokens("abcdefghijklmnop0001 Bad_Container").is_err());
        assert!(parse_tokens("abcdefghijklmnop0001 data extra").is_err());
    }

    #[test]
    fn checks_token_and_container() {
        let dir = std::env::temp_dir().join(format!("relay-auth-{}", std::process::id()));
        // A crashed run of an earlier process with this PID may have left it.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("tokens");
        std::fs::write(&p, "abcdefghijklmnop0001\nabcdefghijklmnop0002 data\n").expect("write");
        let s = TokenStore::load(&p).expect("load");
        assert_eq!(s.check("abcdefghijklmnop0001", "any"), Ok(()));
        assert_eq!(s.check("abcdefghijklmnop0002", "data"), Ok(()));
        assert_eq!(
            s.check("abcdefghijklmnop0002", "other"),
            Err(AuthError::Container("other".into()))
        );
        assert_eq!(s.check("nope", "data"), Err(AuthError::Unknown));
        let _ = std::fs::remove_dir_all(dir);
    }
}
