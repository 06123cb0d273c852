//! Bearer tokens from a file (format and rules in `tokens_file`). Only SHA-256
//! digests of tokens are kept, compared in constant time. The file is re-read
//! when it changes, and what it lists then is exactly what is accepted: removing a
//! line revokes (expires) that token, a line that breaks a rule is skipped and
//! logged, and a file that cannot be read or lists no valid token makes the relay
//! refuse every Offer (loudly) rather than keep tokens the file may no longer list.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use crate::sign_in::access::Access;
pub use crate::sign_in::tokens_file::{ContainerGrant, Grant, Parsed, Rule, Skipped, parse_tokens};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Unknown, revoked or empty token.
    #[error("unknown or expired token")]
    Unknown,
    /// Valid token, but not for this container.
    #[error("token may not write container {0:?}")]
    Container(String),
    /// Valid token, but it may not read this container (reading is a grant of
    /// its own: a token that may write a container does not read it).
    #[error("token may not read container {0:?}")]
    NoRead(String),
    /// Valid token, but it may not delete in this container (deleting is a
    /// grant of its own, implied by neither writing nor reading).
    #[error("token may not delete in container {0:?}")]
    NoDelete(String),
    /// An Entra ID access token that failed a check (named by the refusal).
    #[error("Entra ID token refused: {0}")]
    Entra(crate::sign_in::entra::Refusal),
}

impl AuthError {
    /// A known caller whose grant does not cover `access` on `container`.
    pub fn refused(container: &str, access: Access) -> Self {
        let c = container.to_string();
        match access {
            Access::Write => AuthError::Container(c),
            Access::Read => AuthError::NoRead(c),
            Access::Delete => AuthError::NoDelete(c),
        }
    }
}

/// Who an Offer's token names, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A token from the tokens file.
    Static,
    /// An Entra ID principal.
    Entra(crate::sign_in::entra::Principal),
}

impl Caller {
    /// Whose resume state and memory share a transfer is: the token's hash for a
    /// static token, the tenant and object ID for an Entra ID principal (so a
    /// refreshed token resumes what the previous one started).
    pub fn owner(&self, token: &str) -> relay_proto::id_key::Owner {
        match self {
            Caller::Static => relay_proto::id_key::Owner::of_token(token),
            Caller::Entra(p) => relay_proto::id_key::Owner::of_principal(&p.tenant, &p.object_id),
        }
    }
}

/// Checks an Offer's bearer token: a JWT goes to Entra ID (when configured), any
/// other token to the tokens file (an empty store when there is none).
pub async fn authenticate(
    tokens: &TokenStore,
    entra: Option<&crate::sign_in::entra::Entra>,
    token: &str,
    container: &str,
    access: Access,
) -> Result<Caller, AuthError> {
    match entra {
        // Entra ID principals read, write and delete what `--entra-grant`
        // (and, if honoured, `Reader.<container>` and `Deleter.<container>`
        // roles) grant them, each apart.
        Some(entra) if crate::sign_in::entra::looks_like_jwt(token) => {
            let p = entra.authenticate(token).await.map_err(AuthError::Entra)?;
            if entra.grants.allows(&p, container, access) {
                Ok(Caller::Entra(p))
            } else {
                Err(AuthError::refused(container, access))
            }
        }
        _ => tokens
            .check(token, container, access)
            .map(|()| Caller::Static),
    }
}

/// Whether a caller admitted for one access (`authenticate`) also holds
/// `access` on `container`: its grant looked up again, with no I/O and no new
/// check of the token. An upload asks it for reading, which decides what it
/// may learn of a blob in the way.
pub fn also_granted(
    tokens: &TokenStore,
    entra: Option<&crate::sign_in::entra::Entra>,
    token: &str,
    caller: &Caller,
    container: &str,
    access: Access,
) -> bool {
    match caller {
        Caller::Static => tokens.check(token, container, access).is_ok(),
        Caller::Entra(p) => entra.is_some_and(|e| e.grants.allows(p, container, access)),
    }
}

/// Why the tokens file cannot be used at start.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("cannot read tokens file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tokens file {} lists no valid token{}", path.display(), skipped_note(skipped))]
    NoTokens {
        path: PathBuf,
        skipped: Vec<Skipped>,
    },
}

fn skipped_note(skipped: &[Skipped]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = skipped.iter().map(Skipped::to_string).collect();
    format!(" (skipped {})", lines.join("; "))
}

#[derive(Debug, Clone)]
struct Entry {
    digest: [u8; 32],
    grant: Grant,
}

pub struct TokenStore {
    path: PathBuf,
    /// What the file lists, swapped whole by a reload: an Offer's check only
    /// reads it (a short read lock, no I/O), so a file being rewritten never
    /// makes Offers wait on a disk read or on one another.
    entries: RwLock<Arc<Vec<Entry>>>,
    /// The file's stamp as last read, for `poll` (one caller at a time: the
    /// relay's watch task, or `reload`).
    state: Mutex<State>,
    /// Times the file was read (tests, and the reload log line).
    reads: AtomicU64,
}

struct State {
    /// What the file looked like when it was read; `None` if unreadable.
    stamp: Option<Stamp>,
    /// The file changed shortly before it was read (a writer may not have been
    /// done): read it again at the next poll even if the stamp is the same.
    settling: bool,
}

/// A change to any of these makes the file re-read. The length and inode catch
/// rewrites within the mtime's resolution and replacement by rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    mtime: Option<SystemTime>,
    len: u64,
    ino: u64,
}

/// How often the file's stamp is looked at (`watch`).
pub const RECHECK: Duration = Duration::from_secs(2);

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        mtime: m.modified().ok(),
        len: m.len(),
        ino: m.ino(),
    })
}

impl TokenStore {
    /// No tokens file (Entra ID only): accepts no static token.
    pub fn none() -> Self {
        Self::with(PathBuf::new(), Vec::new(), None)
    }

    fn with(path: PathBuf, entries: Vec<Entry>, stamp: Option<Stamp>) -> Self {
        Self {
            path,
            entries: RwLock::new(Arc::new(entries)),
            state: Mutex::new(State {
                settling: is_settling(stamp, SystemTime::now()),
                stamp,
            }),
            reads: AtomicU64::new(0),
        }
    }

    /// Reads the file; skipped lines are logged. Refuses a file that cannot be
    /// read or lists no valid token (the relay would refuse everyone).
    pub fn load(path: &Path) -> Result<Self, TokensError> {
        let (parsed, stamp) = read(path)?;
        log_skipped(path, &parsed.skipped);
        if parsed.tokens.is_empty() {
            return Err(TokensError::NoTokens {
                path: path.to_path_buf(),
                skipped: parsed.skipped,
            });
        }
        let store = Self::with(path.to_path_buf(), entries(parsed), stamp);
        store.reads.store(1, Ordering::Relaxed);
        Ok(store)
    }

    /// Re-reads the file now, whether or not it changed.
    pub fn reload(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut st);
    }

    /// Re-reads the file if it changed (or was still settling at the last
    /// read). Blocking file I/O: the relay calls it every `RECHECK` on a
    /// blocking thread (`watch`), never from an Offer's check.
    pub fn poll(&self) {
        if self.path.as_os_str().is_empty() {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.settling || stamp(&self.path) != st.stamp {
            self.refresh(&mut st);
        }
    }

    /// Times the file was read so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Whether `token` may do `access` on `container`: `Unknown` for a token the
    /// file does not list, else `Container` (write) or `NoRead` (read) when its
    /// grant does not cover it. No I/O: what the last read of the file listed.
    pub fn check(&self, token: &str, container: &str, access: Access) -> Result<(), AuthError> {
        let entries = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Compare against every entry so timing does not reveal which matched.
        let mut found: Option<&Entry> = None;
        for e in entries.iter() {
            if bool::from(e.digest.ct_eq(&digest)) {
                found = Some(e);
            }
        }
        match found.map(|e| &e.grant) {
            None => Err(AuthError::Unknown),
            Some(g) if g.allows(container, access) => Ok(()),
            Some(_) => Err(AuthError::refused(container, access)),
        }
    }

    /// Containers some token names, in file order, each once (what a storage
    /// check can look at), whether it may write or only read them.
    pub fn granted_containers(&self) -> Vec<String> {
        let entries = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut out: Vec<String> = Vec::new();
        for e in entries.iter() {
            if let Grant::Containers(cs) = &e.grant {
                for c in cs {
                    if !out.contains(&c.name) {
                        out.push(c.name.clone());
                    }
                }
            }
        }
        out
    }

    /// Replaces the tokens with what the file lists now; never keeps old ones.
    fn refresh(&self, st: &mut State) {
        let path = self.path.display();
        self.reads.fetch_add(1, Ordering::Relaxed);
        match read(&self.path) {
            Ok((parsed, stamp)) => {
                let (valid, skipped) = (parsed.tokens.len(), parsed.skipped.len());
                // Only log what is news: a settling file is read again unchanged.
                if stamp != st.stamp {
                    log_skipped(&self.path, &parsed.skipped);
                    if valid == 0 {
                        tracing::error!(%path, skipped, "tokens file lists no valid token: every Offer is refused until it is fixed");
                    } else {
                        tracing::info!(%path, tokens = valid, skipped, "tokens reloaded");
                    }
                }
                self.replace(entries(parsed));
                st.settling = is_settling(stamp, SystemTime::now());
                st.stamp = stamp;
            }
            Err(e) => {
                tracing::error!(error = %e, "every Offer is refused until the tokens file can be read");
                self.replace(Vec::new());
                st.settling = false;
                st.stamp = None;
            }
        }
    }
}

impl TokenStore {
    fn replace(&self, entries: Vec<Entry>) {
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(entries);
    }
}

/// A file modified less than `RECHECK` before `now` may still be being
/// written. A modification time in the future (a clock set wrong, a copy that
/// kept its source's time) says nothing about that: such a file is settled,
/// and a later write still changes its stamp (size, inode or time).
fn is_settling(stamp: Option<Stamp>, now: SystemTime) -> bool {
    let Some(mtime) = stamp.and_then(|s| s.mtime) else {
        return false;
    };
    now.duration_since(mtime)
        .map(|age| age < RECHECK)
        .unwrap_or(false)
}

/// Polls the tokens file every `RECHECK` on a blocking thread, for as long as
/// its holder (`owner`, the relay's shared state) lives: reloads happen here,
/// never in an Offer's check.
pub fn watch<S: Send + Sync + 'static>(owner: std::sync::Weak<S>, tokens: fn(&S) -> &TokenStore) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(RECHECK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(owner) = owner.upgrade() else {
                return;
            };
            let _ = tokio::task::spawn_blocking(move || tokens(&owner).poll()).await;
        }
    });
}

fn log_skipped(path: &Path, skipped: &[Skipped]) {
    for s in skipped {
        tracing::warn!(path = %path.display(), line = s.line, rule = %s.rule, "tokens file: line skipped");
    }
}

fn entries(parsed: Parsed) -> Vec<Entry> {
    parsed
        .tokens
        .into_iter()
        .map(|(t, grant)| Entry {
            digest: Sha256::digest(t.as_bytes()).into(),
            grant,
        })
        .collect()
}

fn read(path: &Path) -> Result<(Parsed, Option<Stamp>), TokensError> {
    // The stamp first: a write after it is seen (as a changed stamp) next time.
    let stamp = stamp(path);
    let bytes = std::fs::read(path).map_err(|source| TokensError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // Invalid UTF-8 spoils only its own line (Rule::Charset), not the file.
    Ok((parse_tokens(&String::from_utf8_lossy(&bytes)), stamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("relay-auth-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        dir.join("tokens")
    }

    #[test]
    fn checks_token_and_container() {
        let p = scratch("check");
        std::fs::write(&p, "abcdefghijklmnop0001\nabcdefghijklmnop0002 data\n").expect("write");
        let s = TokenStore::load(&p).expect("load");
        assert_eq!(
            s.check("abcdefghijklmnop0001", "any", Access::Write),
            Ok(())
        );
        assert_eq!(
            s.check("abcdefghijklmnop0002", "data", Access::Write),
            Ok(())
        );
        assert_eq!(
            s.check("abcdefghijklmnop0002", "other", Access::Write),
            Err(AuthError::Container("other".into()))
        );
        assert_eq!(
            s.check("nope", "data", Access::Write),
            Err(AuthError::Unknown)
        );
        assert_eq!(AuthError::Unknown.to_string(), "unknown or expired token");
        assert_eq!(
            AuthError::Container("other".into()).to_string(),
            "token may not write container \"other\""
        );
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }

    #[tokio::test]
    async fn reading_needs_a_read_grant_and_writing_a_write_grant() {
        let p = scratch("read");
        std::fs::write(
            &p,
            "abcdefghijklmnop0001\nabcdefghijklmnop0002 data:rw,results:r,logs\n",
        )
        .expect("write");
        let s = TokenStore::load(&p).expect("load");
        let auth = |token: &'static str, container: &'static str, access| {
            let s = &s;
            async move { authenticate(s, None, token, container, access).await }
        };
        use Access::{Read, Write};
        assert_eq!(
            auth("abcdefghijklmnop0002", "data", Read).await,
            Ok(Caller::Static)
        );
        assert_eq!(
            auth("abcdefghijklmnop0002", "data", Write).await,
            Ok(Caller::Static)
        );
        assert_eq!(
            auth("abcdefghijklmnop0002", "results", Read).await,
            Ok(Caller::Static)
        );
        assert_eq!(
            auth("abcdefghijklmnop0002", "results", Write).await,
            Err(AuthError::Container("results".into()))
        );
        // A bare name and a line without a list: write only, as before.
        assert_eq!(
            auth("abcdefghijklmnop0002", "logs", Write).await,
            Ok(Caller::Static)
        );
        assert_eq!(
            auth("abcdefghijklmnop0002", "logs", Read).await,
            Err(AuthError::NoRead("logs".into()))
        );
        assert_eq!(
            auth("abcdefghijklmnop0001", "any", Write).await,
            Ok(Caller::Static)
        );
        assert_eq!(
            auth("abcdefghijklmnop0001", "any", Read).await,
            Err(AuthError::NoRead("any".into()))
        );
        assert_eq!(
            auth("abcdefghijklmnop0009", "data", Read).await,
            Err(AuthError::Unknown)
        );
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }

    #[test]
    fn a_bad_line_does_not_keep_removed_tokens() {
        let p = scratch("badline");
        std::fs::write(&p, "abcdefghijklmnop0001\nabcdefghijklmnop0002\n").expect("write");
        let s = TokenStore::load(&p).expect("load");
        assert_eq!(
            s.check("abcdefghijklmnop0002", "data", Access::Write),
            Ok(())
        );
        // 0002 removed, and a typo (13 characters) added.
        std::fs::write(&p, "abcdefghijklmnop0001\nabcdefghijklm\n").expect("write");
        s.reload();
        assert_eq!(
            s.check("abcdefghijklmnop0001", "data", Access::Write),
            Ok(())
        );
        assert_eq!(
            s.check("abcdefghijklmnop0002", "data", Access::Write),
            Err(AuthError::Unknown)
        );
        assert_eq!(
            s.check("abcdefghijklm", "data", Access::Write),
            Err(AuthError::Unknown)
        );
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }

    #[test]
    fn no_valid_token_refuses_everyone_at_run_time_and_fails_at_start() {
        let p = scratch("none");
        std::fs::write(&p, "abcdefghijklmnop0001\n").expect("write");
        let s = TokenStore::load(&p).expect("load");
        std::fs::write(&p, "# all gone\nshort\n").expect("write");
        s.reload();
        assert_eq!(
            s.check("abcdefghijklmnop0001", "data", Access::Write),
            Err(AuthError::Unknown)
        );
        // Unreadable: refused too, not the old list.
        std::fs::write(&p, "abcdefghijklmnop0001\n").expect("write");
        s.reload();
        assert_eq!(
            s.check("abcdefghijklmnop0001", "data", Access::Write),
            Ok(())
        );
        std::fs::remove_file(&p).expect("rm");
        s.reload();
        assert_eq!(
            s.check("abcdefghijklmnop0001", "data", Access::Write),
            Err(AuthError::Unknown)
        );
        // At start the same file is an error that names the skipped lines.
        std::fs::write(&p, "# all gone\nshort\n").expect("write");
        let e = TokenStore::load(&p).err().expect("no tokens").to_string();
        assert!(
            e.contains("lists no valid token") && e.contains("line 2: token shorter than 16"),
            "{e}"
        );
        assert!(!e.contains("short\n") && !e.contains(": short"), "{e}");
        std::fs::remove_file(&p).expect("rm");
        let e = TokenStore::load(&p).err().expect("missing").to_string();
        assert!(e.contains("cannot read tokens file"), "{e}");
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }

    /// An Offer's check never reads the file, even while it settles: reloads
    /// are `poll`'s, which the relay runs off the runtime.
    #[test]
    fn a_check_never_reads_the_file() {
        let p = scratch("noio");
        std::fs::write(&p, "abcdefghijklmnop0001 data\n").expect("write");
        let s = TokenStore::load(&p).expect("load");
        assert_eq!(s.reads(), 1);
        std::fs::write(&p, "abcdefghijklmnop0002 data\n").expect("write");
        // Past the old recheck interval, with the file just written (settling).
        std::thread::sleep(RECHECK + Duration::from_millis(100));
        for _ in 0..100 {
            assert_eq!(
                s.check("abcdefghijklmnop0001", "data", Access::Write),
                Ok(())
            );
        }
        assert_eq!(s.reads(), 1, "a check read the tokens file");
        s.poll();
        assert_eq!(s.reads(), 2);
        assert_eq!(
            s.check("abcdefghijklmnop0001", "data", Access::Write),
            Err(AuthError::Unknown)
        );
        assert_eq!(
            s.check("abcdefghijklmnop0002", "data", Access::Write),
            Ok(())
        );
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }

    /// A file whose modification time is in the future is settled: read once,
    /// then again only when it changes (never taken as forever settling).
    #[test]
    fn a_file_dated_in_the_future_is_read_once_then_only_when_it_changes() {
        let p = scratch("future");
        std::fs::write(&p, "abcdefghijklmnop0001 data\n").expect("write");
        let future = SystemTime::now() + Duration::from_secs(10 * 365 * 24 * 3600);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(future))
            .expect("set mtime");
        let s = TokenStore::load(&p).expect("load");
        for _ in 0..5 {
            s.poll();
        }
        assert_eq!(
            s.reads(),
            1,
            "an unchanged file dated in the future was re-read"
        );
        // A change is still seen (its size differs).
        std::fs::write(&p, "abcdefghijklmnop0002 data,more\n").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(future))
            .expect("set mtime");
        s.poll();
        assert_eq!(s.reads(), 2);
        assert_eq!(
            s.check("abcdefghijklmnop0002", "more", Access::Write),
            Ok(())
        );
        assert!(!is_settling(
            Some(Stamp {
                mtime: Some(future),
                len: 1,
                ino: 1
            }),
            SystemTime::now()
        ));
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }
}
