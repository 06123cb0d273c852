//! What the binaries check of their command lines before any network step: a
//! source that does not exist is said at once, naming the path (exit 2), in
//! relay mode (reachable or not), direct mode and `watch`; every duration flag
//! of both binaries takes the same forms (`relay_proto::duration`).

use std::any::TypeId;
use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::Duration;

use clap::CommandFactory;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use relay_tests::run_client;

const T: Duration = Duration::from_secs(120);

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|x| x.to_string()).collect()
}

/// A loopback UDP address nobody listens on (bound, then let go).
fn dead_relay() -> String {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = sock.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(sock);
    addr.to_string()
}

/// Exit 2 and exactly `relay-client: PATH: No such file or directory` on stderr.
fn assert_missing(out: &std::process::Output, path: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = format!("relay-client: {path}: No such file or directory");
    assert!(err.lines().any(|l| l == line), "no {line:?} in {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_source_is_said_at_once_naming_the_path() {
    let dir = Scratch::new("missing-src");
    let missing = dir.path("nonexistent").display().to_string();

    // The relay unreachable: before the fix the client waited --patience
    // for the relay and never named the path.
    let mut a = strings(&["upload", &missing, "--to", "data", "--relay"]);
    a.push(dead_relay());
    a.extend(strings(&[
        "--insecure",
        "--token",
        TOKEN,
        "--patience",
        "3s",
    ]));
    assert_missing(&run_client(&a, &[], T).await, &missing);

    // As JSON: one setup error naming it.
    a.push("--json".into());
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(message, format!("{missing}: No such file or directory"));

    // The relay reachable, beside a file that exists: nothing is sent.
    let container = new_container("missingsrc").await;
    let relay = RelayHandle::start(shared_azurite().storage(), RelayOptions::default());
    let present = dir.path("present.bin");
    write_random(&present, 1000, 7);
    let mut b = strings(&["upload", &present.display().to_string(), &missing]);
    b.extend(relay.client_args(&container));
    assert_missing(&run_client(&b, &[], T).await, &missing);
    assert!(!blob_exists(&container, "present.bin").await);
    relay.stop().await;

    // Direct mode, with storage nobody listens on.
    let c = strings(&[
        "upload",
        &missing,
        "--to",
        "data",
        "--direct",
        "--storage-url",
        "http://127.0.0.1:9/devstoreaccount1",
        "--account-key",
        relay_tests::DEV_KEY,
    ]);
    assert_missing(&run_client(&c, &[], T).await, &missing);

    // watch: the same words.
    let mut w = strings(&["watch", &missing, "--to", "data", "--relay"]);
    w.push(dead_relay());
    w.extend(strings(&[
        "--insecure",
        "--token",
        TOKEN,
        "--patience",
        "3s",
    ]));
    w.extend(strings(&["--no-journal"]));
    assert_missing(&run_client(&w, &[], T).await, &missing);
}

/// Every flag of `cmd` and its subcommands, as (path of subcommands, arg).
fn every_arg(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
    for arg in cmd.get_arguments() {
        out.push((path.to_string(), arg.clone()));
    }
    for sub in cmd.get_subcommands() {
        every_arg(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

/// `arg` alone in a command, given `value`: what it parsed to.
fn parse_one(arg: &clap::Arg, value: &str) -> Result<Duration, String> {
    let id = arg.get_id().to_string();
    let long = arg.get_long().unwrap_or_default().to_string();
    let m = clap::Command::new("t")
        .arg(arg.clone().required(false))
        .try_get_matches_from(["t".to_string(), format!("--{long}={value}")])
        .map_err(|e| e.to_string())?;
    m.get_one::<Duration>(&id)
        .copied()
        .ok_or_else(|| format!("--{long} gave no value"))
}

/// A flag that takes a time under some other syntax than the shared one: a
/// seconds-only value name or help, or a name that says it is a time.
fn looks_like_a_time(arg: &clap::Arg) -> bool {
    let names = arg
        .get_value_names()
        .unwrap_or_default()
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>();
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let long = arg.get_long().unwrap_or_default();
    names
        .iter()
        .any(|n| ["SECONDS", "SECS", "MS", "MILLIS"].contains(&n.as_str()))
        || help.starts_with("Seconds")
        || help.starts_with("Milliseconds")
        || [
            "timeout",
            "interval",
            "deadline",
            "wait",
            "grace",
            "skew",
            "patience",
            "settle",
            "poll",
            "reconcile",
        ]
        .iter()
        .any(|w| long.ends_with(w))
}

#[test]
fn every_duration_flag_of_both_binaries_takes_the_same_forms() {
    let mut args = Vec::new();
    every_arg(
        &relay_client::cli::Cli::command(),
        "relay-client",
        &mut args,
    );
    every_arg(
        &relay_server::operations::config::Args::command(),
        "relay-server",
        &mut args,
    );
    let s = Duration::from_secs(1);
    let forms = [
        ("7", 7 * s),
        ("1500ms", s * 3 / 2),
        ("90s", 90 * s),
        ("2m", 120 * s),
        ("1h", 3600 * s),
        ("1h30m", 5400 * s),
    ];
    let mut found = BTreeSet::new();
    for (path, arg) in &args {
        let long = arg.get_long().unwrap_or_default();
        if arg.get_value_parser().type_id() != TypeId::of::<Duration>() {
            assert!(
                !looks_like_a_time(arg),
                "{path} --{long} looks like a time but does not use the duration syntax"
            );
            continue;
        }
        found.insert(format!(
            "{} --{long}",
            path.split(' ').next().unwrap_or_default()
        ));
        for (text, want) in forms {
            assert_eq!(parse_one(arg, text), Ok(want), "{path} --{long} {text}");
        }
        let refused = parse_one(arg, "10 parsecs").err().unwrap_or_default();
        assert!(
            refused.contains("500ms, 90s, 2m, 1h"),
            "{path} --{long}: {refused}"
        );
        assert_eq!(
            arg.get_value_names().map(|n| n[0].to_string()),
            Some("DURATION".to_string()),
            "{path} --{long}: value name"
        );
    }
    // docs/CLIENT.md's table of duration flags lists exactly these.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CLIENT.md"))
        .unwrap_or_else(|e| panic!("docs/CLIENT.md: {e}"));
    let section = doc
        .split("\n## Durations\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("docs/CLIENT.md has no Durations section"));
    let mut listed = BTreeSet::new();
    for line in section.lines() {
        for binary in ["relay-client", "relay-server"] {
            if let Some(row) = line.strip_prefix(&format!("| {binary} |")) {
                for flag in row.split('`').filter(|w| w.starts_with("--")) {
                    listed.insert(format!("{binary} {flag}"));
                }
            }
        }
    }
    assert_eq!(found, listed, "flags found (left) and documented (right)");
    assert!(found.len() >= 16, "{found:?}");
}

/// `config init` writes a profile; `upload` then needs only its paths. Flags
/// and the environment win over the file; a token written into a file others
/// can read is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_remembers_the_relay() {
    use std::os::unix::fs::PermissionsExt;
    let relay = RelayHandle::start(shared_azurite().storage(), RelayOptions::default());
    let first = new_container("profile1").await;
    let second = new_container("profile2").await;
    let dir = Scratch::new("profile");
    let token_file = dir.path("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap_or_else(|e| panic!("{e}"));
    let xdg = dir.path("xdg");
    let xdg_env = [("XDG_CONFIG_HOME", xdg.to_str().unwrap_or_default())];
    let addr = relay.addr.to_string();
    let init = strings(&[
        "config",
        "init",
        "--relay",
        &addr,
        "--relay-cert-sha256",
        &relay.fingerprint,
        "--token-file",
        token_file.to_str().unwrap_or_default(),
        "--to",
        &first,
    ]);
    let out = run_client(&init, &xdg_env, T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = xdg.join("blob-relay/client.toml");
    let mode = std::fs::metadata(&written).map_or(0, |m| m.permissions().mode());
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&written).unwrap_or_default();
    assert!(
        !text.contains(TOKEN),
        "the token is referenced, not copied: {text}"
    );
    // A second init of the same profile is refused; the file is kept.
    assert_eq!(run_client(&init, &xdg_env, T).await.status.code(), Some(2));

    // The XDG file alone: relay, pin, token and destination.
    let file = dir.path("a.bin");
    let sha = write_random(&file, 3000, 11);
    let up = strings(&["upload", file.to_str().unwrap_or_default()]);
    let out = run_client(&up, &xdg_env, T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(blob_sha(&first, "a.bin").await, (3000, sha.clone()));

    // A flag wins over the file.
    let mut to_second = up.clone();
    to_second.extend(strings(&["--to", &second]));
    let out = run_client(&to_second, &xdg_env, T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(blob_sha(&second, "a.bin").await, (3000, sha));
    // The environment wins over the file: a wrong RELAY_TOKEN is refused.
    let wrong = [xdg_env[0], ("RELAY_TOKEN", "wrong-token-0123456789abcdef")];
    let out = run_client(&to_second, &wrong, T).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the token"));

    // --config FILE with a token in it, readable by others: refused at once.
    let plain = dir.path("plain.toml");
    std::fs::write(
        &plain,
        format!("[profile.default]\nrelay = \"{addr}\"\ntoken = \"{TOKEN}\"\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = up.clone();
    c.extend(strings(&["--config", plain.to_str().unwrap_or_default()]));
    let out = run_client(&c, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("others can read it") && err.contains("chmod 600"),
        "{err}"
    );
    // A profile that is not there is named.
    c.extend(strings(&["--profile", "nope"]));
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("{e}"));
    let out = run_client(&c, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no profile \"nope\""));
    relay.stop().await;
}

/// `download` reads the profile as `upload` does (relay, pin, sign-in), but
/// not its `to`: that is upload's destination, while download's `--to` is a
/// local folder. The profile is the one `terraform output client_profile`
/// gives: a token file under `~/`, the home directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_reads_the_profile_but_not_its_destination() {
    let (relay, container) = relay_tests::download_client::setup("profile-dl", None).await;
    let dir = Scratch::new("profile-dl");
    let home = dir.path("home");
    let conf_dir = home.join(".config");
    std::fs::create_dir_all(conf_dir.join("blob-relay")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        conf_dir.join("blob-relay/token"),
        format!("{LIMITED_TOKEN}\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        conf_dir.join("blob-relay/client.toml"),
        format!(
            "[profile.default]\nrelay = '{}'\nrelay_cert_sha256 = '{}'\n\
             token_file = '~/.config/blob-relay/token'\nto = '{container}'\n",
            relay.addr, relay.fingerprint
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let env = [
        ("HOME", home.to_str().unwrap_or_default()),
        ("XDG_CONFIG_HOME", conf_dir.to_str().unwrap_or_default()),
    ];

    let file = dir.path("src/a.bin");
    let sha = write_random(&file, 5000, 12);
    let up = strings(&["upload", file.to_str().unwrap_or_default()]);
    let out = run_client(&up, &env, T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(blob_sha(&container, "a.bin").await, (5000, sha.clone()));

    // Only the source and the local folder: relay, pin and token from the profile.
    let dest = dir.path("dest");
    let down = strings(&[
        "download",
        &format!("{container}/a.bin"),
        "--to",
        dest.to_str().unwrap_or_default(),
    ]);
    let out = run_client(&down, &env, T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&dest.join("a.bin")), sha);
    // The profile's `to` (a container) is never taken as the local folder.
    let no_dir = strings(&["download", &format!("{container}/a.bin")]);
    let out = run_client(&no_dir, &env, T).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--to <DIR>"), "{err}");
    relay.stop().await;
}
