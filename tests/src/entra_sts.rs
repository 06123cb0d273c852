//! The stand-in issuer's token endpoints (`entra_issuer` serves them beside
//! the discovery document and JWKS): what Entra ID's v2.0 endpoints answer to
//! the client's sign-in flows, for one principal the test chooses, with
//! tokens as short-lived as the test wants.
//!
//! - `POST /{tenant}/oauth2/v2.0/token`, `grant_type=client_credentials` with
//!   a `client_assertion` (workload identity: the federated token file's
//!   content must be the assertion), `...:device_code` (pending once, then
//!   signed in) and `refresh_token`;
//! - `POST /{tenant}/oauth2/v2.0/devicecode`.
//!
//! Every token asked for must be for the relay's scope (`AUDIENCE/.default`),
//! so a client that asks for the wrong audience fails here, as with Entra ID.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::entra_issuer::AUDIENCE;

/// Who the tokens name and how long they live.
#[derive(Debug, Clone)]
pub struct Principal {
    pub oid: String,
    pub roles: Vec<String>,
    pub lifetime_secs: i64,
    /// Workload identity: the application (client) ID and the federated
    /// token (the assertion) it must present.
    pub client_id: String,
    pub assertion: String,
}

impl Default for Principal {
    fn default() -> Self {
        Self {
            oid: "oid-client".into(),
            roles: Vec::new(),
            lifetime_secs: 3600,
            client_id: "11111111-2222-4333-8444-555555555555".into(),
            assertion: "federated-token-from-the-cluster".into(),
        }
    }
}

/// The endpoints' state.
#[derive(Default)]
pub struct Sts {
    pub principal: Mutex<Principal>,
    /// Access tokens issued, and the `exp` of the last one.
    issued: AtomicU64,
    last_exp: AtomicU64,
    /// Device codes polled once already (the second poll signs in).
    polled: Mutex<HashMap<String, u32>>,
    refresh_tokens: Mutex<Vec<String>>,
}

/// An HTTP answer: status line and JSON body.
pub type Answer = (&'static str, String);

fn error(code: &str, description: &str) -> Answer {
    (
        "400 Bad Request",
        serde_json::json!({"error": code, "error_description": description}).to_string(),
    )
}

impl Sts {
    pub fn set(&self, p: Principal) {
        *self.principal.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    pub fn principal(&self) -> Principal {
        self.principal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::SeqCst)
    }

    /// Unix seconds at which the last issued token expires (0: none yet).
    pub fn last_exp(&self) -> i64 {
        i64::try_from(self.last_exp.load(Ordering::SeqCst)).unwrap_or(i64::MAX)
    }

    /// The answer to `POST path` with a form `body`, if `path` is one of ours;
    /// `sign` turns claims into a signed token.
    pub fn answer(
        &self,
        path: &str,
        body: &str,
        issuer: &str,
        tenant: &str,
        sign: impl Fn(&serde_json::Value) -> String,
    ) -> Option<Answer> {
        let form: HashMap<String, String> = url::form_urlencoded::parse(body.as_bytes())
            .into_owned()
            .collect();
        let get = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
        let p = self.principal();
        if path == format!("/{tenant}/oauth2/v2.0/devicecode") {
            if let Err(e) = self.scope_ok(get("scope")) {
                return Some(e);
            }
            let code = format!("device-{}", self.issued() + 1);
            self.polled
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(code.clone(), 0);
            return Some((
                "200 OK",
                serde_json::json!({
                    "device_code": code,
                    "user_code": "TESTCODE",
                    "verification_uri": "https://microsoft.com/devicelogin",
                    "expires_in": 900,
                    "interval": 1,
                    "message": "To sign in, use a web browser to open the page https://microsoft.com/devicelogin and enter the code TESTCODE to authenticate.",
                })
                .to_string(),
            ));
        }
        if path != format!("/{tenant}/oauth2/v2.0/token") {
            return None;
        }
        let with_refresh = match get("grant_type") {
            "client_credentials" => {
                if get("client_id") != p.client_id || get("client_assertion") != p.assertion {
                    return Some(error("invalid_client", "AADSTS700016: bad assertion"));
                }
                if let Err(e) = self.scope_ok(get("scope")) {
                    return Some(e);
                }
                false
            }
            "urn:ietf:params:oauth:grant-type:device_code" => {
                let mut polled = self.polled.lock().unwrap_or_else(|e| e.into_inner());
                let Some(n) = polled.get_mut(get("device_code")) else {
                    return Some(error("expired_token", "unknown device code"));
                };
                *n += 1;
                if *n == 1 {
                    return Some(error("authorization_pending", "AADSTS70016: pending"));
                }
                true
            }
            "refresh_token" => {
                let known = self
                    .refresh_tokens
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .any(|t| t == get("refresh_token"));
                if !known {
                    return Some(error("invalid_grant", "AADSTS70008: refresh token expired"));
                }
                if let Err(e) = self.scope_ok(get("scope")) {
                    return Some(e);
                }
                true
            }
            _ => return Some(error("unsupported_grant_type", "AADSTS70003")),
        };
        Some(("200 OK", self.issue(&p, issuer, tenant, with_refresh, sign)))
    }

    fn scope_ok(&self, scope: &str) -> Result<(), Answer> {
        let want = format!("{AUDIENCE}/.default");
        if scope.split(' ').any(|s| s == want) {
            Ok(())
        } else {
            Err(error(
                "invalid_scope",
                &format!("AADSTS70011: scope {scope:?} is not {want}"),
            ))
        }
    }

    fn issue(
        &self,
        p: &Principal,
        issuer: &str,
        tenant: &str,
        with_refresh: bool,
        sign: impl Fn(&serde_json::Value) -> String,
    ) -> String {
        let now = crate::entra_issuer::now();
        let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let exp = now + p.lifetime_secs;
        self.last_exp
            .store(u64::try_from(exp).unwrap_or(0), Ordering::SeqCst);
        let claims = serde_json::json!({
            "iss": issuer,
            "aud": AUDIENCE,
            "tid": tenant,
            "oid": p.oid,
            "preferred_username": format!("{}@example.test", p.oid),
            "roles": p.roles,
            "ver": "2.0",
            "azp": crate::entra_issuer::CLIENT_APP,
            "iat": now,
            "nbf": now,
            "exp": exp,
            // Each token differs, so a test can tell them apart.
            "uti": format!("token-{n}"),
        });
        let mut answer = serde_json::json!({
            "token_type": "Bearer",
            "expires_in": p.lifetime_secs,
            "ext_expires_in": p.lifetime_secs,
            "access_token": sign(&claims),
        });
        if with_refresh {
            let rt = format!("refresh-{n}");
            self.refresh_tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(rt.clone());
            answer["refresh_token"] = rt.into();
        }
        answer.to_string()
    }
}
