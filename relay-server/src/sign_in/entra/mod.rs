//! Entra ID access tokens as an alternative to static tokens: one explicit list
//! of checks (`Entra::authenticate`), each refusal named (`Refusal`) and counted
//! by name in `/metrics`. The cryptography (RS256 signature) is `jsonwebtoken`'s,
//! on aws-lc-rs; the claims rules are `claims::check` (pure); the keys' I/O is
//! `keys::KeySource`. Which containers a principal may write is `grants`.

pub mod claims;
pub mod grants;
pub mod keys;
pub mod token;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use claims::{Policy, Principal};
pub use grants::Grants;
pub use keys::{KeySource, RefreshBudget};
pub use token::Malformed;

use crate::telemetry::exposition::{Exposition, Kind};

/// Longest token looked at (Entra's access tokens are 1-3 KiB; group overage
/// keeps them bounded).
pub const MAX_TOKEN_LEN: usize = 16 << 10;

/// Why a token was refused. Each is a label of
/// `blob_relay_entra_refusals_total` (a malformed token by what is malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("malformed token ({0})")]
    Malformed(Malformed),
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
    #[error("token lives longer than 24 hours")]
    Lifetime,
    #[error("token version does not match its issuer")]
    Version,
    #[error("not an access token for this relay (an ID token?)")]
    NotAccessToken,
}

impl From<Malformed> for Refusal {
    fn from(m: Malformed) -> Self {
        Refusal::Malformed(m)
    }
}

/// Every refusal, in the order /metrics lists them.
fn refusals() -> impl Iterator<Item = Refusal> {
    const OTHERS: [Refusal; OTHER_KINDS] = [
        Refusal::Algorithm,
        Refusal::UnknownKey,
        Refusal::KeysUnavailable,
        Refusal::Signature,
        Refusal::Expired,
        Refusal::NotYetValid,
        Refusal::Issuer,
        Refusal::Audience,
        Refusal::Tenant,
        Refusal::Lifetime,
        Refusal::Version,
        Refusal::NotAccessToken,
    ];
    Malformed::ALL
        .into_iter()
        .map(Refusal::Malformed)
        .chain(OTHERS)
}

const OTHER_KINDS: usize = 12;
const REFUSAL_KINDS: usize = Malformed::ALL.len() + OTHER_KINDS;

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Malformed(m) => m.label(),
            Refusal::Algorithm => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::KeysUnavailable => "keys_unavailable",
            Refusal::Signature => "signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Issuer => "issuer",
            Refusal::Audience => "audience",
            Refusal::Tenant => "tenant",
            Refusal::Lifetime => "lifetime",
            Refusal::Version => "version",
            Refusal::NotAccessToken => "not_access_token",
        }
    }

    fn index(self) -> usize {
        // Every refusal is in `refusals()` (the matches above are exhaustive).
        refusals().position(|r| r == self).unwrap_or_default()
    }
}

/// The relay's Entra ID front door.
pub struct Entra {
    policy: Policy,
    keys: KeySource,
    pub grants: Grants,
    refusals: [AtomicU64; REFUSAL_KINDS],
}

/// Whether a bearer token is meant as a JWT rather than a static token: it
/// starts with a JSON header (`eyJ` is `{"` in base64url) and has a dot. Any
/// such token goes to the Entra ID checks, so one with two or four parts is
/// refused there by name (`malformed_shape`), not looked up as a static token.
/// (The tokens file's charset allows dots; a static token shaped like this is
/// not accepted while Entra ID is configured.)
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.contains('.')
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
            return Err(Malformed::TooLong.into());
        }
        // 1. The form, read here (not by the library) so each fault is named
        //    and the algorithm is refused before any key is looked up.
        let jws = token::parse(token).map_err(|e| match e {
            token::ParseError::Malformed(m) => Refusal::Malformed(m),
            token::ParseError::Algorithm => Refusal::Algorithm,
        })?;
        // 2. The key: published by the tenant, by ID.
        let key = self.keys.key(&jws.kid).await?;
        // 3. The RS256 signature over the first two parts.
        if !jws.verifies(&key) {
            return Err(Refusal::Signature);
        }
        // 4. The claims, with `now`.
        claims::check(&self.policy, jws.claims, now)
    }

    pub fn render(&self, out: &mut Exposition) {
        out.labelled(
            "blob_relay_entra_refusals_total",
            Kind::Counter,
            "Entra ID access tokens refused, by the check that refused them.",
            refusals().map(|r| ([("reason", r.label())], self.refused(r))),
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
