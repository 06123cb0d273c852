//! The tenant's signing keys at the relay, against the stand-in issuer
//! (`relay_tests::entra_issuer`, JWKS over HTTPS on loopback): rotation costs
//! one fetch, a flood of made-up key IDs at most the refresh budget, and a key
//! endpoint that does not answer (held on a gate the test controls) delays
//! only tokens naming a key the relay does not hold, which share one fetch and
//! wait for it at most their bound. Counted by the issuer's JWKS requests.

use std::sync::Arc;
use std::time::Duration;

use relay_server::sign_in::entra::{Entra, Refusal};
use relay_tests::entra_issuer::Issuer;
use relay_tests::files::Scratch;

const T: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_costs_one_fetch() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-rotation");
    let entra = issuer.lab_verifier(&dir, 10);
    let claims = issuer.claims("oid-r", &["Uploader.lab-a"]);
    for _ in 0..5 {
        entra
            .authenticate(&issuer.sign(&claims))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(issuer.jwks_fetches(), 1, "cached after the first");
    issuer.rotate("key-2");
    for _ in 0..5 {
        entra
            .authenticate(&issuer.sign(&claims))
            .await
            .unwrap_or_else(|e| panic!("after rotation: {e}"));
    }
    assert_eq!(issuer.jwks_fetches(), 2, "one refetch for the new key");
    assert_eq!(entra.key_fetches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_key_ids_fetches_at_most_the_budget() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-flood");
    let entra = Arc::new(issuer.lab_verifier(&dir, 3));
    let claims = issuer.claims("oid-f", &["Uploader.lab-a"]);
    // Known key first (one fetch), then 200 made-up key IDs, 8 at a time.
    entra
        .authenticate(&issuer.sign(&claims))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (entra, tokens): (Arc<Entra>, Vec<String>) = (
            entra.clone(),
            (0..25)
                .map(|i| issuer.sign_as(&format!("bogus-{worker}-{i}"), &claims))
                .collect(),
        );
        tasks.push(tokio::spawn(async move {
            for t in tokens {
                assert_eq!(
                    entra.authenticate(&t).await.err(),
                    Some(Refusal::UnknownKey)
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(issuer.jwks_fetches(), 3, "the budget of 3, not 201");
    assert_eq!(entra.refused(Refusal::UnknownKey), 200);
    // The known key still verifies (the cache was kept).
    entra
        .authenticate(&issuer.sign(&claims))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(issuer.jwks_fetches(), 3);
}

/// Waits (polling) until `cond` holds; panics after a generous bound so a
/// regression fails rather than hangs.
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..6000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// A key endpoint that does not answer (held by the test)
/// delays only tokens naming a key the relay does not hold, and those share
/// one fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_key_endpoint_delays_only_unknown_keys_and_is_fetched_once() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-slow-keys");
    // Tokens may wait far longer than this test runs: only the gate decides.
    let entra = Arc::new(issuer.verifier_waiting(
        &dir.path("ca.pem"),
        60,
        (10, Duration::from_secs(3600)),
        Duration::from_secs(3600),
        &["Uploader.lab-a=lab-a".into()],
    ));
    let claims = issuer.claims("oid-s", &["Uploader.lab-a"]);
    let cached = issuer.sign(&claims);
    entra
        .authenticate(&cached)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(issuer.jwks_fetches(), 1);

    // The endpoint stops answering; the tenant rotates its key. 8 tokens under
    // the new key and 8 under made-up key IDs arrive together.
    issuer.hold_keys();
    issuer.rotate("key-2");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let kid = if i % 2 == 0 {
            "key-2".to_string()
        } else {
            format!("made-up-{i}")
        };
        let (entra, token) = (entra.clone(), issuer.sign_as(&kid, &claims));
        tasks.push((
            kid == "key-2",
            tokio::spawn(async move { entra.authenticate(&token).await }),
        ));
    }
    until("one fetch held", || issuer.held_key_requests() == 1).await;
    until("16 tokens waiting", || entra.key_waiting() == 16).await;

    // A token whose key is cached does not wait for the held fetch.
    let quick = tokio::time::timeout(T, entra.authenticate(&cached)).await;
    assert!(
        matches!(quick, Ok(Ok(_))),
        "a cached key waited for the fetch: {quick:?}"
    );
    assert!(tasks.iter().all(|(_, t)| !t.is_finished()));
    assert_eq!(issuer.jwks_fetches(), 2, "one fetch shared by 16 tokens");

    issuer.release_keys();
    for (rotated, t) in tasks {
        let r = t.await.unwrap_or_else(|e| panic!("{e}"));
        if rotated {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert_eq!(r.err(), Some(Refusal::UnknownKey));
        }
    }
    assert_eq!(
        issuer.jwks_fetches(),
        2,
        "the made-up IDs fetched nothing more"
    );
    assert_eq!(entra.key_waiting(), 0);
}

/// A key fetch that does not answer within the token's wait
/// refuses that token (`keys_unavailable`) while the fetch goes on; a later
/// token gets the keys it brings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_key_fetch_refuses_the_waiting_token_without_ending_the_fetch() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-stuck-keys");
    let entra = issuer.verifier_waiting(
        &dir.path("ca.pem"),
        60,
        (10, Duration::from_secs(3600)),
        Duration::from_millis(500),
        &["Uploader.lab-a=lab-a".into()],
    );
    let claims = issuer.claims("oid-k", &["Uploader.lab-a"]);
    let cached = issuer.sign(&claims);
    entra
        .authenticate(&cached)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    issuer.hold_keys();
    issuer.rotate("key-2");
    let rotated = issuer.sign(&claims);
    let entra = Arc::new(entra);
    let first = {
        let (entra, rotated) = (entra.clone(), rotated.clone());
        tokio::spawn(async move { entra.authenticate(&rotated).await })
    };
    // However long the fetch takes to reach the endpoint, it is then held, so
    // the token is refused without its answer.
    until("the fetch held", || issuer.held_key_requests() == 1).await;
    let first = first.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.err(), Some(Refusal::KeysUnavailable));
    // Refused while the fetch is still held: the token did not wait for the
    // HTTPS client's own timeout.
    assert_eq!(issuer.held_key_requests(), 1);
    assert!(entra.key_fetching());
    // A second such token waits on the same fetch, and is refused the same way:
    // still one fetch asked of the endpoint.
    assert_eq!(
        entra.authenticate(&rotated).await.err(),
        Some(Refusal::KeysUnavailable)
    );
    assert_eq!(issuer.jwks_fetches(), 2);
    assert_eq!(entra.refused(Refusal::KeysUnavailable), 2);
    entra
        .authenticate(&cached)
        .await
        .unwrap_or_else(|e| panic!("cached key during the stuck fetch: {e}"));
    issuer.release_keys();
    until("the fetch ends", || !entra.key_fetching()).await;
    entra
        .authenticate(&rotated)
        .await
        .unwrap_or_else(|e| panic!("after the fetch: {e}"));
    assert_eq!(issuer.jwks_fetches(), 2);
}

/// A probe (not a check: it prints, asserts no timing):
/// cached-key sign-in latency alone, then while 64 unknown-kid tokens wait on
/// a key fetch the endpoint does not answer.
/// `cargo test -p relay-tests --test it sign_in::signing_keys probe -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn probe_sign_in_latency_during_a_held_key_fetch() {
    let issuer = Issuer::start().await;
    let dir = Scratch::new("entra-probe");
    let entra = Arc::new(issuer.verifier_waiting(
        &dir.path("ca.pem"),
        60,
        (4, Duration::from_secs(60)),
        Duration::from_secs(3600),
        &["Uploader.lab-a=lab-a".into()],
    ));
    let claims = issuer.claims("oid-p", &["Uploader.lab-a"]);
    let cached = issuer.sign(&claims);
    let sample = |entra: Arc<Entra>, token: String| async move {
        let mut ms = Vec::new();
        for _ in 0..50 {
            let t0 = std::time::Instant::now();
            entra
                .authenticate(&token)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        (ms[ms.len() / 2], ms[ms.len() - 1])
    };
    entra
        .authenticate(&cached)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (alone_median, alone_max) = sample(entra.clone(), cached.clone()).await;
    issuer.hold_keys();
    let flood: Vec<_> = (0..64)
        .map(|i| {
            let (entra, token) = (
                entra.clone(),
                issuer.sign_as(&format!("made-up-{i}"), &claims),
            );
            tokio::spawn(async move { entra.authenticate(&token).await })
        })
        .collect();
    until("64 waiting", || entra.key_waiting() == 64).await;
    let (held_median, held_max) = sample(entra.clone(), cached.clone()).await;
    println!(
        "cached-key sign-in, 50 each: alone median {alone_median:.2} ms max {alone_max:.2} ms; \
         during a held key fetch with 64 unknown-kid tokens waiting: median {held_median:.2} ms \
         max {held_max:.2} ms; JWKS fetches {}",
        issuer.jwks_fetches()
    );
    issuer.release_keys();
    for t in flood {
        let _ = t.await;
    }
}
