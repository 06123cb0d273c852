//! What an Offer carries as its token: a static one, or an Entra ID access
//! token fetched when an Offer needs it and replaced before it expires.
//!
//! Why per Offer, and no re-authentication frame: the relay checks a token once,
//! on the Offer that opens a file's stream, before any credit is raised; a
//! stream it accepted goes on to its Receipt whatever the token's expiry, as an
//! HTTP request authorised when it began is not cut off halfway. So a file that
//! outlives its token needs nothing; what needs a fresh token is every later
//! Offer: the next files, and the Offer that resumes a file over a new
//! connection. Each asks `Bearer::current`, which hands out the cached token
//! while it has a good part of its life left and fetches a new one otherwise
//! (one fetch at a time: concurrent Offers wait for it). The relay keys resume
//! state on the principal (tenant and object ID), not on the token, so a
//! resumed file continues under its new token; nothing on the relay changes.

use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use relay_proto::logsafe::safe_to;
use relay_proto::protocol::Secret;
use serde::Deserialize;

use super::{Flow, SignInError};

/// The longest a token is kept before its expiry: fetched anew five minutes
/// before (as Azure's own SDKs do), or at half its lifetime if that is shorter.
pub const REFRESH_MARGIN_SECS: i64 = 300;

/// Whether a token fetched at `fetched` and expiring at `expires` (Unix
/// seconds) may still go into an Offer at `now`: it must have more than its
/// margin left, the margin being `REFRESH_MARGIN_SECS` or half its lifetime,
/// whichever is shorter. That leaves the Offer time to reach the relay and the
/// relay's clock room to differ.
pub fn fresh(now: i64, fetched: i64, expires: i64) -> bool {
    let lifetime = expires.saturating_sub(fetched).max(0);
    let margin = REFRESH_MARGIN_SECS.min(lifetime / 2);
    now < expires.saturating_sub(margin)
}

/// The relay's token for every Offer of a run.
#[derive(Debug, Clone)]
pub enum Bearer {
    /// `--token` / RELAY_TOKEN.
    Static(Secret),
    /// `--entra FLOW`.
    Entra(Arc<EntraToken>),
}

impl Bearer {
    /// The token for the next Offer.
    pub async fn current(&self) -> Result<Secret, SignInError> {
        match self {
            Bearer::Static(s) => Ok(s.clone()),
            Bearer::Entra(e) => e.current().await,
        }
    }

    /// Who the relay will see, for a refusal's message: the signed-in
    /// principal as its last token names it, or `None` for a static token.
    pub fn who(&self) -> Option<String> {
        match self {
            Bearer::Static(_) => None,
            Bearer::Entra(e) => Some(e.who()),
        }
    }

    /// What the user can change when the relay refuses the token with
    /// `refusal` (the relay's reason).
    pub fn hint(&self, refusal: &str) -> &'static str {
        match self {
            Bearer::Static(_) => "check --token or RELAY_TOKEN",
            // The token was renewed with time to spare by this machine's
            // clock: one the relay finds expired means the clocks disagree.
            Bearer::Entra(_)
                if refusal.contains("expired") || refusal.contains("not valid yet") =>
            {
                "check this machine's clock (tokens are renewed by it)"
            }
            Bearer::Entra(_) => {
                "check --entra-scope (the relay's application ID URI) and that the \
                 relay trusts this tenant"
            }
        }
    }
}

struct Held {
    token: Secret,
    fetched: i64,
    expires: i64,
}

/// An Entra ID access token for the relay's application, kept fresh.
pub struct EntraToken {
    credential: Arc<dyn TokenCredential>,
    flow: Flow,
    scope: String,
    held: tokio::sync::Mutex<Option<Held>>,
    /// The last token's claims as the client read them (unverified: for
    /// messages only), so a refusal can say who was refused.
    seen: std::sync::Mutex<Option<Seen>>,
}

impl std::fmt::Debug for EntraToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EntraToken({} for {})", self.flow.name(), self.scope)
    }
}

/// What a token says about its holder (read, not verified: the relay verifies).
#[derive(Debug, Clone, Default, Deserialize)]
struct Seen {
    oid: Option<String>,
    preferred_username: Option<String>,
    upn: Option<String>,
    name: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
}

impl EntraToken {
    pub fn new(credential: Arc<dyn TokenCredential>, flow: Flow, scope: String) -> Self {
        Self {
            credential,
            flow,
            scope,
            held: tokio::sync::Mutex::new(None),
            seen: std::sync::Mutex::new(None),
        }
    }

    /// The credential (direct mode reuses it towards storage: one sign-in).
    pub fn credential(&self) -> Arc<dyn TokenCredential> {
        self.credential.clone()
    }

    pub async fn current(&self) -> Result<Secret, SignInError> {
        // Held across the fetch: concurrent Offers wait for one new token
        // instead of each asking Entra ID for its own.
        let mut held = self.held.lock().await;
        let now = unix_now();
        if let Some(h) = held.as_ref()
            && fresh(now, h.fetched, h.expires)
        {
            return Ok(h.token.clone());
        }
        let t = self
            .credential
            .get_token(&[self.scope.as_str()], None)
            .await
            .map_err(|e| SignInError::Token {
                flow: self.flow.name(),
                reason: e.to_string(),
            })?;
        let token = Secret(t.token.secret().to_string());
        let expires = t.expires_on.unix_timestamp();
        tracing::info!(
            flow = self.flow.name(),
            scope = %self.scope,
            lifetime_secs = expires - now,
            "Entra ID token for the relay"
        );
        if let Some(seen) = peek(&token.0) {
            *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(seen);
        }
        *held = Some(Held {
            token: token.clone(),
            fetched: now,
            expires,
        });
        Ok(token)
    }

    /// "alice@contoso.com (object ID …; roles: none)", from the last token.
    pub fn who(&self) -> String {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        describe(seen, self.flow)
    }
}

/// A principal as a message shows it; every part came from the token, so
/// escaped and cut short.
fn describe(seen: Seen, flow: Flow) -> String {
    let name = seen
        .preferred_username
        .or(seen.upn)
        .or(seen.name)
        .unwrap_or_else(|| format!("--entra {}", flow.name()));
    let roles = if seen.roles.is_empty() {
        "none".to_string()
    } else {
        seen.roles.join(", ")
    };
    format!(
        "{} (object ID {}; app roles: {})",
        safe_to(&name, 80),
        safe_to(seen.oid.as_deref().unwrap_or("unknown"), 40),
        safe_to(&roles, 200)
    )
}

/// The claims of a JWT, unverified; `None` for anything else.
fn peek(token: &str) -> Option<Seen> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_token_is_renewed_five_minutes_before_it_expires() {
        let (fetched, expires) = (1_000, 1_000 + 3600);
        assert!(fresh(fetched, fetched, expires));
        assert!(fresh(expires - 301, fetched, expires));
        assert!(!fresh(expires - 300, fetched, expires));
        assert!(!fresh(expires + 10, fetched, expires));
    }

    #[test]
    fn a_short_token_is_renewed_at_half_its_life() {
        let (fetched, expires) = (1_000, 1_010);
        assert!(fresh(1_004, fetched, expires));
        assert!(!fresh(1_005, fetched, expires));
        // Already expired, or no life at all: never fresh.
        assert!(!fresh(1_000, 1_000, 1_000));
        assert!(!fresh(1_000, 1_000, 900));
    }

    #[test]
    fn a_refused_token_gets_the_hint_that_fits() {
        let entra = Bearer::Entra(Arc::new(EntraToken::new(
            super::super::azure_credential(&super::super::SignIn {
                flow: Flow::ManagedIdentity,
                tenant: None,
                client_id: None,
            })
            .unwrap_or_else(|e| panic!("{e}")),
            Flow::ManagedIdentity,
            "api://r/.default".into(),
        )));
        assert!(
            entra
                .hint("Entra ID token refused: token expired")
                .contains("clock")
        );
        assert!(
            entra
                .hint("Entra ID token refused: token audience is not this relay")
                .contains("--entra-scope")
        );
        assert!(
            Bearer::Static(Secret::default())
                .hint("unknown or expired token")
                .contains("--token")
        );
    }

    #[test]
    fn who_reads_the_claims_and_escapes_them() {
        let claims = r#"{"oid":"o-1","preferred_username":"eve\u001b[31m","roles":["Uploader.a"]}"#;
        let token = format!(
            "eyJhbGciOiJSUzI1NiJ9.{}.sig",
            URL_SAFE_NO_PAD.encode(claims)
        );
        let seen = peek(&token).unwrap_or_else(|| panic!("claims"));
        assert_eq!(seen.oid.as_deref(), Some("o-1"));
        assert_eq!(seen.roles, vec!["Uploader.a".to_string()]);
        let who = describe(seen, Flow::Cli);
        assert!(
            who.starts_with("eve\\u{1b}[31m (object ID o-1; app roles: Uploader.a)"),
            "{who}"
        );
        assert!(!who.contains('\u{1b}'), "{who}");
        assert!(describe(Seen::default(), Flow::DeviceCode).contains("--entra device-code"));
        assert!(peek("not-a-jwt").is_none());
        assert!(peek("a.!!.c").is_none());
    }
}
