//! Fault tests: Azure misbehaving (through the fault proxy), relays killed or told
//! to stop mid-transfer, and two uploads racing for one blob name. Real Azurite,
//! real QUIC, the real client binary (and, where a relay dies, the real relay
//! binary). Every outcome is checked by downloading and hashing the blob, or by
//! its absence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_server::TestHooks;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, writer};
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule, chaos, quick_writer};
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::upload::Upload;
use relay_tests::{DEV_KEY, binary, run_client, stderr, summary};

const MIB: u64 = 1 << 20;
/// A bound against hangs only; every upload here takes seconds.
const T: Duration = Duration::from_secs(120);

fn azurite_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], shared_azurite().port))
}

/// Longer than any patience here: a stalled request is never answered.
const STALL: Duration = Duration::from_secs(600);

fn upload_args(file: &Path, to: &str, relay: &[String]) -> Vec<String> {
    Upload::file(file)
        .to(to)
        .json()
        .block_size("5MiB")
        .extend(relay)
        .args()
}

/// Client flags that reach an in-process relay.
fn in_process(relay: &RelayHandle) -> Vec<String> {
    Upload::default().via(relay).flags()
}

/// The relay's `blob_relay_azure_retries_total{status="..."}` samples, from the
/// same text its /metrics endpoint serves.
fn retries_by_status(relay: &RelayHandle) -> Vec<(String, u64)> {
    let text = relay_server::operations::health::render(&relay.shared);
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("blob_relay_azure_retries_total{status=\"")?;
            let (label, n) = rest.split_once("\"} ")?;
            Some((label.to_string(), n.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_faults_are_retried_and_counted() {
    let container = new_container("azfaults").await;
    // Scripted faults make sure each kind happens at least once (including a Put
    // Block List whose response is lost after Azure committed), then seeded random
    // faults on 15 % of the requests the relay retries.
    let mut schedule = chaos(0x5eed, 0.15, STALL);
    schedule.script = vec![
        (Op::GetBlockList, Fault::InternalError),
        (Op::PutBlock, Fault::ServerBusy),
        (Op::PutBlock, Fault::OperationTimeout),
        (Op::PutBlock, Fault::Reset),
        (Op::PutBlock, Fault::Stall(STALL)),
        (Op::PutBlock, Fault::LostResponse),
        (Op::PutBlockList, Fault::ServerBusy),
        (Op::PutBlockList, Fault::LostResponse),
    ];
    let proxy = FaultProxy::start(azurite_addr(), schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), quick_writer(20));
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let dir = Scratch::new("azfaults");
    let file = dir.path("f.bin");
    let size = 30 * MIB + 123;
    let sha = write_random(&file, size, 21);

    let out = run_client(&upload_args(&file, &container, &in_process(&relay)), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let f = &s["files"][0];
    assert_eq!(f["status"], "committed", "{s}");
    assert_eq!(f["sha256"], sha.as_str());
    let retries = f["retries"].as_u64().unwrap_or(0);
    // At least the scripted Put Block and Put Block List faults were retried (the
    // Get Block List one happens before the writer that counts them).
    assert!(retries >= 7, "retries in the JSON: {retries}\n{s}");
    assert_eq!(f["attempts"], 1, "the relay absorbed every fault: {s}");
    assert!(proxy.faults() >= 8, "faults injected: {}", proxy.faults());
    // The relay's metrics name each retry's cause: the scripted 500 (Get Block
    // List), three 503s (ServerBusy, OperationTimeout, ServerBusy on Put Block
    // List), and four without a response (reset, stall past the read timeout, two
    // lost responses: `transport`, or `timeout` when the request's deadline ended
    // it first); seeded random faults only add to these.
    let by_status = retries_by_status(&relay);
    let count = |label: &str| {
        by_status
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, n)| *n)
            .unwrap_or_else(|| panic!("no status=\"{label}\" series: {by_status:?}"))
    };
    assert_eq!(
        by_status.len(),
        relay_storage::retry::RETRY_LABELS.len(),
        "{by_status:?}"
    );
    assert!(count("500") >= 1, "{by_status:?}");
    assert!(count("503") >= 3, "{by_status:?}");
    assert!(count("transport") + count("timeout") >= 4, "{by_status:?}");
    assert_eq!(
        count("other"),
        0,
        "only retryable statuses are retried: {by_status:?}"
    );
    // One transfer, one writer: the relay-wide counts are this file's retries.
    let total: u64 = by_status.iter().map(|(_, n)| n).sum();
    assert_eq!(total, retries, "{by_status:?}\n{s}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_refusals_are_not_retried() {
    let container = new_container("azrefused").await;
    // Every Put Block is refused as if the relay's credentials lacked permission.
    let schedule = Schedule {
        chances: vec![(
            Op::PutBlock,
            1.0,
            Fault::Status(403, "AuthorizationPermissionMismatch"),
        )],
        ..Schedule::seeded(2)
    };
    let proxy = FaultProxy::start(azurite_addr(), schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), quick_writer(20));
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let dir = Scratch::new("azrefused");
    let file = dir.path("f.bin");
    write_random(&file, 12 * MIB, 22);

    let out = run_client(&upload_args(&file, &container, &in_process(&relay)), &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("f.bin")
            && err.contains("403")
            && err.contains("AuthorizationPermissionMismatch"),
        "{err}"
    );
    let f = &summary(&out)["files"][0];
    assert_eq!(f["error"]["code"], "storage_refused", "{f}");
    assert_eq!(f["attempts"], 1, "a 4xx is not retried by the client: {f}");
    // Nor by the relay: each of the file's 3 blocks was refused at most once (a
    // retry would be a second refusal of the same block), and the relay counted
    // no retry at all.
    assert!(
        proxy.faults() <= 3,
        "Put Blocks refused: {}",
        proxy.faults()
    );
    assert_eq!(
        proxy.stats.requests_of(Op::PutBlock),
        proxy.faults(),
        "every Put Block was refused"
    );
    let retried: u64 = retries_by_status(&relay).iter().map(|(_, n)| n).sum();
    assert_eq!(retried, 0, "{:?}", retries_by_status(&relay));
    assert!(!blob_exists(&container, "f.bin").await);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_to_one_name_commit_exactly_one() {
    let container = new_container("race").await;
    // A slow relay (about 20 MiB/s per transfer) so the two uploads overlap.
    let hooks = TestHooks {
        pace: Some(Arc::new(|_, len| {
            Duration::from_micros(len as u64 * 50_000 / MIB)
        })),
        ..Default::default()
    };
    let relay = RelayHandle::start(
        shared_azurite().storage(),
        RelayOptions {
            hooks,
            ..Default::default()
        },
    );
    let dir = Scratch::new("race");
    // Same size: same transfer tag, so each sees the other's blocks as resumable
    // candidates; different bytes, so neither may use them.
    let size = 20 * MIB + 11;
    let (a, b) = (dir.path("a/same.bin"), dir.path("b/same.bin"));
    let sha_a = write_random(&a, size, 31);
    let sha_b = write_random(&b, size, 32);
    let with_token = in_process(&relay);
    let (args_a, args_b) = (
        upload_args(&a, &container, &with_token),
        upload_args(&b, &container, &with_token),
    );
    let (oa, ob) = tokio::join!(run_client(&args_a, &[], T), run_client(&args_b, &[], T));
    let (sa, sb) = (summary(&oa), summary(&ob));
    let (fa, fb) = (&sa["files"][0], &sb["files"][0]);
    let winners = [fa, fb]
        .iter()
        .filter(|f| f["status"] == "committed")
        .count();
    assert_eq!(winners, 1, "exactly one commits:\n{sa}\n{sb}");
    let (winner_sha, loser, loser_out) = if fa["status"] == "committed" {
        (&sha_a, fb, &ob)
    } else {
        (&sha_b, fa, &oa)
    };
    assert_eq!(loser_out.status.code(), Some(1));
    // The loser either lost the commit race or found the blob at its Offer.
    let code = loser["error"]["code"].as_str().unwrap_or_default();
    assert!(code == "conflict" || code == "exists", "{loser}");
    assert_eq!(loser["attempts"], 1, "{loser}");
    assert_eq!(
        blob_sha(&container, "same.bin").await,
        (size, winner_sha.clone())
    );
    relay.stop().await;
}

/// A relay-server process on a fixed port with a fixed certificate, so a new process
/// on the same address is the same relay to a client.
struct RelayProcess {
    child: tokio::process::Child,
    log: PathBuf,
}

struct RelaySite {
    port: u16,
    fingerprint: String,
    cert: PathBuf,
    key: PathBuf,
    tokens: PathBuf,
    dir: Scratch,
}

impl RelaySite {
    fn new(tag: &str) -> Self {
        let dir = Scratch::new(tag);
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .unwrap_or_else(|e| panic!("rcgen: {e}"));
        let (cert, key, tokens) = (
            dir.path("cert.pem"),
            dir.path("key.pem"),
            dir.path("tokens"),
        );
        std::fs::write(&cert, ck.cert.pem()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap_or_else(|e| panic!("{e}"));
        let fingerprint = relay_transport::tls::format_fingerprint(
            &relay_transport::tls::fingerprint(ck.cert.der()),
        );
        // Both relays of a site listen here; never an ephemeral port, which a
        // concurrent test's client could take while no relay is running.
        let port = relay_tests::reserved_port();
        Self {
            port,
            fingerprint,
            cert,
            key,
            tokens,
            dir,
        }
    }

    fn client_args(&self) -> Vec<String> {
        vec![
            "--relay".into(),
            format!("127.0.0.1:{}", self.port),
            "--relay-cert-sha256".into(),
            self.fingerprint.clone(),
            "--token".into(),
            TOKEN.into(),
        ]
    }

    /// Starts a relay process (the `n`th on this site) and waits until it listens.
    async fn start(&self, n: u32, storage_url: &str, grace_s: u32) -> RelayProcess {
        let log = self.dir.path(&format!("relay{n}.log"));
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = tokio::process::Command::new(binary("relay-server"));
        cmd.args([
            "--listen",
            &format!("127.0.0.1:{}", self.port),
            "--storage-url",
            storage_url,
            "--account-key",
            DEV_KEY,
            "--tokens",
            &self.tokens.display().to_string(),
            "--id-key-file",
            &self.tokens.with_file_name("id.key").display().to_string(),
            "--tls-cert",
            &self.cert.display().to_string(),
            "--tls-key",
            &self.key.display().to_string(),
            // A small budget and windows: the client stays close behind what is
            // staged, so a dead relay leaves a real remainder to resume.
            "--memory-budget",
            "12MiB",
            "--stream-window",
            "4MiB",
            "--connection-window",
            "16MiB",
            "--shutdown-grace",
            &grace_s.to_string(),
        ])
        .env("RELAY_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("relay-server: {e}"));
        let p = RelayProcess { child, log };
        // A bound against hangs only.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !p.log_text().contains("relay listening") {
            assert!(
                Instant::now() < deadline,
                "relay did not start:\n{}",
                p.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        p
    }
}

impl RelayProcess {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self
            .child
            .id()
            .unwrap_or_else(|| panic!("relay already reaped"));
        // Only ever our own child, by its PID.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig})");
    }

    async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => panic!("wait: {e}"),
            Err(_) => panic!("relay did not exit within {limit:?}:\n{}", self.log_text()),
        }
    }
}

/// Starts the client in the background and waits until `blocks` blocks of `blob`
/// are staged.
async fn upload_until_staged(
    args: Vec<String>,
    container: &str,
    blob: &str,
    blocks: usize,
) -> tokio::task::JoinHandle<std::process::Output> {
    let client = tokio::spawn(async move { run_client(&args, &[], T).await });
    let w = writer(container, blob);
    // A bound against hangs only.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = w
            .uncommitted_blocks()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .len();
        if n >= blocks {
            return client;
        }
        assert!(
            !client.is_finished(),
            "the client finished before {blocks} blocks were staged"
        );
        assert!(Instant::now() < deadline, "only {n} blocks staged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Slow storage: every Put Block waits, so a 60 MiB upload takes seconds.
async fn slow_storage() -> FaultProxy {
    let schedule = Schedule {
        delays: vec![(Op::PutBlock, Duration::from_millis(400))],
        ..Schedule::seeded(3)
    };
    FaultProxy::start(azurite_addr(), schedule).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_transfer_client_resumes_through_a_new_relay() {
    let container = new_container("relaykill").await;
    let proxy = slow_storage().await;
    let site = RelaySite::new("relaykill");
    let file = site.dir.path("f.bin");
    let size = 60 * MIB + 7;
    let sha = write_random(&file, size, 41);
    let mut first = site.start(1, &proxy.url(), 30).await;
    let args = upload_args(&file, &container, &site.client_args());
    let client = upload_until_staged(args, &container, "f.bin", 3).await;

    // A crash: no drain, no goodbye to the client.
    first.signal(libc::SIGKILL);
    first.wait(Duration::from_secs(30)).await;
    let staged = writer(&container, "f.bin")
        .uncommitted_blocks()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .len();
    let second = site.start(2, &proxy.url(), 30).await;

    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{}\n{}",
        stderr(&out),
        second.log_text()
    );
    let f = &summary(&out)["files"][0];
    assert_eq!(f["status"], "committed");
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(
        resumed >= 3 * 5 * MIB,
        "resumed {resumed} with {staged} blocks staged: {f}"
    );
    assert_eq!(f["bytes_sent"], size - resumed, "{f}");
    // A second stream: an attempt, or (if the new relay was not up yet when
    // the client first tried, so it waited for the network) a reconnect.
    let streams = f["attempts"].as_u64().unwrap_or(0) + f["reconnects"].as_u64().unwrap_or(0);
    assert!(streams >= 2, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
    assert!(second.log_text().contains("committed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_blocks_and_client_resumes_on_a_new_relay() {
    let container = new_container("sigterm").await;
    let proxy = slow_storage().await;
    let site = RelaySite::new("sigterm");
    let file = site.dir.path("f.bin");
    let size = 60 * MIB + 9;
    let sha = write_random(&file, size, 51);
    // Generous: the relay exits as soon as its in-flight blocks landed (each waits
    // 400 ms at the proxy), so the grace only matters if it were stuck.
    let grace_s = 30;
    let mut first = site.start(1, &proxy.url(), grace_s).await;
    let args = upload_args(&file, &container, &site.client_args());
    let client = upload_until_staged(args, &container, "f.bin", 2).await;

    first.signal(libc::SIGTERM);
    // A bound against hangs only (what it measures is the grace, asserted below).
    let status = first
        .wait(Duration::from_secs(u64::from(grace_s) + 60))
        .await;
    let log = first.log_text();
    assert!(status.success(), "exit status {status}:\n{log}");
    assert!(log.contains("shutting down: no new transfers"), "{log}");
    assert!(
        !log.contains("grace period over"),
        "the in-flight blocks did not land within the grace:\n{log}"
    );
    assert!(
        !blob_exists(&container, "f.bin").await,
        "nothing committed by the stopped relay"
    );
    let staged = writer(&container, "f.bin")
        .uncommitted_blocks()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .len();
    assert!(staged >= 2);
    // In-flight blocks were let finish: every Put Block the relay started reached
    // Azure (none was cut off by the shutdown), and each is staged.
    let put_blocks = proxy.stats.requests_of(Op::PutBlock);
    assert_eq!(
        proxy.stats.forwarded_of(Op::PutBlock),
        put_blocks,
        "a Put Block was abandoned by the shutdown"
    );
    assert_eq!(
        staged as u64, put_blocks,
        "every forwarded Put Block is staged"
    );

    let second = site.start(2, &proxy.url(), 30).await;
    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{}\n{}",
        stderr(&out),
        second.log_text()
    );
    let f = &summary(&out)["files"][0];
    assert_eq!(f["status"], "committed");
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(
        resumed >= 2 * 5 * MIB,
        "resumed {resumed} with {staged} staged: {f}"
    );
    assert_eq!(blob_sha(&container, "f.bin").await, (size, sha));
}
