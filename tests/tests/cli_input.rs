//! What the client checks of its command line before any network step: a
//! source that does not exist is said at once, naming the path (exit 2), in
//! relay mode (reachable or not), direct mode and `watch`.

use std::net::UdpSocket;
use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
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
