//! The OAuth 2.0 device authorization grant (RFC 8628) against Entra ID, for a
//! person on a machine without a browser: the client asks for a code, prints
//! where to enter it, and polls the token endpoint until the person has signed
//! in on another device. The Azure identity library for Rust has no such
//! credential; this is the documented protocol
//! (learn.microsoft.com/entra/identity-platform/v2-oauth2-device-code), kept
//! small. The sign-in also yields a refresh token (`offline_access`), so later
//! tokens, for the relay or for storage, come without asking the person again.
//!
//! Endpoints: `{authority}/{tenant}/oauth2/v2.0/devicecode` and `.../token`,
//! the authority from AZURE_AUTHORITY_HOST (as azure_identity reads it),
//! https only.

use std::time::Duration;

use azure_core::credentials::{AccessToken, Secret, TokenCredential, TokenRequestOptions};
use azure_core::error::ErrorKind;
use relay_proto::logsafe::safe_to;
use serde::Deserialize;
use tokio::sync::Mutex;

/// The Azure CLI's public client ID: a client every tenant knows; the relay's
/// app registration pre-authorises it (terraform/entra.tf), so neither `--entra
/// cli` nor this flow needs a consent prompt.
pub const AZURE_CLI_CLIENT_ID: &str = "04b07795-8ddb-461a-bbee-02f9e1bf7b46";

const PUBLIC_CLOUD: &str = "https://login.microsoftonline.com";
const MAX_ANSWER_BYTES: usize = 64 << 10;
const GRANT_DEVICE_CODE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// What the devicecode endpoint answers.
#[derive(Debug, Deserialize)]
pub struct Authorization {
    device_code: String,
    /// Entra ID's own sentence: where to go and which code to type.
    message: Option<String>,
    user_code: Option<String>,
    verification_uri: Option<String>,
    expires_in: u64,
    #[serde(default = "default_interval")]
    interval: u64,
}

fn default_interval() -> u64 {
    5
}

/// A token endpoint's answer, success or error.
#[derive(Debug, Default, Deserialize)]
pub struct TokenAnswer {
    access_token: Option<String>,
    refresh_token: Option<String>,
    expires_in: Option<i64>,
    error: Option<String>,
    error_description: Option<String>,
}

/// What polling does next (pure: `next_step`).
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Signed in.
    Done,
    /// Ask again after this long.
    Wait(Duration),
    /// The sign-in ended without a token.
    Fail(String),
}

/// RFC 8628 section 3.5: `authorization_pending` waits the interval,
/// `slow_down` adds five seconds to it for good, anything else ends the
/// sign-in; `waited` past the code's lifetime ends it too.
pub fn next_step(
    answer: &TokenAnswer,
    interval: &mut Duration,
    waited: Duration,
    lifetime: Duration,
) -> Step {
    if answer.access_token.is_some() {
        return Step::Done;
    }
    let error = answer
        .error
        .as_deref()
        .unwrap_or("no access token in the answer");
    let step = match error {
        "authorization_pending" => Step::Wait(*interval),
        "slow_down" => {
            *interval += Duration::from_secs(5);
            Step::Wait(*interval)
        }
        "authorization_declined" => Step::Fail("the sign-in was declined".into()),
        "expired_token" => Step::Fail("the code expired before anyone signed in".into()),
        _ => Step::Fail(format!(
            "{}{}",
            safe_to(error, 80),
            answer
                .error_description
                .as_deref()
                .map(|d| format!(": {}", safe_to(d, 400)))
                .unwrap_or_default()
        )),
    };
    match step {
        Step::Wait(_) if waited >= lifetime => {
            Step::Fail("the code expired before anyone signed in".into())
        }
        s => s,
    }
}

/// Signs a person in once (device code), then refreshes silently.
pub struct DeviceCodeCredential {
    http: reqwest::Client,
    /// `{authority}/{tenant}/oauth2/v2.0/`
    base: url::Url,
    client_id: String,
    /// The refresh token of the last sign-in or refresh.
    refresh: Mutex<Option<String>>,
}

impl std::fmt::Debug for DeviceCodeCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceCodeCredential({}, {})", self.base, self.client_id)
    }
}

fn credential_error(message: impl Into<String>) -> azure_core::Error {
    azure_core::Error::with_message(ErrorKind::Credential, message.into())
}

impl DeviceCodeCredential {
    pub fn new(tenant: Option<String>, client_id: Option<String>) -> azure_core::Result<Self> {
        let authority =
            std::env::var("AZURE_AUTHORITY_HOST").unwrap_or_else(|_| PUBLIC_CLOUD.to_string());
        let tenant = tenant.unwrap_or_else(|| "organizations".to_string());
        let base = endpoint_base(&authority, &tenant)?;
        let http = reqwest::Client::builder()
            .https_only(true)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| credential_error(format!("HTTPS client: {e}")))?;
        Ok(Self {
            http,
            base,
            client_id: client_id.unwrap_or_else(|| AZURE_CLI_CLIENT_ID.to_string()),
            refresh: Mutex::new(None),
        })
    }

    async fn post<T: for<'de> Deserialize<'de>>(
        &self,
        endpoint: &str,
        form: &[(&str, &str)],
    ) -> azure_core::Result<T> {
        let url = self
            .base
            .join(endpoint)
            .map_err(|e| credential_error(e.to_string()))?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut resp = self
            .http
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| credential_error(format!("{url}: {e}")))?;
        let status = resp.status();
        // Bounded: a token answer is a few KiB; a hostile endpoint gets no more.
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| credential_error(format!("{url}: {e}")))?
        {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(credential_error(format!("{url}: answer over 64 KiB")));
            }
            bytes.extend_from_slice(&chunk);
        }
        // Errors come as JSON too (400 with `error`): the caller reads them.
        serde_json::from_slice(&bytes)
            .map_err(|e| credential_error(format!("{url}: HTTP {status}, not a token answer: {e}")))
    }

    /// A new token from the refresh token, if there is one and it still works.
    async fn refreshed(&self, scope: &str) -> Option<AccessToken> {
        let mut refresh = self.refresh.lock().await;
        let rt = refresh.clone()?;
        let answer: TokenAnswer = self
            .post(
                "token",
                &[
                    ("grant_type", "refresh_token"),
                    ("client_id", &self.client_id),
                    ("refresh_token", &rt),
                    ("scope", scope),
                ],
            )
            .await
            .ok()?;
        if answer.refresh_token.is_some() {
            refresh.clone_from(&answer.refresh_token);
        }
        match to_access_token(answer) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::info!(error = %e, "refresh token refused: signing in again");
                *refresh = None;
                None
            }
        }
    }

    async fn sign_in(&self, scope: &str) -> azure_core::Result<AccessToken> {
        let auth: Authorization = self
            .post(
                "devicecode",
                &[("client_id", &self.client_id), ("scope", scope)],
            )
            .await?;
        let prompt = auth.message.clone().unwrap_or_else(|| {
            format!(
                "To sign in, open {} and enter the code {}",
                auth.verification_uri
                    .as_deref()
                    .unwrap_or("the sign-in page"),
                auth.user_code.as_deref().unwrap_or("?")
            )
        });
        // Peer-provided text on a terminal: escaped, cut short.
        eprintln!("relay-client: {}", safe_to(&prompt, 400));
        let lifetime = Duration::from_secs(auth.expires_in);
        let mut interval = Duration::from_secs(auth.interval.max(1));
        let started = std::time::Instant::now();
        loop {
            tokio::time::sleep(interval).await;
            let answer: TokenAnswer = self
                .post(
                    "token",
                    &[
                        ("grant_type", GRANT_DEVICE_CODE),
                        ("client_id", &self.client_id),
                        ("device_code", &auth.device_code),
                    ],
                )
                .await?;
            match next_step(&answer, &mut interval, started.elapsed(), lifetime) {
                Step::Done => {
                    *self.refresh.lock().await = answer.refresh_token.clone();
                    return to_access_token(answer);
                }
                Step::Wait(_) => continue,
                Step::Fail(why) => {
                    return Err(credential_error(format!("device code sign-in: {why}")));
                }
            }
        }
    }
}

fn to_access_token(answer: TokenAnswer) -> azure_core::Result<AccessToken> {
    let Some(token) = answer.access_token else {
        return Err(credential_error(format!(
            "token endpoint: {}",
            safe_to(answer.error.as_deref().unwrap_or("no access token"), 80)
        )));
    };
    let expires_in = answer.expires_in.unwrap_or(0).max(0);
    Ok(AccessToken::new(
        Secret::new(token),
        azure_core::time::OffsetDateTime::now_utc()
            + azure_core::time::Duration::seconds(expires_in),
    ))
}

/// `{authority}/{tenant}/oauth2/v2.0/`, https only (tokens and refresh tokens
/// go there).
fn endpoint_base(authority: &str, tenant: &str) -> azure_core::Result<url::Url> {
    let authority = authority.trim_end_matches('/');
    if !authority.starts_with("https://") {
        return Err(credential_error(format!(
            "AZURE_AUTHORITY_HOST must be https://, not {authority:?}"
        )));
    }
    if tenant.is_empty()
        || !tenant
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.".contains(c))
    {
        return Err(credential_error(format!(
            "tenant {:?} is not a tenant ID or domain",
            safe_to(tenant, 80)
        )));
    }
    url::Url::parse(&format!("{authority}/{tenant}/oauth2/v2.0/"))
        .map_err(|e| credential_error(format!("AZURE_AUTHORITY_HOST: {e}")))
}

#[async_trait::async_trait]
impl TokenCredential for DeviceCodeCredential {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        // `offline_access`: a refresh token, so the person signs in once a run.
        let mut scope: Vec<&str> = scopes.to_vec();
        scope.push("offline_access");
        let scope = scope.join(" ");
        if let Some(t) = self.refreshed(&scope).await {
            return Ok(t);
        }
        self.sign_in(&scope).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(error: &str) -> TokenAnswer {
        TokenAnswer {
            error: Some(error.into()),
            ..TokenAnswer::default()
        }
    }

    #[test]
    fn polling_follows_rfc_8628() {
        let life = Duration::from_secs(900);
        let mut interval = Duration::from_secs(5);
        let w = Duration::from_secs(10);
        assert_eq!(
            next_step(&answer("authorization_pending"), &mut interval, w, life),
            Step::Wait(Duration::from_secs(5))
        );
        assert_eq!(
            next_step(&answer("slow_down"), &mut interval, w, life),
            Step::Wait(Duration::from_secs(10))
        );
        // slow_down is for good.
        assert_eq!(
            next_step(&answer("authorization_pending"), &mut interval, w, life),
            Step::Wait(Duration::from_secs(10))
        );
        assert!(
            matches!(next_step(&answer("authorization_declined"), &mut interval, w, life), Step::Fail(m) if m.contains("declined"))
        );
        assert!(
            matches!(next_step(&answer("expired_token"), &mut interval, w, life), Step::Fail(m) if m.contains("expired"))
        );
        // Past the code's lifetime, pending is the end.
        assert!(matches!(
            next_step(&answer("authorization_pending"), &mut interval, life, life),
            Step::Fail(_)
        ));
        let mut bad = answer("invalid_grant\u{1b}[2J");
        bad.error_description = Some("AADSTS65001: consent".into());
        match next_step(&bad, &mut interval, w, life) {
            Step::Fail(m) => {
                assert!(m.contains("AADSTS65001") && !m.contains('\u{1b}'), "{m}");
            }
            s => panic!("{s:?}"),
        }
        let ok = TokenAnswer {
            access_token: Some("t".into()),
            ..TokenAnswer::default()
        };
        assert_eq!(next_step(&ok, &mut interval, w, life), Step::Done);
    }

    #[test]
    fn endpoints_are_https_and_tenants_plain() {
        let u = endpoint_base(
            "https://login.microsoftonline.com/",
            "contoso.onmicrosoft.com",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            u.join("token").map(|u| u.to_string()).unwrap_or_default(),
            "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
        );
        assert!(endpoint_base("http://login.example", "t").is_err());
        assert!(endpoint_base("https://login.example", "../x").is_err());
        assert!(endpoint_base("https://login.example", "").is_err());
    }
}
