//! Entra ID access tokens as an alternative to static tokens: one explicit list
//! of checks (`Entra::authenticate`), each refusal named (`Refusal`) and counted
//! by name in `/metrics`. The cryptography (RS256 signature) is `jsonwebtoken`'s,
//! on aws-lc-rs; the claims rules are `claims::check` (pure); the keys' I/O is
//! `keys::KeySource`. Which containers a principal may write is `grants`.

pub mod claims;
pub mod grants;
pub mod keys;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

pub use claims::{Policy, Principal};
pub use grants::Grants;
pub use keys::{KeySource, RefreshBudget};

use crate::exposition::{Exposition, Kind};

/// Longest token looked at (Entra's access tokens are 1-3 KiB; group overage
/// keeps them bounded).
pub const MAX_TOKEN_LEN: usize = 16 << 10;

/// Why a token was refused. Each is a label of
/// `blob_relay_entra_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed token ({0})")]
    Malformed(&'static str),
    #[error("token algorithm not accepted (only RS256)")]
    Algorithm,
    #[error("token signed with a key the tenant does not publish")]
    UnknownKey,
    #[error("the tenant's signing keys cannot be fetched now")]
    KeysUnavailable,
    #[error("token signature does not verify")]
    Signature,
    #[error("token expired")]
    Expired,
    #[error("token not valid yet")]
    NotYetValid,
    #[error("token issuer not accepted")]
    Issuer,
    #[error("token audience is not this relay")]
    Audience,
    #[error("token from another tenant")]
    Tenant,
}

const REFUSALS: [Refusal; 10] = [
    Refusal::Malformed(""),
    Refusal::Algorithm,
    Refusal::UnknownKey,
    Refusal::KeysUnavailable,
    Refusal::Signature,
    Refusal::Expired,
    Refusal::NotYetValid,
    Refusal::Issuer,
    Refusal::Audience,
    Refusal::Tenant,
];

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Algorithm => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::KeysUnavailable => "keys_unavailable",
            Refusal::Signature => "signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Issuer => "issuer",
            Refusal::Audience => "audience",
            Refusal::Tenant => "tenant",
        }
    }

    fn index(self) -> usize {
        // Every refusal is in REFUSALS (the match in `label` is exhaustive).
        REFUSALS
            .iter()
            .position(|r| r.label() == self.label())
            .unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// The relay's Entra ID front door.
pub struct Entra {
    policy: Policy,
    keys: KeySource,
    pub grants: Grants,
    refusals: [AtomicU64; REFUSALS.len()],
}

/// Whether a bearer token is a JWT (three base64url parts) rather than a static
/// token (which the tokens file's charset allows to contain dots, but not this shape
/// with a JSON header: `eyJ` is `{"` encoded).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.split('.').count() == 3
}

impl Entra {
    pub fn new(policy: Policy, keys: KeySource, grants: Grants) -> Self {
        Self {
            policy,
            keys,
            grants,
            refusals: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// JWKS documents fetched so far.
    pub fn key_fetches(&self) -> u64 {
        self.keys.fetches()
    }

    /// Tokens waiting for a key fetch now.
    pub fn key_waiting(&self) -> u64 {
        self.keys.waiting()
    }

    /// Whether a key fetch is under way.
    pub fn key_fetching(&self) -> bool {
        self.keys.fetching()
    }

    pub fn refused(&self, r: Refusal) -> u64 {
        self.refusals[r.index()].load(Ordering::Relaxed)
    }

    /// Every check, in order; counts a refusal by its name.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Refusal> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let r = self.checks(token, now).await;
        if let Err(e) = r {
            self.refusals[e.index()].fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn checks(&self, token: &str, now: i64) -> Result<Principal, Refusal> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(Refusal::Malformed("longer than 16 KiB"));
        }
        // 1. The header, read here (not by the library) so the algorithm is
        //    refused by name before any key is looked up: `none`, HS256 (which
        //    would take the public key as an HMAC secret) and all but RS256.
        let header = header(token)?;
        if header.alg != "RS256" {
            return Err(Refusal::Algorithm);
        }
        // 2. The key: published by the tenant, by ID.
        let kid = header.kid.ok_or(Refusal::Malformed("no kid"))?;
        let key = self.keys.key(&kid).await?;
        // 3. The signature, RS256 only; claims are checked in step 4, with `now`.
        let mut v = Validation::new(Algorithm::RS256);
        v.validate_exp = false;
        v.validate_nbf = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<claims::Claims>(token, &key, &v).map_err(|e| match e
            .kind()
        {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => Refusal::Signature,
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => Refusal::Algorithm,
            _ => Refusal::Malformed("claims"),
        })?;
        // 4. Expiry, not-before, issuer, audience, tenant, object ID.
        claims::check(&self.policy, data.claims, now)
    }

    pub fn render(&self, out: &mut Exposition) {
        out.labelled(
            "blob_relay_entra_refusals_total",
            Kind::Counter,
            "Entra ID access tokens refused, by the check that refused them.",
            REFUSALS
                .iter()
                .map(|r| ([("reason", r.label())], self.refused(*r))),
        );
        out.value(
            "blob_relay_entra_key_fetches_total",
            Kind::Counter,
            "JWKS documents fetched from the tenant (rate-limited).",
            self.key_fetches(),
        );
        out.value(
            "blob_relay_entra_key_waiting",
            Kind::Gauge,
            "Tokens naming a key the relay does not hold, waiting for the key fetch in flight.",
            self.key_waiting(),
        );
    }
}

fn header(token: &str) -> Result<Header, Refusal> {
    let first = token
        .split('.')
        .next()
        .ok_or(Refusal::Malformed("no header"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(first)
        .map_err(|_| Refusal::Malformed("header is not base64url"))?;
    serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed("header is not JSON"))
}
