//! End-to-end: `--relay-connections N` (a client's files over N QUIC
//! connections, each from its own UDP port, so a 5-tuple balancer can send
//! them to different relays). The real client binary, a real relay on
//! loopback, a real Azurite; every committed blob is downloaded and hashed.

use std::time::Duration;

use relay_tests::blobs::blob_sha;
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{run_client, stderr, summary};

const T: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_over_three_connections_are_each_committed_with_their_sha256() {
    let (relay, container) = RelayHandle::with_container("conns", RelayOptions::default()).await;
    let dir = Scratch::new("conns");
    let root = dir.path("data");
    // Small files (one Put Blob each) and multi-block ones, so every
    // connection carries both kinds; more files than connections.
    let mut expected = Vec::new();
    for i in 0..12u64 {
        let size = if i % 4 == 0 {
            2 * (5 << 20) + 1000 * i
        } else {
            10_000 + 777 * i
        };
        let rel = format!("f{i}.bin");
        let sha = write_random(&root.join(&rel), size, 100 + i);
        expected.push((format!("m/data/{rel}"), size, sha));
    }
    let mut a: Vec<String> = [
        "upload",
        root.to_str().unwrap_or_default(),
        "--json",
        "--block-size",
        "5MiB",
        "--relay-connections",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(relay.client_args(&format!("{container}/m")));
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let s = summary(&out);
    // One connection per link, each made when its first file needed it.
    assert_eq!(s["connections"], 3, "{s}");
    assert_eq!(s["totals"]["committed"], 12, "{s}");
    for (blob, size, sha) in &expected {
        let (n, got) = blob_sha(&container, blob).await;
        assert_eq!((n, &got), (*size, sha), "{blob}");
    }
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_over_several_connections_skips_every_identical_file() {
    // The skip rules are per file, not per connection: a second run of the
    // same files over four connections skips every one as identical.
    let (relay, container) =
        RelayHandle::with_container("conns-skip", RelayOptions::default()).await;
    let dir = Scratch::new("conns-skip");
    let root = dir.path("data");
    for i in 0..6u64 {
        write_random(&root.join(format!("f{i}.bin")), 50_000 + i, 200 + i);
    }
    let run = |n: &str| {
        let mut a: Vec<String> = [
            "upload",
            root.to_str().unwrap_or_default(),
            "--json",
            "--relay-connections",
            n,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(relay.client_args(&format!("{container}/s")));
        a
    };
    let first = run_client(&run("4"), &[], T).await;
    assert!(first.status.success(), "stderr: {}", stderr(&first));
    assert_eq!(summary(&first)["totals"]["committed"], 6);
    let again = run_client(&run("4"), &[], T).await;
    assert!(again.status.success(), "stderr: {}", stderr(&again));
    let s = summary(&again);
    assert_eq!(s["totals"]["skipped"], 6, "{s}");
    assert_eq!(s["totals"]["committed"], 0, "{s}");
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_closes_every_connection_at_exit() {
    // A client that exits without its CONNECTION_CLOSE on the wire leaves the
    // relay holding the connection (and its --max-connections slot) until the
    // idle timeout, 60 s. `Connector::close` returns once the close is sent.
    let (relay, container) =
        RelayHandle::with_container("conns-close", RelayOptions::default()).await;
    let dir = Scratch::new("conns-close");
    let root = dir.path("data");
    let mut expected = Vec::new();
    for i in 0..4u64 {
        let rel = format!("f{i}.bin");
        let sha = write_random(&root.join(&rel), 30_000 + i, 300 + i);
        expected.push((format!("c/data/{rel}"), 30_000 + i, sha));
    }
    let authenticated = "blob_relay_connections_authenticated";
    assert_eq!(relay.metric(authenticated), Some(0));
    let mut a: Vec<String> = [
        "upload",
        root.to_str().unwrap_or_default(),
        "--json",
        "--relay-connections",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(relay.client_args(&format!("{container}/c")));
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(summary(&out)["connections"], 3);
    for (blob, size, sha) in &expected {
        let (n, got) = blob_sha(&container, blob).await;
        assert_eq!((n, &got), (*size, sha), "{blob}");
    }
    // Half the idle timeout: only a close the relay received ends them sooner.
    let t0 = std::time::Instant::now();
    while relay.metric(authenticated) != Some(0) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{:?} connections still open after the client exited",
            relay.metric(authenticated)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    relay.stop().await;
}
