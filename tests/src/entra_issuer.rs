//! A stand-in for Entra ID's token issuer, for the tests: the OpenID discovery
//! document and the JWKS served over HTTPS on loopback (certificate from a CA
//! made per run, which the relay is told to trust), RSA keys made per run, and
//! tokens signed with them (or forged, for the refusal tests). Counts JWKS
//! fetches, so the tests can check the relay's refresh rate limit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256, RsaPublicKeyComponents};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::entra_sts::Sts;

pub const TENANT: &str = "72f988bf-0000-4000-8000-00000000cafe";
pub const AUDIENCE: &str = "api://blob-relay-test";
/// The application the stand-in's tokens say asked for them (`azp`).
pub const CLIENT_APP: &str = "04b07795-8ddb-461a-bbee-02f9e1bf7b46";

struct Key {
    kid: String,
    pair: KeyPair,
}

pub struct Issuer {
    pub addr: SocketAddr,
    /// The per-run CA's certificate (PEM): what `--entra-ca-file` names.
    pub ca_pem: String,
    /// Published keys (the JWKS); the first signs by default.
    keys: Arc<Mutex<Vec<Arc<Key>>>>,
    jwks_fetches: Arc<AtomicU64>,
    /// While true, JWKS answers are held (a slow key endpoint, on the test's cue).
    hold: Arc<tokio::sync::watch::Sender<bool>>,
    /// JWKS requests being held now, their client still connected.
    held: Arc<AtomicU64>,
    /// The token endpoints the client's sign-in flows use (`entra_sts`).
    pub sts: Arc<Sts>,
    task: tokio::task::JoinHandle<()>,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn new_key(kid: &str) -> Arc<Key> {
    let pair = KeyPair::generate(KeySize::Rsa2048).unwrap_or_else(|e| panic!("rsa: {e}"));
    Arc::new(Key {
        kid: kid.to_string(),
        pair,
    })
}

impl Issuer {
    pub async fn start() -> Self {
        relay_transport::install_crypto_provider();
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap_or_else(|e| panic!("{e}"));
        let leaf_key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let leaf = CertificateParams::new(vec!["localhost".to_string()])
            .and_then(|p| p.signed_by(&leaf_key, &ca))
            .unwrap_or_else(|e| panic!("{e}"));
        let tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let keys = Arc::new(Mutex::new(vec![new_key("key-1")]));
        let jwks_fetches = Arc::new(AtomicU64::new(0));
        let base = format!("https://localhost:{}", addr.port());
        let sts = Arc::new(Sts::default());
        let hold = Arc::new(tokio::sync::watch::Sender::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let (k, f, t) = (keys.clone(), jwks_fetches.clone(), sts.clone());
        let (h, hd) = (hold.clone(), held.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, k, f, t, base) = (
                    acceptor.clone(),
                    k.clone(),
                    f.clone(),
                    t.clone(),
                    base.clone(),
                );
                let (gate, hd) = (h.subscribe(), hd.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let jwks = Jwks {
                            keys: &k,
                            fetches: &f,
                            gate,
                            held: &hd,
                        };
                        serve(tls, &base, jwks, &t).await;
                    }
                });
            }
        });
        Self {
            addr,
            ca_pem: ca.pem(),
            keys,
            jwks_fetches,
            hold,
            held,
            sts,
            task,
        }
    }

    /// Holds every JWKS answer from now until `release_keys` (a key endpoint
    /// that does not answer). Requests are counted as they arrive.
    pub fn hold_keys(&self) {
        self.hold.send_replace(true);
    }

    /// Answers the held JWKS requests, and later ones at once.
    pub fn release_keys(&self) {
        self.hold.send_replace(false);
    }

    /// JWKS requests held now whose client is still connected.
    pub fn held_key_requests(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// The relay's verifier for this stand-in: trusting its CA (written to
    /// `ca_file`), its v2 issuer, `AUDIENCE` and `TENANT`, with `skew_secs` on
    /// expiry, `refreshes` key fetches per `window`, and these `--entra-grant`s.
    pub fn verifier(
        &self,
        ca_file: &std::path::Path,
        skew_secs: i64,
        budget: (usize, std::time::Duration),
        grants: &[String],
    ) -> relay_server::sign_in::entra::Entra {
        let wait = relay_server::sign_in::entra::keys::DEFAULT_KEY_WAIT;
        self.verifier_waiting(ca_file, skew_secs, budget, wait, grants)
    }

    /// The verifier most tests use: its CA in `dir`, 60 s of skew, the grant
    /// `Uploader.lab-a=lab-a`, and `refreshes` key fetches in a window far
    /// longer than any test run, so a count of fetches is exact whatever the
    /// machine's speed.
    pub fn lab_verifier(
        &self,
        dir: &crate::files::Scratch,
        refreshes: usize,
    ) -> relay_server::sign_in::entra::Entra {
        self.verifier(
            &dir.path("ca.pem"),
            60,
            (refreshes, std::time::Duration::from_secs(3600)),
            &["Uploader.lab-a=lab-a".into()],
        )
    }

    /// `verifier`, with tokens waiting at most `key_wait` for a key fetch.
    pub fn verifier_waiting(
        &self,
        ca_file: &std::path::Path,
        skew_secs: i64,
        (refreshes, window): (usize, std::time::Duration),
        key_wait: std::time::Duration,
        grants: &[String],
    ) -> relay_server::sign_in::entra::Entra {
        use relay_server::sign_in::entra::{Entra, Grants, KeySource, Policy, RefreshBudget};
        std::fs::write(ca_file, &self.ca_pem).unwrap_or_else(|e| panic!("{e}"));
        let http = relay_server::operations::entra_config::client(Some(&ca_file.to_path_buf()))
            .unwrap_or_else(|e| panic!("{e}"));
        let policy = Policy {
            tenant: TENANT.into(),
            issuers: vec![self.issuer()],
            audiences: vec![AUDIENCE.into()],
            skew_secs,
        };
        let keys = KeySource::new(
            http,
            self.discovery_url(),
            RefreshBudget::new(refreshes, window),
        )
        .with_wait(key_wait);
        let grants = Grants::parse(grants).unwrap_or_else(|e| panic!("{e}"));
        Entra::new(policy, keys, grants)
    }

    /// What `--entra-authority` is for this stand-in.
    pub fn authority(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    pub fn discovery_url(&self) -> String {
        format!(
            "{}/{TENANT}/v2.0/.well-known/openid-configuration",
            self.authority()
        )
    }

    /// The v2 issuer the stand-in's tokens name.
    pub fn issuer(&self) -> String {
        format!("{}/{TENANT}/v2.0", self.authority())
    }

    pub fn jwks_fetches(&self) -> u64 {
        self.jwks_fetches.load(Ordering::SeqCst)
    }

    /// Publishes a new key and signs with it from now on (Entra's key rotation).
    pub fn rotate(&self, kid: &str) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.insert(0, new_key(kid));
    }

    /// Claims of a valid token for `oid` with `roles`, valid from now-60 s for an hour.
    pub fn claims(&self, oid: &str, roles: &[&str]) -> serde_json::Value {
        let now = now();
        serde_json::json!({
            "iss": self.issuer(),
            "aud": AUDIENCE,
            "tid": TENANT,
            "oid": oid,
            "name": format!("Test user {oid}"),
            "roles": roles,
            "ver": "2.0",
            "azp": CLIENT_APP,
            "iat": now - 60,
            "nbf": now - 60,
            "exp": now + 3600,
        })
    }

    /// Signs `claims` (RS256) with the current key, under `header_kid`.
    pub fn sign_as(&self, header_kid: &str, claims: &serde_json::Value) -> String {
        sign_with(&self.current(), header_kid, claims)
    }

    /// A validly signed token with these claims, under the current key's ID.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let kid = self.current().kid.clone();
        self.sign_as(&kid, claims)
    }

    /// `header` and `claims` as JSON text, exactly (a test can repeat a
    /// member), validly signed with the current key.
    pub fn sign_raw(&self, header: &str, claims: &str) -> String {
        sign_raw(&self.current(), header, claims)
    }

    /// The current key's ID.
    pub fn kid(&self) -> String {
        self.current().kid.clone()
    }

    /// The classic confusion attack: HS256 with the published public key as the
    /// HMAC secret.
    pub fn forge_hs256_with_public_key(&self, claims: &serde_json::Value) -> String {
        let key = self.current();
        let header = serde_json::json!({"alg": "HS256", "typ": "JWT", "kid": key.kid});
        let msg = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let secret =
            aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key.pair.public_key().as_ref());
        let tag = aws_lc_rs::hmac::sign(&secret, msg.as_bytes());
        format!("{msg}.{}", b64(tag.as_ref()))
    }

    /// `alg: none`, no signature.
    pub fn unsigned(&self, claims: &serde_json::Value) -> String {
        let header = serde_json::json!({"alg": "none", "typ": "JWT", "kid": self.current().kid});
        format!(
            "{}.{}.",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        )
    }

    fn current(&self) -> Arc<Key> {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys[0].clone()
    }
}

/// `claims` signed (RS256) with `key`, under `header_kid`.
fn sign_with(key: &Key, header_kid: &str, claims: &serde_json::Value) -> String {
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": header_kid});
    sign_raw(key, &header.to_string(), &claims.to_string())
}

/// The header and claims exactly as given (JSON text, which may repeat a
/// member), signed (RS256) with `key`.
fn sign_raw(key: &Key, header: &str, claims: &str) -> String {
    let msg = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
    let mut sig = vec![0u8; key.pair.public_modulus_len()];
    key.pair
        .sign(
            &RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            msg.as_bytes(),
            &mut sig,
        )
        .unwrap_or_else(|e| panic!("sign: {e}"));
    format!("{msg}.{}", b64(&sig))
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The JWKS endpoint's state, as one connection sees it.
struct Jwks<'a> {
    keys: &'a Mutex<Vec<Arc<Key>>>,
    fetches: &'a AtomicU64,
    gate: tokio::sync::watch::Receiver<bool>,
    held: &'a AtomicU64,
}

/// One request per connection: the discovery document, the JWKS, or a token
/// endpoint (`entra_sts`).
async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    base: &str,
    jwks: Jwks<'_>,
    sts: &Sts,
) {
    let Jwks {
        keys,
        fetches,
        mut gate,
        held,
    } = jwks;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if req.len() >= 16 << 10 {
            return;
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&req[..head_end]).to_string();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0)
        .min(64 << 10);
    while req.len() < head_end + length {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let body = String::from_utf8_lossy(&req[head_end..]).to_string();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let sign = |claims: &serde_json::Value| {
        let key = keys.lock().unwrap_or_else(|p| p.into_inner())[0].clone();
        sign_with(&key, &key.kid, claims)
    };
    let issuer = format!("{base}/{TENANT}/v2.0");
    let (status, body) = if let Some(answer) = sts.answer(&path, &body, &issuer, TENANT, sign) {
        answer
    } else if path == format!("/{TENANT}/v2.0/.well-known/openid-configuration") {
        let doc = serde_json::json!({
            "issuer": format!("{base}/{TENANT}/v2.0"),
            "jwks_uri": format!("{base}/{TENANT}/discovery/v2.0/keys"),
        });
        ("200 OK", doc.to_string())
    } else if path == format!("/{TENANT}/discovery/v2.0/keys") {
        fetches.fetch_add(1, Ordering::SeqCst);
        if *gate.borrow() {
            // Held until the test releases it, or until the client gives up.
            held.fetch_add(1, Ordering::SeqCst);
            let released = tokio::select! {
                r = gate.wait_for(|h| !*h) => r.is_ok(),
                _ = s.read(&mut buf) => false,
            };
            held.fetch_sub(1, Ordering::SeqCst);
            if !released {
                return;
            }
        }
        let keys = keys.lock().unwrap_or_else(|p| p.into_inner());
        let jwks: Vec<serde_json::Value> = keys
            .iter()
            .map(|k| {
                let c = RsaPublicKeyComponents::<Vec<u8>>::from(k.pair.public_key());
                serde_json::json!({"kty": "RSA", "use": "sig", "kid": k.kid, "n": b64(&c.n), "e": b64(&c.e)})
            })
            .collect();
        ("200 OK", serde_json::json!({ "keys": jwks }).to_string())
    } else {
        ("404 Not Found", String::new())
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes()).await;
    let _ = s.shutdown().await;
}
