//! End-to-end: the real client binary, a real relay on loopback QUIC, a real Azurite,
//! real files. Every committed blob is downloaded and hashed.

use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::blob_sha;
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{run_client, stderr, summary, unique_container};

const T: Duration = Duration::from_secs(120);

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

async fn setup(tag: &str) -> (RelayHandle, String) {
    RelayHandle::with_container(tag, RelayOptions::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_block_file_is_committed_and_verified() {
    let (relay, container) = setup("multiblock").await;
    let dir = Scratch::new("multiblock");
    let file = dir.path("big.bin");
    // 3 blocks of 5 MiB plus a tail: 4 blocks, the last one short and off 64-byte alignment.
    let sha = write_random(&file, 3 * (5 << 20) + 12_345, 1);
    let mut a = relay.client_args(&format!("{container}/pre"));
    a.splice(
        0..0,
        args(&[
            "upload",
            file.to_str().unwrap_or_default(),
            "--json",
            "--block-size",
            "5MiB",
        ]),
    );
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let s = summary(&out);
    let f = &s["files"][0];
    assert_eq!(f["status"], "committed");
    assert_eq!(f["blob"], "pre/big.bin");
    assert_eq!(f["sha256"], sha.as_str());
    assert!(f["etag"].as_str().is_some_and(|e| !e.is_empty()));
    assert!(f["clocks_ms"]["transfer_ms"].is_u64());
    // The relay's own clocks come back in the Receipt.
    for k in ["receive_ms", "stage_wait_ms", "commit_ms"] {
        assert!(f["relay_ms"][k].is_u64(), "relay_ms.{k} in {f}");
    }
    let (n, got) = blob_sha(&container, "pre/big.bin").await;
    assert_eq!((n, got), (3 * (5 << 20) + 12_345, sha.clone()));
    // The verified hash is stored in metadata.
    let props = shared_azurite()
        .storage()
        .writer(&container, "pre/big.bin")
        .unwrap_or_else(|e| panic!("{e}"))
        .properties()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("blob missing"));
    assert_eq!(props.sha256.as_deref(), Some(sha.as_str()));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_tree_many_small_files_and_empty_file() {
    let (relay, container) = setup("tree").await;
    let dir = Scratch::new("tree");
    let root = dir.path("data");
    let mut expected = Vec::new();
    for i in 0..40u64 {
        let rel = format!("d{}/sub{}/f{i}.bin", i % 3, i % 2);
        let sha = write_random(&root.join(&rel), 1000 + i * 37, i);
        expected.push((format!("p/data/{rel}"), sha));
    }
    std::fs::write(root.join("empty.txt"), b"").unwrap_or_else(|e| panic!("{e}"));
    expected.push((
        "p/data/empty.txt".into(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
    ));
    let mut a = relay.client_args(&format!("{container}/p"));
    a.splice(
        0..0,
        args(&[
            "upload",
            root.to_str().unwrap_or_default(),
            "--json",
            "--parallel",
            "8",
        ]),
    );
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["totals"]["committed"], expected.len());
    for (blob, sha) in &expected {
        let (_, got) = blob_sha(&container, blob).await;
        assert_eq!(&got, sha, "{blob}");
    }
    // A new file that fits in one block costs one storage request (a
    // conditional Put Blob, no existence check first), and its Content-MD5 is
    // set for other tools.
    for f in s["files"].as_array().into_iter().flatten() {
        assert_eq!(f["storage_requests"], 1, "{f}");
    }
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_overwrite_unless_asked() {
    let (relay, container) = setup("overwrite").await;
    let dir = Scratch::new("overwrite");
    let file = dir.path("x.bin");
    write_random(&file, 1000, 7);
    let mut a = relay.client_args(&container);
    a.splice(
        0..0,
        args(&["upload", file.to_str().unwrap_or_default(), "--json"]),
    );
    assert!(run_client(&a, &[], T).await.status.success());

    // Same name, new content, no --overwrite: refused, old content kept.
    let new_sha = write_random(&file, 2000, 8);
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("x.bin: refused: a blob with this name exists (add --overwrite)"),
        "{err}"
    );
    let (n, _) = blob_sha(&container, "x.bin").await;
    assert_eq!(n, 1000);

    // With --overwrite: replaced and verified.
    a.push("--overwrite".into());
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(blob_sha(&container, "x.bin").await, (2000, new_sha));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_at_once() {
    let (relay, container) = setup("twoclients").await;
    let dir = Scratch::new("twoclients");
    let f1 = dir.path("a/one.bin");
    let f2 = dir.path("b/two.bin");
    let s1 = write_random(&f1, 11 << 20, 21);
    let s2 = write_random(&f2, 9 << 20, 22);
    let mut a1 = relay.client_args(&container);
    a1.splice(
        0..0,
        args(&[
            "upload",
            f1.to_str().unwrap_or_default(),
            "--json",
            "--block-size",
            "5MiB",
        ]),
    );
    let mut a2 = relay.client_args(&container);
    a2.splice(
        0..0,
        args(&[
            "upload",
            f2.to_str().unwrap_or_default(),
            "--json",
            "--block-size",
            "5MiB",
        ]),
    );
    let (o1, o2) = tokio::join!(run_client(&a1, &[], T), run_client(&a2, &[], T));
    assert!(o1.status.success() && o2.status.success());
    assert_eq!(blob_sha(&container, "one.bin").await.1, s1);
    assert_eq!(blob_sha(&container, "two.bin").await.1, s2);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_and_fallback_when_the_relay_is_unreachable() {
    let az = shared_azurite();
    let container = unique_container("direct");
    az.storage()
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = Scratch::new("direct");
    let file = dir.path("d.bin");
    let sha = write_random(&file, 11 << 20, 31);
    let env = [("RELAY_ACCOUNT_KEY", relay_tests::DEV_KEY)];

    // Direct: same planning and verify-then-commit, straight to storage.
    let a = args(&[
        "upload",
        file.to_str().unwrap_or_default(),
        "--direct",
        "--storage-url",
        &az.url(),
        "--to",
        &format!("{container}/direct"),
        "--block-size",
        "5MiB",
        "--connections",
        "3",
        "--json",
    ]);
    let out = run_client(&a, &env, T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["mode"], "direct");
    assert_eq!(
        blob_sha(&container, "direct/d.bin").await,
        (11 << 20, sha.clone())
    );

    // A relay address where nothing answers (UDP blocked, say): fall back to direct.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let dead_addr = dead
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string();
    let a = args(&[
        "upload",
        file.to_str().unwrap_or_default(),
        "--relay",
        &dead_addr,
        "--insecure",
        "--token",
        "x-token-0123456789abcdef",
        "--connect-timeout",
        "2",
        "--fallback",
        "direct",
        "--storage-url",
        &az.url(),
        "--to",
        &format!("{container}/fallback"),
        "--json",
    ]);
    let out = run_client(&a, &env, T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["mode"], "direct");
    assert!(stderr(&out).contains("falling back to direct upload"));
    assert_eq!(
        blob_sha(&container, "fallback/d.bin").await,
        (11 << 20, sha)
    );

    // Without --fallback and with --patience 0 the same dead relay is one
    // clear setup error, at once.
    let dead_relay = |extra: &[&str]| {
        let mut a = args(&[
            "upload",
            file.to_str().unwrap_or_default(),
            "--relay",
            &dead_addr,
            "--insecure",
            "--token",
            "x-token-0123456789abcdef",
            "--connect-timeout",
            "1",
            "--to",
            &container,
        ]);
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let out = run_client(&dead_relay(&["--patience", "0"]), &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is relay-server listening on UDP port"));

    // With patience it is waited for, said at once and as JSON events, and when
    // patience runs out the run stops resumably (exit 130) with the command
    // that resumes. stderr is a pipe here: no colour escapes in the logs.
    let debug = [("RELAY_LOG", "relay_client=debug")];
    let patient = dead_relay(&["--patience", "3s", "--json-lines"]);
    let out = run_client(&patient, &debug, T).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains(&format!(
            "relay {dead_addr} unreachable for 0 s (no answer from relay"
        )) && err.contains("still trying until")
            && err.contains("Ctrl-C stops, a rerun resumes"),
        "{err}"
    );
    assert!(
        err.contains("stopped: the relay stayed unreachable for 3 s (--patience)"),
        "{err}"
    );
    assert!(err.contains("to resume, run the same command"), "{err}");
    assert!(
        err.contains("DEBUG") && err.contains("relay unreachable; trying again"),
        "{err}"
    );
    assert!(!err.contains('\x1b'), "ANSI escapes on a pipe: {err:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let states: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "network")
        .filter_map(|e| e["state"].as_str())
        .collect();
    assert_eq!(states.first(), Some(&"unreachable"), "{stdout}");
    assert_eq!(states.last(), Some(&"gave_up"), "{stdout}");
    let end = events
        .last()
        .unwrap_or_else(|| panic!("no events: {stdout}"));
    assert_eq!(end["event"], "summary", "{stdout}");
    assert_eq!(end["stopped_by"], "patience", "{stdout}");
    // The same run with --color always does colour its log lines: the check
    // above can fail.
    let mut coloured = dead_relay(&["--patience", "1s"]);
    coloured.push("--color=always".into());
    let out = run_client(&coloured, &debug, T).await;
    assert_eq!(out.status.code(), Some(130));
    assert!(stderr(&out).contains('\x1b'), "{}", stderr(&out));
    drop(dead);
}
