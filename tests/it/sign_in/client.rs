//! The client signing in with Entra ID (`--entra`), against the stand-in
//! issuer (`relay_tests::entra_issuer`, token endpoints in `entra_sts`) over
//! HTTPS on loopback, the client trusting its per-run CA through
//! SSL_CERT_FILE, as it would a corporate proxy's. Tokens live seconds and
//! the relay allows no clock skew, so a token past its expiry is refused:
//! an upload that outlives its token only completes if the client fetched a
//! fresh one for every Offer that needed it.

use std::sync::Arc;
use std::time::Duration;

use relay_server::TestHooks;
use relay_server::sign_in::entra::Entra;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, writer};
use relay_tests::entra_issuer::{AUDIENCE, Issuer, TENANT, now};
use relay_tests::entra_sts::Principal;
use relay_tests::files::{Scratch, write_random};
use relay_tests::gate::Gate;
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{client_command, run_client, spawn_client, stderr, summary};
use relay_transport::quic::Windows;

const MIB: u64 = 1 << 20;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(180);
/// How long the stand-in's tokens live.
const LIFETIME_SECS: i64 = 6;

struct Lab {
    issuer: Issuer,
    dir: Scratch,
    relay: RelayHandle,
    entra: Arc<Entra>,
    gate: Arc<Gate>,
    container: String,
}

impl Lab {
    /// A relay that accepts the stand-in's tokens with no clock skew and
    /// grants `Uploader.lab` the test's container; small windows, so the
    /// client is never far ahead of what the relay read; its first transfer
    /// is held at `gate_at` bytes.
    async fn start(tag: &str, principal: Principal, gate_at: u64) -> Self {
        let issuer = Issuer::start().await;
        issuer.sts.set(principal);
        let dir = Scratch::new(tag);
        let container = new_container(tag).await;
        let entra = Arc::new(issuer.verifier(
            &dir.path("ca.pem"),
            0,
            (4, Duration::from_secs(60)),
            &[format!("Uploader.lab={container}")],
        ));
        let gate = Gate::new(gate_at);
        let e = entra.clone();
        let relay = RelayHandle::start(
            relay_tests::azurite::shared_azurite().storage(),
            RelayOptions {
                hooks: TestHooks {
                    pace: Some(gate.pace()),
                    ..TestHooks::default()
                },
                configure: Some(Box::new(move |cfg| {
                    cfg.sign_in.entra = Some(e);
                    cfg.listen.windows = Windows {
                        stream_window: MIB,
                        connection_window: 4 * MIB,
                        ..Windows::default()
                    };
                })),
                ..RelayOptions::default()
            },
        );
        Self {
            issuer,
            dir,
            relay,
            entra,
            gate,
            container,
        }
    }

    /// `upload FILES --to CONTAINER --json --entra FLOW` through the relay.
    fn upload(&self, files: &[&std::path::Path], flow: &str) -> Vec<String> {
        let mut u = Upload::file(files[0]);
        for f in &files[1..] {
            u = u.and(f);
        }
        u.to(&self.container)
            .json()
            .block_size("5MiB")
            .via_addr(&self.relay.addr.to_string(), &self.relay.fingerprint)
            .flag("--entra", flow)
            .flag("--entra-scope", AUDIENCE)
            .flag("--parallel", "1")
            .args()
    }

    /// What a client in a federated workload sees (the webhook's variables),
    /// with the stand-in as its authority and its CA trusted.
    fn env(&self) -> Vec<(String, String)> {
        let ca = self.dir.path("ca.pem");
        std::fs::write(&ca, &self.issuer.ca_pem).unwrap_or_else(|e| panic!("{e}"));
        let p = self.issuer.sts.principal();
        let federated = self.dir.path("federated-token");
        std::fs::write(&federated, &p.assertion).unwrap_or_else(|e| panic!("{e}"));
        [
            ("AZURE_AUTHORITY_HOST", self.issuer.authority()),
            ("AZURE_TENANT_ID", TENANT.to_string()),
            ("AZURE_CLIENT_ID", p.client_id),
            (
                "AZURE_FEDERATED_TOKEN_FILE",
                federated.display().to_string(),
            ),
            ("SSL_CERT_FILE", ca.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Sleeps until the last token the stand-in issued has expired by more
    /// than a second: from then on the relay (no skew) refuses it.
    async fn outlive_the_last_token(&self) {
        let exp = self.issuer.sts.last_exp();
        assert!(exp > 0, "no token issued yet");
        let wait = (exp + 2 - now()).max(0);
        tokio::time::sleep(Duration::from_secs(u64::try_from(wait).unwrap_or(0))).await;
        assert!(now() > exp + 1);
    }

    /// Every refusal reason's count at the relay.
    fn refusals(&self) -> u64 {
        let metrics = relay_server::operations::health::render(&self.relay.shared);
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix("blob_relay_entra_refusals_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<u64>().ok())
            .sum()
    }

    async fn stop(self) {
        self.gate.release();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.relay.stop()).await;
    }
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A `--json` run's setup error message.
fn message(out: &std::process::Output) -> String {
    summary(out)["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {}", stderr(out)))
        .to_string()
}

fn uploader(oid: &str) -> Principal {
    Principal {
        oid: oid.into(),
        roles: vec!["Uploader.lab".into()],
        lifetime_secs: LIFETIME_SECS,
        ..Principal::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_outlives_its_token_goes_on_with_fresh_ones() {
    let lab = Lab::start("entra-long", uploader("oid-long"), 3 * MIB).await;
    let big = lab.dir.path("big.bin");
    let small: Vec<_> = (0..3).map(|i| lab.dir.path(&format!("s{i}.bin"))).collect();
    let mut shas = vec![(
        "big.bin".to_string(),
        12 * MIB,
        write_random(&big, 12 * MIB, 1),
    )];
    for (i, s) in small.iter().enumerate() {
        shas.push((
            format!("s{i}.bin"),
            MIB,
            write_random(s, MIB, 10 + i as u64),
        ));
    }
    let mut files = vec![big.as_path()];
    files.extend(small.iter().map(|p| p.as_path()));
    let env = lab.env();
    let child = client_command(&lab.upload(&files, "workload-identity"), &pairs(&env))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run relay-client: {e}"));

    // The big file (first, one file at a time) is held mid-stream while the
    // token its Offer carried expires; the small files wait behind it.
    lab.gate.wait_holding(T).await;
    let before = lab.issuer.sts.issued();
    lab.outlive_the_last_token().await;
    for i in 0..3 {
        assert!(!blob_exists(&lab.container, &format!("s{i}.bin")).await);
    }
    lab.gate.release();
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("client hung"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", stderr(&out));

    // Every file went once, from its first byte to its last: none restarted.
    let s = summary(&out);
    let reported = s["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(reported.len(), 4, "{s}");
    for f in &reported {
        assert_eq!(f["status"], "committed", "{f}");
        assert_eq!(f["bytes_resumed"], 0, "{f}");
        assert_eq!(f["bytes_sent"], f["bytes"], "{f}");
    }
    // The small files' Offers came after the expiry: the relay took them
    // with a token fetched then (a stale one is refused with no skew), and
    // refused nothing.
    assert!(
        lab.issuer.sts.issued() > before,
        "no fresh token was fetched"
    );
    assert_eq!(lab.refusals(), 0, "the relay refused a token");
    assert!(lab.entra.key_fetches() >= 1);
    for (blob, size, sha) in &shas {
        assert_eq!(
            blob_sha(&lab.container, blob).await,
            (*size, sha.clone()),
            "{blob}"
        );
    }
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_file_goes_on_under_a_fresh_token_of_the_same_principal() {
    // Held at 6 MiB of 5 MiB blocks: block 0 is staged when the client dies.
    let lab = Lab::start("entra-resume", uploader("oid-resume"), 6 * MIB).await;
    let file = lab.dir.path("f.bin");
    let sha = write_random(&file, 16 * MIB, 7);
    let env = lab.env();
    let mut child = spawn_client(&lab.upload(&[&file], "workload-identity"), &pairs(&env));
    lab.gate.wait_holding(T).await;
    child.kill().await.unwrap_or_else(|e| panic!("kill: {e}"));
    let staged = async {
        loop {
            let blocks = writer(&lab.container, "f.bin")
                .uncommitted_blocks()
                .await
                .unwrap_or_default();
            if !blocks.is_empty() {
                return blocks.len();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let staged = tokio::time::timeout(T, staged)
        .await
        .unwrap_or_else(|_| panic!("block 0 never staged"));
    assert_eq!(staged, 1);
    lab.outlive_the_last_token().await;
    lab.gate.release();

    // The rerun signs the same principal in another way (a device code):
    // a new token, and the relay resumes what the old one started.
    let before = lab.issuer.sts.issued();
    let out = run_client(&lab.upload(&[&file], "device-code"), &pairs(&env), T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("enter the code TESTCODE"),
        "the device code prompt: {}",
        stderr(&out)
    );
    assert!(lab.issuer.sts.issued() > before);
    let s = summary(&out);
    let f = &s["files"][0];
    assert_eq!(f["status"], "committed", "{s}");
    assert_eq!(f["bytes_resumed"], 5 * MIB, "{f}");
    assert_eq!(f["bytes_sent"], 11 * MIB, "{f}");
    assert_eq!(blob_sha(&lab.container, "f.bin").await, (16 * MIB, sha));
    assert_eq!(lab.refusals(), 0);
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_without_the_grant_is_refused_clearly() {
    let reader = Principal {
        oid: "oid-reader".into(),
        roles: vec!["Reader".into()],
        ..Principal::default()
    };
    let lab = Lab::start("entra-nogrant", reader, u64::MAX).await;
    let file = lab.dir.path("a.bin");
    write_random(&file, MIB, 3);
    let env = lab.env();
    let out = run_client(&lab.upload(&[&file], "workload-identity"), &pairs(&env), T).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = message(&out);
    for part in [
        format!("refused container \"{}\"", lab.container),
        "oid-reader@example.test (object ID oid-reader; app roles: Reader)".to_string(),
        "--entra-grant".to_string(),
    ] {
        assert!(said.contains(&part), "{part:?} missing from: {said}");
    }
    assert!(!blob_exists(&lab.container, "a.bin").await);

    // A token for another audience never leaves the issuer: the sign-in
    // fails before any file, saying why.
    let mut args = lab.upload(&[&file], "workload-identity");
    let at = args
        .iter()
        .position(|a| a == AUDIENCE)
        .unwrap_or_else(|| panic!("no scope"));
    args[at] = "api://someone-else".into();
    let out = run_client(&args, &pairs(&env), T).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = message(&out);
    assert!(
        said.contains("cannot get an Entra ID token for the relay (--entra workload-identity)")
            && said.contains("AADSTS70011"),
        "{said}"
    );
    lab.stop().await;
}
