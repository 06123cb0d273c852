//! Owning a relay: its identity survives restarts and changes only by `cert
//! rotate`; `token new` prints a line and a client command that work as printed;
//! `/healthz` tells whether storage is reachable; `--help`'s examples survive
//! wrapping. Real relay-server and relay-client processes against Azurite.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::http::get as http_get;
use relay_tests::{DEV_KEY, Reaped, binary, reserved_port, run_client};

/// Kills the relay if the test ends early.
struct Relay(Reaped);

impl Relay {
    /// Starts a relay with state in `state` and waits until its health endpoint
    /// answers.
    fn start(storage_url: &str, tokens: &Path, state: &Path, udp: &str, health: &str) -> Self {
        let child = Command::new(binary("relay-server"))
            .env_clear()
            .env("RELAY_LISTEN", udp)
            .env("RELAY_STORAGE_URL", storage_url)
            .env("RELAY_ACCOUNT_KEY", DEV_KEY)
            .env("RELAY_TOKENS", tokens)
            .env("RELAY_STATE_DIR", state)
            .env("RELAY_HEALTH_LISTEN", health)
            .env("RELAY_STORAGE_CHECK_INTERVAL", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut relay = Relay(Reaped(child));
        let t0 = Instant::now();
        while http_get(health, "/healthz").is_none() {
            if let Ok(Some(status)) = relay.0.try_wait() {
                panic!("relay exited: {status}");
            }
            // A bound against hangs only.
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "relay never came up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        relay
    }

    fn stop(mut self) {
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let status = self.0.wait().unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "{status}");
    }
}

/// `relay-server ARGS` with only `RELAY_STATE_DIR` set.
fn server(state: &Path, args: &[&str]) -> Output {
    Command::new(binary("relay-server"))
        .env_clear()
        .env("RELAY_STATE_DIR", state)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fingerprint_file(state: &Path) -> String {
    std::fs::read_to_string(state.join("tls-cert.sha256"))
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_string()
}

/// The client command `token new` printed: (token, arguments after `relay-client`).
fn printed_command(stderr: &str) -> (String, Vec<String>) {
    let joined = stderr.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.trim_start().starts_with("RELAY_TOKEN="))
        .unwrap_or_else(|| panic!("no client command in: {stderr}"));
    let mut words = line.split_whitespace();
    let token = words
        .next()
        .and_then(|w| w.strip_prefix("RELAY_TOKEN="))
        .unwrap_or_default()
        .to_string();
    assert_eq!(words.next(), Some("relay-client"), "{line}");
    (token, words.map(str::to_string).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_survives_restarts_and_rotates_on_command_and_token_new_works() {
    let az = shared_azurite();
    let container = new_container("ident").await;
    let dir = Scratch::new("ident");
    let state = dir.path("state");
    let tokens = dir.path("tokens");
    // A file must list a valid token to start; the one we make comes later.
    std::fs::write(&tokens, "placeholder-token-0123456789\n").unwrap_or_else(|e| panic!("{e}"));
    let udp = format!("127.0.0.1:{}", reserved_port());
    let health = format!("127.0.0.1:{}", reserved_port());

    // First start: the certificate is made and its fingerprint written.
    Relay::start(&az.url(), &tokens, &state, &udp, &health).stop();
    let first = fingerprint_file(&state);
    let shown = server(&state, &["cert", "show"]);
    assert_eq!(text(&shown.stdout).trim(), first, "{}", text(&shown.stderr));

    // A token for this container, and the command to use it.
    let made = server(
        &state,
        &[
            "token",
            "new",
            "--containers",
            &container,
            "--address",
            &udp,
        ],
    );
    assert!(made.status.success(), "{}", text(&made.stderr));
    let line = text(&made.stdout);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&tokens)
        .unwrap_or_else(|e| panic!("{e}"));
    f.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let (token, mut args) = printed_command(&text(&made.stderr));
    assert!(
        line.starts_with(&token) && line.trim_end().ends_with(&container),
        "{line}"
    );
    assert!(
        args.contains(&first),
        "pin is the kept fingerprint: {args:?}"
    );

    // Second start: same fingerprint, and the printed command works as printed.
    let relay = Relay::start(&az.url(), &tokens, &state, &udp, &health);
    assert_eq!(fingerprint_file(&state), first);
    let file = dir.path("a.bin");
    let sha = write_random(&file, 3 << 20, 17);
    let files = args
        .iter()
        .position(|a| a == "FILES...")
        .unwrap_or_else(|| panic!("{args:?}"));
    args[files] = file.to_string_lossy().into_owned();
    let out = run_client(&args, &[("RELAY_TOKEN", &token)], Duration::from_secs(60)).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(blob_sha(&container, "a.bin").await, (3 << 20, sha));

    // Rotation: a new fingerprint, used from the next start on.
    let rotated = server(&state, &["cert", "rotate"]);
    assert!(rotated.status.success(), "{}", text(&rotated.stderr));
    let second = text(&rotated.stdout).trim().to_string();
    assert_ne!(second, first);
    assert_eq!(fingerprint_file(&state), second);
    relay.stop();
    let _relay = Relay::start(&az.url(), &tokens, &state, &udp, &health);
    let file_b = dir.path("b.bin");
    let sha_b = write_random(&file_b, 4096, 18);
    args[files] = file_b.to_string_lossy().into_owned();
    let out = run_client(&args, &[("RELAY_TOKEN", &token)], Duration::from_secs(60)).await;
    assert!(!out.status.success(), "old pin accepted after rotation");
    assert!(
        text(&out.stderr).contains("does not match"),
        "{}",
        text(&out.stderr)
    );
    for a in args.iter_mut().filter(|a| **a == first) {
        *a = second.clone();
    }
    let out = run_client(&args, &[("RELAY_TOKEN", &token)], Duration::from_secs(60)).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(blob_sha(&container, "b.bin").await, (4096, sha_b));
}

/// Polls `/healthz` until its storage line is no longer "not checked yet".
fn checked_health(health: &str) -> (u16, String) {
    let t0 = Instant::now();
    loop {
        if let Some((code, body)) = http_get(health, "/healthz")
            && !body.contains("not checked yet")
        {
            return (code, body);
        }
        // A bound against hangs only.
        assert!(t0.elapsed() < Duration::from_secs(60), "no storage check");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_storage_reachability_and_failures_are_classed() {
    let az = shared_azurite();
    let dir = Scratch::new("healthz");
    let tokens = dir.path("tokens");
    std::fs::write(&tokens, "healthz-token-0123456789 data\n").unwrap_or_else(|e| panic!("{e}"));

    let health = format!("127.0.0.1:{}", reserved_port());
    let udp = format!("127.0.0.1:{}", reserved_port());
    let good = Relay::start(&az.url(), &tokens, &dir.path("s1"), &udp, &health);
    let (code, body) = checked_health(&health);
    assert_eq!((code, body.as_str()), (200, "ok\nstorage: reachable\n"));
    let (_, metrics) = http_get(&health, "/metrics").unwrap_or_default();
    assert!(
        metrics.contains("\nblob_relay_storage_reachable 1\n"),
        "{metrics}"
    );
    good.stop();

    // Storage on a port nobody listens on: not ready, with the cause.
    let dead = format!("http://127.0.0.1:{}/devstoreaccount1", reserved_port());
    let health = format!("127.0.0.1:{}", reserved_port());
    let udp = format!("127.0.0.1:{}", reserved_port());
    let bad = Relay::start(&dead, &tokens, &dir.path("s2"), &udp, &health);
    let (code, body) = checked_health(&health);
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("storage unreachable\nstorage: unreachable: "),
        "{body}"
    );
    let (_, metrics) = http_get(&health, "/metrics").unwrap_or_default();
    assert!(
        metrics.contains("\nblob_relay_storage_reachable 0\n"),
        "{metrics}"
    );
    bad.stop();
}

/// A supervisor may send SIGTERM the moment `/healthz` first answers: the
/// relay must already own the signal and stop cleanly (exit 0), never die of
/// the default action. CI once caught the relay in that window; the handlers
/// are now installed before anything answers, and 30 rounds check it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_healthz_first_answers_is_a_clean_stop() {
    let az = shared_azurite();
    let dir = Scratch::new("sigterm-early");
    let tokens = dir.path("tokens");
    std::fs::write(&tokens, "early-token-0123456789 data\n").unwrap_or_else(|e| panic!("{e}"));
    let state = dir.path("state");
    for _ in 0..30 {
        let udp = format!("127.0.0.1:{}", reserved_port());
        let health = format!("127.0.0.1:{}", reserved_port());
        Relay::start(&az.url(), &tokens, &state, &udp, &health).stop();
    }
}

#[test]
fn help_examples_stay_copy_paste_true_when_wrapped() {
    for columns in ["60", "80", "200"] {
        let out = Command::new(binary("relay-server"))
            .arg("--help")
            .env("COLUMNS", columns)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let help = text(&out.stdout);
        let examples = help
            .split_once("\nExamples:\n")
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("no examples: {help}"));
        let lines: Vec<&str> = examples.lines().collect();
        assert!(lines.len() > 10, "{examples}");
        for w in lines.windows(2) {
            let next = w[1].trim_start();
            // A continuation (a flag or a redirection) follows a line ending in `\`.
            if next.starts_with("--") || next.starts_with(">>") {
                assert!(
                    w[0].ends_with('\\'),
                    "COLUMNS={columns}: {:?} / {:?}",
                    w[0],
                    w[1]
                );
            }
            // Nothing but a comment or a command starts a line of an example.
            if w[0].ends_with('\\') {
                assert!(
                    next.starts_with("--") || next.starts_with(">>"),
                    "{:?}",
                    w[1]
                );
            }
        }
        // The key stays one word (wrapping must never split it).
        assert!(
            examples.contains(&format!("AZURITE_KEY={DEV_KEY}\n")),
            "{examples}"
        );
    }
}
