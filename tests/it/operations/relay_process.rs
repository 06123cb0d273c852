//! The relay as operators run it: a separate process configured by flags, env or a
//! TOML file, `--check-config`, `/healthz` and `/metrics`, and SIGTERM.

use std::process::Command;
use std::time::{Duration, Instant};

use relay_tests::azurite::shared_azurite;
use relay_tests::files::{Scratch, write_random};
use relay_tests::http::{get as http_get, sample};
use relay_tests::{DEV_KEY, Reaped, binary, run_client, stderr, unique_container};

/// `(le, cumulative count)` of every bucket of histogram `name`, in order.
fn buckets(metrics: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    metrics
        .lines()
        .filter_map(|l| {
            let (le, rest) = l.strip_prefix(&prefix)?.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.parse().ok()?))
        })
        .collect()
}

/// The histogram is well formed: bounds increase, counts are cumulative, the last
/// bucket is +Inf and equals `_count`. Returns `_count`.
fn checked_histogram(metrics: &str, name: &str) -> f64 {
    assert_eq!(
        metrics
            .matches(&format!("# TYPE {name} histogram\n"))
            .count(),
        1,
        "{metrics}"
    );
    let b = buckets(metrics, name);
    assert!(b.len() >= 2, "{metrics}");
    assert!(
        b.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{b:?}"
    );
    let count = sample(metrics, &format!("{name}_count")).unwrap_or(-1.0);
    assert_eq!(b.last(), Some(&(f64::INFINITY, count)), "{metrics}");
    let sum = sample(metrics, &format!("{name}_sum")).unwrap_or(-1.0);
    assert!(sum.is_finite() && sum >= 0.0, "{metrics}");
    count
}

/// Every status label of the retries counter is there, even at 0.
fn checked_retries(metrics: &str) {
    for label in relay_storage::retry::RETRY_LABELS {
        let series = format!("blob_relay_azure_retries_total{{status=\"{label}\"}}");
        assert!(sample(metrics, &series).is_some(), "{series}: {metrics}");
    }
    assert!(
        sample(metrics, "blob_relay_azure_retries_total").is_none(),
        "no unlabeled series: {metrics}"
    );
}

/// Listening ports the relay process is told to use (see `reserved_port`).
fn free_port() -> u16 {
    relay_tests::reserved_port()
}

/// `relay-server ARGS --check-config` with an empty environment but `envs`.
fn check_config(args: &[&str], envs: &[(&str, &std::path::Path)]) -> std::process::Output {
    Command::new(binary("relay-server"))
        .args(args)
        .arg("--check-config")
        .env_clear()
        .envs(envs.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn check_config_accepts_a_toml_file_and_refuses_bad_ones() {
    let az = shared_azurite();
    let dir = Scratch::new("checkcfg");
    std::fs::write(dir.path("tokens"), "abcdefghijklmnop0001 data\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let cfg = format!(
        "listen = \"127.0.0.1:4433\"\nstorage_url = \"{}\"\naccount_key = \"{DEV_KEY}\"\ntokens = \"{}\"\nmemory_budget = \"2GiB\"\nid_key_ephemeral = true\nstate_dir = \"{}\"\n",
        az.url(),
        dir.path("tokens").display(),
        dir.path("state").display()
    );
    std::fs::write(dir.path("relay.toml"), cfg).unwrap_or_else(|e| panic!("{e}"));
    let toml = dir.path("relay.toml").to_string_lossy().into_owned();
    let out = check_config(&["--config", &toml], &[]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("configuration ok"), "{stdout}");
    assert!(stdout.contains("reachable"), "{stdout}");
    // Operator lines carry no Debug text.
    assert!(
        !stdout.contains("Some(") && !stdout.contains("StorageAccess("),
        "{stdout}"
    );
    // A check makes nothing: the certificate is made by the first real start.
    assert!(!dir.path("state").exists());
    // Nor the block-ID key, when it lives in the state directory by default.
    let state = dir.path("state").to_string_lossy().into_owned();
    let tokens = dir.path("tokens").to_string_lossy().into_owned();
    let url = az.url();
    let out = check_config(
        &[
            "--storage-url",
            &url,
            "--account-key",
            DEV_KEY,
            "--tokens",
            &tokens,
            "--state-dir",
            &state,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!dir.path("state").exists(), "the check wrote a file");

    // A flag overrides the file: a storage port nobody listens on fails the
    // check, with the cause.
    let out = check_config(
        &[
            "--config",
            &toml,
            "--storage-url",
            &format!("http://127.0.0.1:{}/devstoreaccount1", free_port()),
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not usable") && err.contains("\"data\""),
        "{err}"
    );

    // So does a key storage does not accept (valid base64, wrong secret).
    let wrong = DEV_KEY.replace("Eby8", "Xby8");
    let out = check_config(&["--config", &toml, "--account-key", &wrong], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("403"), "{err}");

    std::fs::write(
        dir.path("bad.toml"),
        "storage_url = \"x\"\nbogus_setting = 1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = check_config(&["--config", &dir.path("bad.toml").to_string_lossy()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown setting \"bogus_setting\""));

    // A key that is not base64 is caught before serving.
    let out = check_config(
        &[
            "--storage-url",
            "http://127.0.0.1:1/devstoreaccount1",
            "--account-key",
            "not-base64!",
            "--tokens",
            &dir.path("tokens").to_string_lossy(),
            "--id-key-ephemeral",
        ],
        &[("RELAY_STATE_DIR", &dir.path("state"))],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("base64"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_sigterm() {
    let az = shared_azurite();
    let container = unique_container("ops");
    az.storage()
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = Scratch::new("ops");
    let token = "ops-token-0123456789abcdef";
    std::fs::write(dir.path("tokens"), format!("{token}\n")).unwrap_or_else(|e| panic!("{e}"));
    let udp = format!("127.0.0.1:{}", free_port());
    let health = format!("127.0.0.1:{}", free_port());
    let fp = dir.path("fp");
    // Flags from the environment, as systemd's EnvironmentFile gives them.
    let mut relay = Reaped(
        Command::new(binary("relay-server"))
            .env("RELAY_LISTEN", &udp)
            .env("RELAY_STORAGE_URL", az.url())
            .env("RELAY_ACCOUNT_KEY", DEV_KEY)
            .env("RELAY_TOKENS", dir.path("tokens"))
            .env("RELAY_ID_KEY_FILE", dir.path("id.key"))
            .env("RELAY_STATE_DIR", dir.path("state"))
            .env("RELAY_CERT_FINGERPRINT_FILE", &fp)
            .env("RELAY_HEALTH_LISTEN", &health)
            .stderr(log_file(&dir.path("relay.log")))
            .spawn()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let t0 = Instant::now();
    while http_get(&health, "/healthz").is_none() {
        assert!(
            // A bound against hangs only.
            t0.elapsed() < Duration::from_secs(60),
            "health endpoint never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(http_get(&health, "/healthz").map(|r| r.0), Some(200));
    assert_eq!(http_get(&health, "/nope").map(|r| r.0), Some(404));
    // Every series exists before the first transfer, so dashboards see zeros.
    let (_, before) = http_get(&health, "/metrics").unwrap_or_else(|| panic!("no metrics"));
    assert_eq!(
        checked_histogram(&before, "blob_relay_commit_seconds"),
        0.0,
        "{before}"
    );
    checked_retries(&before);
    // Which build serves: the same version and commit as `--version` says.
    let (version, commit) = build_of("relay-server");
    let info = format!("blob_relay_build_info{{version=\"{version}\",commit=\"{commit}\"}} 1\n");
    assert!(before.contains(&info), "no {info:?} in {before}");
    assert_eq!(
        sample(&before, "blob_relay_bytes_staged_total"),
        Some(0.0),
        "{before}"
    );
    let fingerprint = std::fs::read_to_string(&fp)
        .unwrap_or_default()
        .trim()
        .to_string();

    let file = dir.path("m.bin");
    write_random(&file, 3 << 20, 5);
    let a: Vec<String> = [
        "upload",
        &file.to_string_lossy(),
        "--relay",
        &udp,
        "--relay-cert-sha256",
        &fingerprint,
        "--to",
        &container,
        "-v",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run_client(&a, &[("RELAY_TOKEN", token)], Duration::from_secs(60)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // At -v the client says which relay build it talks to, once.
    let said = format!("relay_version={version} ({commit})");
    assert_eq!(stderr(&out).matches(&said).count(), 1, "{}", stderr(&out));
    let (code, metrics) = http_get(&health, "/metrics").unwrap_or_else(|| panic!("no metrics"));
    assert_eq!(code, 200);
    assert!(
        metrics.contains("blob_relay_transfers_committed_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("blob_relay_bytes_committed_total {}", 3 << 20)),
        "{metrics}"
    );
    assert!(
        metrics.contains("blob_relay_budget_in_use_bytes 0"),
        "{metrics}"
    );
    let size = f64::from(3u32 << 20);
    assert_eq!(
        sample(&metrics, "blob_relay_bytes_received_total"),
        Some(size)
    );
    assert_eq!(
        sample(&metrics, "blob_relay_bytes_staged_total"),
        Some(size)
    );
    // One committed upload is one commit-latency observation.
    assert_eq!(
        checked_histogram(&metrics, "blob_relay_commit_seconds"),
        1.0,
        "{metrics}"
    );
    checked_retries(&metrics);

    unsafe {
        libc::kill(relay.0.id() as i32, libc::SIGTERM);
    }
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = relay.0.try_wait().unwrap_or_else(|e| panic!("{e}")) {
            break s;
        }
        assert!(
            // A bound against hangs only.
            t0.elapsed() < Duration::from_secs(60),
            "relay did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // The first log line names the build.
    let log = std::fs::read_to_string(dir.path("relay.log")).unwrap_or_default();
    let first = log.lines().next().unwrap_or_default();
    assert!(
        first.contains(&format!("relay-server {version} ({commit}) starting")),
        "{log}"
    );
}

fn log_file(path: &std::path::Path) -> std::fs::File {
    std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `NAME --version`: `NAME 0.1.0 (abc1234)` or `(abc1234-dirty)`, as
/// (version, commit). Built in a git checkout, the commit is never `unknown`.
fn build_of(name: &str) -> (String, String) {
    let out = Command::new(binary(name))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let rest = text.strip_prefix(&format!("{name} ")).unwrap_or_default();
    let (version, commit) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(" ("))
        .unwrap_or_else(|| panic!("{name} --version: {text:?}"));
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "{text}");
    let in_git = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .is_ok_and(|o| o.status.success());
    if commit == "unknown" && !in_git {
        return (version.to_string(), commit.to_string());
    }
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(
        hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{name} --version: {text:?}"
    );
    (version.to_string(), commit.to_string())
}

#[test]
fn both_binaries_say_their_version_and_commit() {
    assert_eq!(build_of("relay-client"), build_of("relay-server"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_certificate_from_a_ca_is_verified_by_name() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let az = shared_azurite();
    let container = unique_container("ca");
    az.storage()
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = Scratch::new("ca");

    // A private CA and a relay certificate for "relay.test" issued by it.
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap_or_else(|e| panic!("{e}"));
    let leaf_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let leaf = CertificateParams::new(vec!["relay.test".to_string()])
        .and_then(|p| p.signed_by(&leaf_key, &ca))
        .unwrap_or_else(|e| panic!("{e}"));
    let write = |name: &str, text: String| {
        let p = dir.path(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        p
    };
    let ca_pem = write("ca.pem", ca.pem());
    let cert_pem = write("cert.pem", leaf.pem());
    let key_pem = write("key.pem", leaf_key.serialize_pem());
    let tokens = write("tokens", format!("{}\n", relay_tests::relay::TOKEN));

    relay_transport::install_crypto_provider();
    let store =
        relay_server::sign_in::auth::TokenStore::load(&tokens).unwrap_or_else(|e| panic!("{e}"));
    let mut cfg = relay_server::Config::for_tests(az.storage(), store, 64 << 20)
        .unwrap_or_else(|e| panic!("{e}"));
    cfg.listen.identity =
        relay_server::connection::tls::Identity::from_pem_files(&cert_pem, &key_pem)
            .unwrap_or_else(|e| panic!("{e}"));
    let relay = relay_server::Relay::bind(cfg).unwrap_or_else(|e| panic!("{e}"));
    let addr = relay.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(relay.serve(rx));

    let file = dir.path("c.bin");
    let sha = write_random(&file, 4096, 9);
    let base: Vec<String> = [
        "upload",
        &file.to_string_lossy(),
        "--relay",
        &addr.to_string(),
        "--to",
        &container,
        "--relay-ca",
        &ca_pem.to_string_lossy(),
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let env = [("RELAY_TOKEN", relay_tests::relay::TOKEN)];

    // The certificate names relay.test, not the IP we dial: refused unless we say the name.
    let out = run_client(&base, &env, Duration::from_secs(60)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let mut named = base.clone();
    named.extend(["--server-name".to_string(), "relay.test".to_string()]);
    let out = run_client(&named, &env, Duration::from_secs(60)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let (_, got) = az
        .storage()
        .writer(&container, "c.bin")
        .unwrap_or_else(|e| panic!("{e}"))
        .content_sha256()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hex::encode(got), sha);
    let _ = stop.send(true);
    let _ = task.await;
}

/// Waits for a child to exit after SIGTERM.
fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap_or_else(|e| panic!("{e}")) {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "relay did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Against the relay binary and its real log: blob names
/// from unauthenticated and authenticated Offers cannot forge log lines or put
/// terminal escapes in the log, 60 KB names do not make 60 KB log lines, and the
/// refusals are in /metrics by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_cannot_forge_or_flood_the_log() {
    use relay_proto::protocol::{Code, Message, Offer, Overwrite, Secret};
    use relay_tests::raw_quic::Dial;
    use relay_transport::frames::{read_frame, write_frame};

    let az = shared_azurite();
    let container = unique_container("logs");
    az.storage()
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = Scratch::new("logs");
    let token = "logs-token-0123456789abcdef";
    std::fs::write(dir.path("tokens"), format!("{token}\n")).unwrap_or_else(|e| panic!("{e}"));
    let udp = format!("127.0.0.1:{}", free_port());
    let health = format!("127.0.0.1:{}", free_port());
    let fp = dir.path("fp");
    let log = std::fs::File::create(dir.path("relay.log")).unwrap_or_else(|e| panic!("{e}"));
    let mut relay = Reaped(
        Command::new(binary("relay-server"))
            .env("RELAY_LISTEN", &udp)
            .env("RELAY_STORAGE_URL", az.url())
            .env("RELAY_ACCOUNT_KEY", DEV_KEY)
            .env("RELAY_TOKENS", dir.path("tokens"))
            .env("RELAY_CERT_FINGERPRINT_FILE", &fp)
            .env("RELAY_HEALTH_LISTEN", &health)
            .env("RELAY_ID_KEY_EPHEMERAL", "true")
            .env("RELAY_STATE_DIR", dir.path("state"))
            .env_remove("RELAY_LOG")
            .env_remove("NO_COLOR")
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let t0 = Instant::now();
    while http_get(&health, "/healthz").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "health endpoint never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let fingerprint = std::fs::read_to_string(&fp).unwrap_or_default();
    let addr = udp.parse().unwrap_or_else(|e| panic!("{e}"));
    let (_connector, conn) = Dial::at(addr, fingerprint.trim()).connect().await;
    let offer = |tok: &str, container: &str, blob: &str| Offer {
        version: relay_proto::limits::PROTOCOL_VERSION,
        token: Secret(tok.into()),
        container: container.into(),
        blob: blob.into(),
        size: 10,
        content_type: None,
        metadata: Default::default(),
        overwrite: Overwrite::Never,
        sha256: None,
        block_size: None,
        put_md5: false,
        progress: false,
        eager: false,
    };
    let refused = |o: Offer| {
        let conn = conn.clone();
        async move {
            let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
            write_frame(&mut send, &Message::Offer(o))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            match read_frame(&mut recv).await {
                Ok(Message::Reject(f)) => f.code,
                other => panic!("expected a Reject, got {other:?}"),
            }
        }
    };

    // A newline, a forged `committed` line and terminal escapes in the name.
    let forged =
        "x.bin\n2026-12-01T00:00:00.000000Z  INFO committed FORGED\u{1b}[2J\u{1b}]0;t\u{7}";
    for tok in [token, "not-a-valid-token-at-all"] {
        assert_eq!(
            refused(offer(tok, &container, forged)).await,
            Code::InvalidName
        );
        let c = format!("{container}\nFORGED\u{1b}[31m");
        assert_eq!(refused(offer(tok, &c, "ok.bin")).await, Code::InvalidName);
    }
    // Long names, many times.
    let long = format!("{}\u{1b}", "n".repeat(60_000));
    for _ in 0..100 {
        assert_eq!(
            refused(offer("not-a-valid-token-at-all", &container, &long)).await,
            Code::InvalidName
        );
    }
    let (_, metrics) = http_get(&health, "/metrics").unwrap_or_else(|| panic!("no metrics"));
    assert_eq!(
        sample(
            &metrics,
            "blob_relay_rejections_total{reason=\"invalid_name\"}"
        ),
        Some(104.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "blob_relay_rejections_total{reason=\"bad_frame\"}"
        ),
        Some(0.0),
        "{metrics}"
    );
    conn.close(0u32.into(), b"");
    assert!(terminate(&mut relay.0).success());

    let text = std::fs::read_to_string(dir.path("relay.log")).unwrap_or_else(|e| panic!("{e}"));
    assert!(!text.contains('\u{1b}'), "ESC in the log:\n{text}");
    assert!(!text.contains('\u{7}'), "BEL in the log:\n{text}");
    // The forged line exists only inside the rejection, escaped.
    assert!(
        text.contains("FORGED"),
        "the rejections were not logged:\n{text}"
    );
    for line in text.lines() {
        assert!(
            !line.starts_with("2026-12-01T00:00:00.000000Z") && !line.starts_with("FORGED"),
            "forged line: {line}"
        );
        if line.contains("FORGED") {
            assert!(line.contains("rejected") && line.contains("\\n"), "{line}");
        }
        assert!(line.len() <= 1024, "{} bytes: {line:.200}", line.len());
    }
    // 100 refusals of 60 KB names: a few KB of log, not megabytes.
    assert!(text.len() < 100_000, "{} bytes of log", text.len());
}
