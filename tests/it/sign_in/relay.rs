//! Entra ID access tokens at the relay, without Azure: a stand-in issuer
//! (`relay_tests::entra_issuer`: discovery document and JWKS over HTTPS on
//! loopback, CA and RSA keys made per run) signs tokens; the relay's verifier
//! fetches its keys over real HTTPS. Every refusal is checked by name, reads
//! and writes are granted apart, and uploads go through the real client
//! binary, a real relay and Azurite. The keys' fetching is `signing_keys.rs`.

use std::sync::Arc;
use std::time::Duration;

use relay_proto::id_key::Owner;
use relay_server::sign_in::auth::Caller;
use relay_server::sign_in::auth::{Access, AuthError, TokenStore};
use relay_server::sign_in::entra::{Malformed, Principal, Refusal};
use relay_tests::blobs::blob_sha;
use relay_tests::entra_issuer::{Issuer, TENANT, now};
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr};

const T: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_is_refused_by_name() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-refusals");
    let entra = issuer.lab_verifier(&dir, 10);
    let good = issuer.claims("oid-1", &["Uploader.lab-a"]);
    let p = entra
        .authenticate(&issuer.sign(&good))
        .await
        .unwrap_or_else(|e| panic!("valid token refused: {e}"));
    assert_eq!((p.tenant.as_str(), p.object_id.as_str()), (TENANT, "oid-1"));
    assert_eq!(p.roles, vec!["Uploader.lab-a".to_string()]);

    let with = |key: &str, value: serde_json::Value| {
        let mut c = good.clone();
        c[key] = value;
        c
    };
    let cases: Vec<(&str, String, Refusal)> = vec![
        (
            "expired",
            issuer.sign(&with("exp", (now() - 3600).into())),
            Refusal::Expired,
        ),
        (
            "nbf in the future",
            issuer.sign(&with("nbf", (now() + 3600).into())),
            Refusal::NotYetValid,
        ),
        (
            "wrong audience",
            issuer.sign(&with("aud", "api://someone-else".into())),
            Refusal::Audience,
        ),
        (
            "wrong issuer",
            issuer.sign(&with(
                "iss",
                "https://login.microsoftonline.com/other/v2.0".into(),
            )),
            Refusal::Issuer,
        ),
        (
            "wrong tenant",
            issuer.sign(&with("tid", "00000000-0000-0000-0000-000000000000".into())),
            Refusal::Tenant,
        ),
        ("alg none", issuer.unsigned(&good), Refusal::Algorithm),
        (
            "HS256 with the public key",
            issuer.forge_hs256_with_public_key(&good),
            Refusal::Algorithm,
        ),
        (
            "unknown kid",
            issuer.sign_as("no-such-key", &good),
            Refusal::UnknownKey,
        ),
        (
            "garbage",
            "e!!.not-base64.x".into(),
            Refusal::Malformed(Malformed::HeaderEncoding),
        ),
        (
            "not JSON",
            "eyJub3Q.e30.e30".into(),
            Refusal::Malformed(Malformed::HeaderJson),
        ),
    ];
    for (what, token, want) in &cases {
        assert_eq!(entra.authenticate(token).await.err(), Some(*want), "{what}");
    }
    // A valid token whose claims were altered after signing.
    let signed = issuer.sign(&good);
    let mut parts: Vec<String> = signed.split('.').map(String::from).collect();
    parts[1] = base64_url(&with("oid", "someone-else".into()).to_string());
    assert_eq!(
        entra.authenticate(&parts.join(".")).await.err(),
        Some(Refusal::Signature)
    );
    // Each refusal counted under its own name.
    for (what, _, want) in &cases {
        assert!(entra.refused(*want) >= 1, "{what} not counted");
    }
    assert_eq!(entra.refused(Refusal::Algorithm), 2);
    assert_eq!(entra.refused(Refusal::Signature), 1);
    // One fetch for the first token, one for the unknown kid: nothing else
    // reached for the keys (alg and malformed are refused before the lookup).
    assert_eq!(issuer.jwks_fetches(), 2);
}

/// Hostile tokens, each refused for its real reason (by
/// name, in the refusal and in `blob_relay_entra_refusals_total`), through
/// the relay's front door (`auth::authenticate`), none looked up as a static
/// token and none costing a key fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tokens_are_refused_for_their_real_reason() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-hostile");
    let entra = issuer.lab_verifier(&dir, 10);
    let good = issuer.claims("oid-h", &["Uploader.lab-a"]);
    let (kid, claims) = (issuer.kid(), good.to_string());
    let signed = issuer.sign(&good);
    let parts: Vec<&str> = signed.split('.').collect();
    let header = |h: &str| issuer.sign_raw(h, &claims);
    let cases: Vec<(&str, String, Refusal)> = vec![
        (
            "crit header",
            header(&format!(
                r#"{{"alg":"RS256","kid":"{kid}","crit":["exp"],"exp":1}}"#
            )),
            Refusal::Malformed(Malformed::Crit),
        ),
        (
            "crit b64 (unencoded payload)",
            header(&format!(
                r#"{{"alg":"RS256","kid":"{kid}","crit":["b64"],"b64":false}}"#
            )),
            Refusal::Malformed(Malformed::Crit),
        ),
        (
            "signature not base64url",
            format!("{}.{}.{}!", parts[0], parts[1], parts[2]),
            Refusal::Malformed(Malformed::SignatureEncoding),
        ),
        (
            "no alg",
            header(&format!(r#"{{"typ":"JWT","kid":"{kid}"}}"#)),
            Refusal::Malformed(Malformed::NoAlg),
        ),
        (
            "alg array",
            header(&format!(r#"{{"alg":["RS256"],"kid":"{kid}"}}"#)),
            Refusal::Malformed(Malformed::AlgType),
        ),
        (
            "alg twice",
            header(&format!(r#"{{"alg":"RS256","kid":"{kid}","alg":"none"}}"#)),
            Refusal::Malformed(Malformed::DuplicateHeader),
        ),
        (
            "no kid",
            header(r#"{"alg":"RS256","typ":"JWT"}"#),
            Refusal::Malformed(Malformed::NoKid),
        ),
        (
            "kid a number",
            header(r#"{"alg":"RS256","kid":1}"#),
            Refusal::Malformed(Malformed::KidType),
        ),
        (
            "two parts",
            format!("{}.{}", parts[0], parts[1]),
            Refusal::Malformed(Malformed::Shape),
        ),
        (
            "four parts",
            format!("{signed}.{}", parts[2]),
            Refusal::Malformed(Malformed::Shape),
        ),
        (
            "claims not base64url",
            format!("{}.{}!.{}", parts[0], parts[1], parts[2]),
            Refusal::Malformed(Malformed::ClaimsEncoding),
        ),
        (
            "claims an array",
            issuer.sign_raw(&format!(r#"{{"alg":"RS256","kid":"{kid}"}}"#), "[1]"),
            Refusal::Malformed(Malformed::ClaimsJson),
        ),
        (
            "oid twice",
            issuer.sign_raw(
                &format!(r#"{{"alg":"RS256","kid":"{kid}"}}"#),
                &format!(r#"{},"oid":"someone-else"}}"#, claims.trim_end_matches('}')),
            ),
            Refusal::Malformed(Malformed::DuplicateClaim),
        ),
        (
            "exp a string",
            issuer.sign(&{
                let mut c = good.clone();
                c["exp"] = "tomorrow".into();
                c
            }),
            Refusal::Malformed(Malformed::ClaimType),
        ),
        (
            "longer than 16 KiB",
            format!("{signed}{}", "A".repeat(16 << 10)),
            Refusal::Malformed(Malformed::TooLong),
        ),
    ];
    let store = TokenStore::none();
    for (what, token, want) in &cases {
        let got = relay_server::sign_in::auth::authenticate(
            &store,
            Some(&entra),
            token,
            "lab-a",
            Access::Write,
        )
        .await
        .err();
        assert_eq!(got, Some(AuthError::Entra(*want)), "{what}");
    }
    let mut out = relay_server::telemetry::exposition::Exposition::default();
    entra.render(&mut out);
    let metrics = out.encode();
    for (what, _, want) in &cases {
        let n = cases.iter().filter(|(_, _, w)| w == want).count();
        let line = format!(
            "blob_relay_entra_refusals_total{{reason=\"{}\"}} {n}",
            want.label()
        );
        assert!(metrics.contains(&line), "{what}: no {line:?} in\n{metrics}");
    }
    assert!(!metrics.contains("reason=\"malformed\""), "{metrics}");
    // None of them reached for the keys.
    assert_eq!(issuer.jwks_fetches(), 0);
}

/// Through the stand-in's signed tokens: an ID token's
/// shape, a `ver` of the other format, a lifetime of years are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_access_tokens_for_the_relay_pass() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-semantics");
    let entra = issuer.lab_verifier(&dir, 10);
    let good = issuer.claims("oid-a", &["Uploader.lab-a"]);
    entra
        .authenticate(&issuer.sign(&good))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let with = |edits: &[(&str, serde_json::Value)]| {
        let mut c = good.clone();
        for (k, v) in edits {
            c[*k] = v.clone();
        }
        issuer.sign(&c)
    };
    let without = |key: &str| {
        let mut c = good.clone();
        c.as_object_mut().map(|o| o.remove(key));
        issuer.sign(&c)
    };
    let cases: Vec<(&str, String, Refusal)> = vec![
        (
            "ID token: nonce",
            with(&[("nonce", "abc".into())]),
            Refusal::NotAccessToken,
        ),
        (
            "ID token: no calling application",
            without("azp"),
            Refusal::NotAccessToken,
        ),
        (
            "ID token: audience is the client that asked",
            with(&[("azp", relay_tests::entra_issuer::AUDIENCE.into())]),
            Refusal::NotAccessToken,
        ),
        (
            "v2 issuer, ver 1.0",
            with(&[("ver", "1.0".into())]),
            Refusal::Version,
        ),
        ("no ver", without("ver"), Refusal::Version),
        (
            "exp five years ahead",
            with(&[("exp", (now() + 5 * 365 * 86_400).into())]),
            Refusal::Lifetime,
        ),
        (
            "25 hours after iat",
            with(&[("iat", now().into()), ("exp", (now() + 25 * 3600).into())]),
            Refusal::Lifetime,
        ),
    ];
    for (what, token, want) in &cases {
        assert_eq!(entra.authenticate(token).await.err(), Some(*want), "{what}");
    }
}

/// Read grants for Entra ID principals: a principal reads only what a grant says it
/// reads; writing does not imply reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entra_principals_read_only_what_a_grant_says() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-read");
    let entra = issuer.verifier(
        &dir.path("ca.pem"),
        60,
        (10, Duration::from_secs(3600)),
        &[
            "role:Lab=data:rw,results:r,inbox".into(),
            "group:0000aaaa-group=shared:r".into(),
        ],
    );
    let store = TokenStore::none();
    let auth = |token: String, container: &'static str, access: Access| {
        let (store, entra) = (&store, &entra);
        async move {
            relay_server::sign_in::auth::authenticate(store, Some(entra), &token, container, access)
                .await
        }
    };
    let lab = issuer.sign(&issuer.claims("oid-lab", &["Lab"]));
    assert!(auth(lab.clone(), "data", Access::Read).await.is_ok());
    assert!(auth(lab.clone(), "data", Access::Write).await.is_ok());
    assert!(auth(lab.clone(), "results", Access::Read).await.is_ok());
    assert_eq!(
        auth(lab.clone(), "results", Access::Write).await.err(),
        Some(AuthError::Container("results".into()))
    );
    assert!(auth(lab.clone(), "inbox", Access::Write).await.is_ok());
    assert_eq!(
        auth(lab.clone(), "inbox", Access::Read).await.err(),
        Some(AuthError::NoRead("inbox".into()))
    );
    assert_eq!(
        auth(lab, "shared", Access::Read).await.err(),
        Some(AuthError::NoRead("shared".into()))
    );
    let mut member = issuer.claims("oid-member", &[]);
    member["groups"] = serde_json::json!(["0000aaaa-group"]);
    let member = issuer.sign(&member);
    assert!(auth(member.clone(), "shared", Access::Read).await.is_ok());
    assert_eq!(
        auth(member, "shared", Access::Write).await.err(),
        Some(AuthError::Container("shared".into()))
    );
    // A role named like the group's object ID takes nothing of its grant.
    let impostor = issuer.sign(&issuer.claims("oid-x", &["0000aaaa-group"]));
    assert_eq!(
        auth(impostor, "shared", Access::Read).await.err(),
        Some(AuthError::NoRead("shared".into()))
    );
}

/// Delete grants for Entra ID principals: `:d` in a grant, or a
/// `Deleter.<container>` role only with `--entra-deleter-roles`; writing and
/// reading (and `Reader.` roles) never imply deleting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entra_principals_delete_only_what_a_grant_says() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-delete");
    let mut entra = issuer.verifier(
        &dir.path("ca.pem"),
        60,
        (10, Duration::from_secs(3600)),
        &["role:Lab=data:rw,old:rwd".into()],
    );
    let store = TokenStore::none();
    let lab = issuer.sign(&issuer.claims("oid-lab", &["Lab"]));
    let deleter = issuer.sign(&issuer.claims("oid-del", &["Deleter.results", "Reader.data"]));
    let cases = [
        (&lab, "data", None, Some(AuthError::NoDelete("data".into()))),
        (&lab, "old", None, None),
        (
            &deleter,
            "results",
            None,
            Some(AuthError::NoDelete("results".into())),
        ),
        (&deleter, "results", Some(true), None),
        (
            &deleter,
            "data",
            Some(true),
            Some(AuthError::NoDelete("data".into())),
        ),
    ];
    for (token, container, roles, want) in cases {
        if let Some(on) = roles {
            entra.grants = entra
                .grants
                .clone()
                .with_deleter_roles(on)
                .with_reader_roles(on);
        }
        let got = relay_server::sign_in::auth::authenticate(
            &store,
            Some(&entra),
            token,
            container,
            Access::Delete,
        )
        .await
        .err();
        assert_eq!(got, want, "{container} with roles {roles:?}");
    }
    // A deleter role grants nothing else.
    let write = relay_server::sign_in::auth::authenticate(
        &store,
        Some(&entra),
        &deleter,
        "results",
        Access::Write,
    )
    .await;
    assert_eq!(write.err(), Some(AuthError::Container("results".into())));
}

/// What the client reported (JSON on stdout, text on stderr).
fn said(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(out))
}

fn base64_url(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s.as_bytes())
}

#[test]
fn a_refreshed_token_keeps_the_same_owner() {
    let p = |oid: &str| Principal {
        tenant: TENANT.into(),
        object_id: oid.into(),
        name: "n".into(),
        roles: vec![],
        groups: vec![],
    };
    // Two different token strings for one principal: one owner.
    let a = Caller::Entra(p("oid-1")).owner("eyJ-first-token");
    let b = Caller::Entra(p("oid-1")).owner("eyJ-refreshed-token");
    assert_eq!(a, b);
    assert_ne!(a, Caller::Entra(p("oid-2")).owner("eyJ-first-token"));
    assert_eq!(a, Owner::of_principal(TENANT, "oid-1"));
    // Static tokens keep their own owner (the token's hash).
    assert_eq!(Caller::Static.owner(TOKEN), Owner::of_token(TOKEN));
    assert_ne!(Caller::Static.owner("oid-1"), a);
}

/// A relay trusting the stand-in issuer, beside its static tokens.
fn relay_with_entra(issuer: &Issuer, dir: &Scratch, grant: String) -> RelayHandle {
    let entra = Arc::new(issuer.verifier(
        &dir.path("ca.pem"),
        60,
        (4, Duration::from_secs(60)),
        &[grant],
    ));
    RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            configure: Some(Box::new(move |cfg| cfg.sign_in.entra = Some(entra))),
            ..Default::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_client_uploads_with_an_entra_token_to_granted_containers_only() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-e2e");
    let granted = relay_tests::blobs::new_container("entra-ok").await;
    let other = relay_tests::blobs::new_container("entra-no").await;
    let relay = relay_with_entra(&issuer, &dir, format!("Uploader.lab={granted}"));
    let file = dir.path("a.bin");
    let sha = write_random(&file, 3 << 20, 35);
    let token = issuer.sign(&issuer.claims("oid-e2e", &["Uploader.lab"]));
    let up = |to: &str, token: &str| {
        let (container, name) = to.split_once('/').unwrap_or((to, "a.bin"));
        let f = dir.path(name);
        if !f.exists() {
            std::fs::copy(&file, &f).unwrap_or_else(|e| panic!("{e}"));
        }
        Upload::file(&f)
            .json()
            .via_addr(&relay.addr.to_string(), &relay.fingerprint)
            .to(container)
            .token(token)
            .args()
    };

    // Granted: committed, and the blob hashes to the file's SHA-256.
    let out = run_client(&up(&format!("{granted}/a.bin"), &token), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(blob_sha(&granted, "a.bin").await.1, sha);

    // Not granted: refused, nothing written.
    let out = run_client(&up(&format!("{other}/a.bin"), &token), &[], T).await;
    assert!(!out.status.success());
    assert!(
        said(&out).contains("may not write container"),
        "{}",
        stderr(&out)
    );

    // An expired token: refused as unauthorized, counted as expired.
    let mut old = issuer.claims("oid-e2e", &["Uploader.lab"]);
    old["exp"] = (now() - 600).into();
    let out = run_client(&up(&format!("{granted}/b.bin"), &issuer.sign(&old)), &[], T).await;
    assert!(!out.status.success());
    assert!(said(&out).contains("token expired"), "{}", stderr(&out));
    let metrics = relay_server::operations::health::render(&relay.shared);
    // Counted under its own name (at least once: the client may have tried again).
    let expired = metrics
        .lines()
        .find_map(|l| l.strip_prefix("blob_relay_entra_refusals_total{reason=\"expired\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(matches!(expired, Some(n) if n >= 1), "{metrics}");

    // Static tokens keep working beside Entra ID.
    let out = run_client(&up(&format!("{granted}/c.bin"), TOKEN), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(blob_sha(&granted, "c.bin").await.1, sha);
    relay.stop().await;
}
