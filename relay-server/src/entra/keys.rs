//! The tenant's signing keys: the OpenID discovery document names the JWKS, both
//! fetched over HTTPS, cached by key ID, fetched again when a token names a key
//! the cache does not hold (Entra ID rotates keys), at most `RefreshBudget`
//! times per interval, so a flood of tokens with made-up key IDs costs the
//! relay at most that many fetches.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

struct Cache {
    keys: HashMap<String, DecodingKey>,
    budget: RefreshBudget,
}

pub struct KeySource {
    http: reqwest::Client,
    discovery_url: String,
    /// Held across a refresh, so concurrent tokens with one new key ID wait for
    /// one fetch rather than each making their own.
    cache: tokio::sync::Mutex<Cache>,
    /// JWKS documents fetched so far (for /metrics and the tests).
    fetches: AtomicU64,
}

impl KeySource {
    pub fn new(http: reqwest::Client, discovery_url: String, budget: RefreshBudget) -> Self {
        Self {
            http,
            discovery_url,
            cache: tokio::sync::Mutex::new(Cache {
                keys: HashMap::new(),
                budget,
            }),
            fetches: AtomicU64::new(0),
        }
    }

    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// The key for `kid`: from the cache, else after a refresh if the budget
    /// allows one now.
    pub async fn key(&self, kid: &str) -> Result<DecodingKey, Refusal> {
        let mut cache = self.cache.lock().await;
        if let Some(k) = cache.keys.get(kid) {
            return Ok(k.clone());
        }
        if !cache.budget.try_take(Instant::now()) {
            return Err(Refusal::UnknownKey);
        }
        match self.fetch().await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "Entra ID signing keys fetched");
                cache.keys = keys;
            }
            Err(e) => {
                // Keep the keys we had: a failed fetch is not a revocation.
                tracing::warn!(error = %e, "cannot fetch Entra ID signing keys");
                return Err(Refusal::KeysUnavailable);
            }
        }
        cache.keys.get(kid).cloned().ok_or(Refusal::UnknownKey)
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
