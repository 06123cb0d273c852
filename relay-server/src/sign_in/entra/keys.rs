//! The tenant's signing keys: the OpenID discovery document names the JWKS, both
//! fetched over HTTPS, cached by key ID, fetched again when a token names a key
//! the cache does not hold (Entra ID rotates keys), at most `RefreshBudget`
//! times per interval, so a flood of tokens with made-up key IDs costs the
//! relay at most that many fetches. A token whose key is cached never waits
//! for a fetch; tokens naming unknown keys share the one fetch in flight, and
//! wait for it at most `KeySource::with_wait`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use jsonwebtoken::DecodingKey;
use serde::Deserialize;

use super::Refusal;

/// Largest discovery document or JWKS accepted (Entra's are a few KiB).
const MAX_DOCUMENT: usize = 256 << 10;

/// Refreshes allowed in a sliding window (pure: time passed in).
#[derive(Debug)]
pub struct RefreshBudget {
    max: usize,
    window: Duration,
    taken: VecDeque<Instant>,
}

impl RefreshBudget {
    pub fn new(max: usize, window: Duration) -> Self {
        Self {
            max: max.max(1),
            window,
            taken: VecDeque::new(),
        }
    }

    /// Takes one refresh if the window has room.
    pub fn try_take(&mut self, now: Instant) -> bool {
        while let Some(t) = self.taken.front() {
            if now.saturating_duration_since(*t) >= self.window {
                self.taken.pop_front();
            } else {
                break;
            }
        }
        if self.taken.len() >= self.max {
            return false;
        }
        self.taken.push_back(now);
        true
    }
}

#[derive(Deserialize)]
struct Discovery {
    jwks_uri: String,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kid: Option<String>,
    kty: String,
    #[serde(rename = "use")]
    use_: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

/// Why the keys could not be fetched (logged; the token is refused as
/// `KeysUnavailable`).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("GET {url}: {source}")]
    Http { url: String, source: reqwest::Error },
    #[error("GET {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("GET {url}: larger than {MAX_DOCUMENT} bytes")]
    TooLarge { url: String },
    #[error("{url}: {source}")]
    Json {
        url: String,
        source: serde_json::Error,
    },
    #[error("jwks_uri {0:?} is not https")]
    NotHttps(String),
}

/// The keys a token is checked against: replaced whole by each fetch, read
/// without waiting (a fetch in flight never blocks a token whose key is cached).
type Keys = Arc<HashMap<String, DecodingKey>>;

/// How a fetch ended, as every token waiting on it sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetched {
    Keys,
    Failed,
}

/// The refresh state: the budget, and the fetch in flight (at most one) that
/// tokens naming an unknown key wait on together.
struct Refresh {
    budget: RefreshBudget,
    in_flight: Option<watch::Receiver<Option<Fetched>>>,
}

struct Inner {
    http: reqwest::Client,
    discovery_url: String,
    /// A snapshot, swapped under a lock held only to clone or replace the `Arc`.
    keys: RwLock<Keys>,
    refresh: Mutex<Refresh>,
    /// JWKS documents fetched so far (for /metrics and the tests).
    fetches: AtomicU64,
    /// Tokens waiting for a fetch now (for /metrics and the tests).
    waiting: AtomicU64,
}

/// Counts a token among `waiting` while it waits, however the wait ends.
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicU64) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct KeySource {
    inner: Arc<Inner>,
    /// Longest a token waits for a fetch (the relay's auth deadline bounds it):
    /// past it the token is refused as `KeysUnavailable` and the fetch goes on
    /// for the tokens after it.
    wait: Duration,
}

/// How long a token waits for a key fetch unless told otherwise.
pub const DEFAULT_KEY_WAIT: Duration = Duration::from_secs(5);

impl KeySource {
    pub fn new(http: reqwest::Client, discovery_url: String, budget: RefreshBudget) -> Self {
        Self {
            inner: Arc::new(Inner {
                http,
                discovery_url,
                keys: RwLock::new(Arc::new(HashMap::new())),
                refresh: Mutex::new(Refresh {
                    budget,
                    in_flight: None,
                }),
                fetches: AtomicU64::new(0),
                waiting: AtomicU64::new(0),
            }),
            wait: DEFAULT_KEY_WAIT,
        }
    }

    /// Sets how long a token waits for a key fetch.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    pub fn fetches(&self) -> u64 {
        self.inner.fetches.load(Ordering::Relaxed)
    }

    /// Tokens waiting for a key fetch now.
    pub fn waiting(&self) -> u64 {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Whether a key fetch is under way.
    pub fn fetching(&self) -> bool {
        let r = self.inner.refresh.lock().unwrap_or_else(|p| p.into_inner());
        r.in_flight
            .as_ref()
            .is_some_and(|rx| rx.has_changed().is_ok())
    }

    /// The key for `kid`: from the cache at once; else from the fetch in flight,
    /// or a new one if the budget allows it now, waited for at most `wait`.
    pub async fn key(&self, kid: &str) -> Result<DecodingKey, Refusal> {
        let mut done = {
            if let Some(k) = self.inner.cached(kid) {
                return Ok(k);
            }
            let mut r = self.inner.refresh.lock().unwrap_or_else(|p| p.into_inner());
            // Again under the lock: a fetch that ended since the first look
            // published its keys before it left `in_flight`.
            if let Some(k) = self.inner.cached(kid) {
                return Ok(k);
            }
            match r.in_flight.clone() {
                // `has_changed` fails only if the fetch's task is gone without
                // an answer (a runtime shutting down): start another.
                Some(rx) if rx.has_changed().is_ok() => rx,
                _ => {
                    if !r.budget.try_take(Instant::now()) {
                        return Err(Refusal::UnknownKey);
                    }
                    let (tx, rx) = watch::channel(None);
                    r.in_flight = Some(rx.clone());
                    // A task of its own: a waiter that gives up (or whose
                    // connection closes) does not cancel the fetch the others
                    // share; the HTTPS client's timeouts end it.
                    tokio::spawn(self.inner.clone().refresh(tx));
                    rx
                }
            }
        };
        let waiting = Waiting::new(&self.inner.waiting);
        let outcome = tokio::time::timeout(self.wait, done.wait_for(Option::is_some)).await;
        drop(waiting);
        match outcome {
            Ok(Ok(seen)) if *seen == Some(Fetched::Keys) => {}
            Ok(_) => return Err(Refusal::KeysUnavailable),
            Err(_) => {
                tracing::warn!(
                    wait_ms = self.wait.as_millis() as u64,
                    "Entra ID signing keys not fetched in time; token refused"
                );
                return Err(Refusal::KeysUnavailable);
            }
        }
        self.inner.cached(kid).ok_or(Refusal::UnknownKey)
    }
}

impl Inner {
    fn cached(&self, kid: &str) -> Option<DecodingKey> {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        keys.get(kid).cloned()
    }

    /// One fetch, shared by every token that waits on `done`.
    async fn refresh(self: Arc<Self>, done: watch::Sender<Option<Fetched>>) {
        let outcome = match self.fetch().await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "Entra ID signing keys fetched");
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
                Fetched::Keys
            }
            Err(e) => {
                // Keep the keys we had: a failed fetch is not a revocation.
                tracing::warn!(error = %e, "cannot fetch Entra ID signing keys");
                Fetched::Failed
            }
        };
        // Keys first, then out of `in_flight`: a token that finds no fetch in
        // flight finds the new keys.
        self.refresh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .in_flight = None;
        let _ = done.send(Some(outcome));
    }

    async fn fetch(&self) -> Result<HashMap<String, DecodingKey>, FetchError> {
        let discovery: Discovery = self.get_json(&self.discovery_url).await?;
        if !discovery.jwks_uri.starts_with("https://") {
            return Err(FetchError::NotHttps(discovery.jwks_uri));
        }
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let set: JwkSet = self.get_json(&discovery.jwks_uri).await?;
        Ok(usable_keys(set))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, FetchError> {
        let http = |source| FetchError::Http {
            url: url.to_string(),
            source,
        };
        let mut resp = self.http.get(url).send().await.map_err(http)?;
        if !resp.status().is_success() {
            return Err(FetchError::Status {
                url: url.to_string(),
                status: resp.status().as_u16(),
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(http)? {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(FetchError::TooLarge {
                    url: url.to_string(),
                });
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|source| FetchError::Json {
            url: url.to_string(),
            source,
        })
    }
}

/// RSA signing keys with an ID; others (encryption keys, other types) skipped.
fn usable_keys(set: JwkSet) -> HashMap<String, DecodingKey> {
    let mut out = HashMap::new();
    for k in set.keys {
        let signing = k.use_.as_deref().is_none_or(|u| u == "sig");
        let rs256 = k.alg.as_deref().is_none_or(|a| a == "RS256");
        let (Some(kid), Some(n), Some(e)) = (k.kid, k.n, k.e) else {
            continue;
        };
        if k.kty != "RSA" || !signing || !rs256 {
            continue;
        }
        if let Ok(key) = DecodingKey::from_rsa_components(&n, &e) {
            out.insert(kid, key);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_allows_max_per_window() {
        let t0 = Instant::now();
        let mut b = RefreshBudget::new(2, Duration::from_secs(60));
        assert!(b.try_take(t0));
        assert!(b.try_take(t0 + Duration::from_secs(1)));
        assert!(!b.try_take(t0 + Duration::from_secs(2)));
        assert!(!b.try_take(t0 + Duration::from_secs(59)));
        assert!(b.try_take(t0 + Duration::from_secs(60)));
        assert!(!b.try_take(t0 + Duration::from_secs(60)));
    }
}
