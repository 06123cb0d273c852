//! `relay-client bench` end to end against Azurite and a real relay: both
//! methods run, alternate, verify, and what they wrote is deleted (or kept with
//! --keep); --json is the contract scripts read.

use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, new_container};
use relay_tests::client_bench::bench_env;
use relay_tests::files::Scratch;
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, summary};

/// The shared bench line with both methods only (whatever the machine's PATH
/// holds: AzCopy beside them is `azcopy.rs`), and JSON.
fn bench_args(relay: &RelayHandle, to: &str, work: &std::path::Path) -> Vec<String> {
    let mut args = relay_tests::client_bench::bench_args(relay, to, work, 2);
    args.extend(["--no-azcopy".to_string(), "--json".to_string()]);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_compares_relay_and_direct_verifies_and_cleans_up() {
    let az = shared_azurite();
    let container = new_container("bench").await;
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("bench");
    let storage_url = az.url();
    let env = bench_env(TOKEN, &storage_url);
    let args = bench_args(&relay, &format!("{container}/b"), &dir.path("work"));
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let methods: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap_or(""),
                r["run"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    // Run 1 starts with the relay, run 2 with direct upload.
    assert_eq!(
        methods,
        [("relay", 1), ("direct", 1), ("direct", 2), ("relay", 2)]
    );
    for r in &rows {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["files"], 6, "{r}");
        assert_eq!(r["bytes"], 9_000_000 + 5 * 3072, "{r}");
        assert!(r["goodput_mbit_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        // What QUIC saw, for relay runs only.
        if r["method"] == "relay" {
            assert!(r["quic"]["rtt_ms"].as_f64().is_some(), "{r}");
            assert!(r["quic"]["sent_packets"].as_u64().unwrap_or(0) > 0, "{r}");
            assert!(r["quic"]["lost_packets"].as_u64().is_some(), "{r}");
        } else {
            assert!(r.get("quic").is_none(), "{r}");
        }
    }
    assert!(
        report["ratio_relay_direct"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    assert!(report["rtt_ms"].as_f64().is_some(), "{report}");
    // Everything it wrote is gone.
    assert_eq!(report["deleted"], 4 * 6, "{report}");
    for r in &rows {
        let dest = r["destination"].as_str().unwrap_or_default();
        let prefix = dest.split_once('/').map_or("", |(_, p)| p);
        for name in ["large-1.bin", "small/small-1.bin", "small/small-5.bin"] {
            assert!(
                !blob_exists(&container, &format!("{prefix}/{name}")).await,
                "{prefix}/{name}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_keeps_blobs_on_request_and_fails_on_a_refused_upload() {
    let az = shared_azurite();
    let container = new_container("benchkeep").await;
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("benchkeep");
    let storage_url = az.url();
    let env = bench_env(TOKEN, &storage_url);
    let mut args = bench_args(&relay, &container, &dir.path("work"));
    args.extend(["--keep".to_string()]);
    let i = args.iter().position(|a| a == "--runs").unwrap_or_default();
    args[i + 1] = "1".into();
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["deleted"], 0);
    for r in report["rows"].as_array().cloned().unwrap_or_default() {
        let dest = r["destination"].as_str().unwrap_or_default();
        let prefix = dest.split_once('/').map_or("", |(_, p)| p);
        assert!(
            blob_exists(&container, &format!("{prefix}/large-1.bin")).await,
            "{dest}"
        );
    }

    // A token the relay does not know: the relay run fails, the bench says so
    // and exits 1 (direct still runs).
    let storage_url = az.url();
    let env = bench_env("not-a-token-of-this-relay", &storage_url);
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    assert_eq!(out.status.code(), Some(1));
    let report = summary(&out);
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let relay_row = rows.iter().find(|r| r["method"] == "relay");
    assert_eq!(
        relay_row.map(|r| r["verified"].clone()),
        Some(false.into()),
        "{report}"
    );
    assert!(report["ratio_relay_direct"].is_null(), "{report}");
}

/// `bench --from DIR`: the user's own files (a log file and an incompressible
/// one), never changed, through the relay with compression, without it, and
/// direct; every row verified against the SHA-256 of the files as read. The
/// compressed row went in fewer bytes than the files (its first chunk is
/// always a compressed sample, and logs shrink); the plain row says nothing of
/// wire bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_from_a_directory_compares_compression_on_the_users_files() {
    use relay_tests::datasets::DataSet;
    let az = shared_azurite();
    let container = new_container("benchfrom").await;
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("benchfrom");
    let from = dir.path("mine");
    let logs = DataSet::Logs.write(&from.join("app.log"), 3 << 20, 7);
    let random = DataSet::Random.write(&from.join("sub/photo.jpg"), (1 << 20) + 5, 7);
    let storage_url = az.url();
    let env = bench_env(TOKEN, &storage_url);
    let mut args = bench_args(&relay, &format!("{container}/f"), &dir.path("work"));
    let i = args.iter().position(|a| a == "--runs").unwrap_or_default();
    args[i + 1] = "1".into();
    args.extend(["--from".to_string(), from.to_string_lossy().into_owned()]);
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let methods: Vec<&str> = rows
        .iter()
        .map(|r| r["method"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(methods, ["relay", "relay-off", "direct"], "{report}");
    let bytes = 3u64 * MIB_U64 + MIB_U64 + 5;
    for r in &rows {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["files"], 2, "{r}");
        assert_eq!(r["bytes"], bytes, "{r}");
    }
    let wire = rows[0]["wire_bytes"].as_u64();
    assert!(wire.is_some_and(|w| w < bytes), "{}", rows[0]);
    assert!(rows[1].get("wire_bytes").is_none(), "{}", rows[1]);
    // The user's files are read, never changed or removed.
    assert_eq!(relay_tests::files::sha256_file(&from.join("app.log")), logs);
    assert_eq!(
        relay_tests::files::sha256_file(&from.join("sub/photo.jpg")),
        random
    );
    assert_eq!(report["deleted"], 3 * 2, "{report}");
}

const MIB_U64: u64 = 1 << 20;

/// `bench --download`: the files go into storage once, then each run
/// downloads them through the relay and with `download --direct`, alternating
/// which goes first; every file on disk checked by its SHA-256, a ratio
/// printed, and the blobs deleted afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_download_compares_relay_and_direct_and_verifies_every_file() {
    let az = shared_azurite();
    // Reading needs a read grant: the limited token may read and write.
    let (relay, container) = relay_tests::download_client::setup("benchdl", None).await;
    let dir = Scratch::new("benchdl");
    let storage_url = az.url();
    let env = bench_env(relay_tests::relay::LIMITED_TOKEN, &storage_url);
    let mut args = bench_args(&relay, &format!("{container}/d"), &dir.path("work"));
    args.push("--download".into());
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["direction"], "download", "{report}");
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let methods: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap_or(""),
                r["run"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        methods,
        [("relay", 1), ("direct", 1), ("direct", 2), ("relay", 2)]
    );
    for r in &rows {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r.get("error").is_none(), "{r}");
        assert_eq!(r["files"], 6, "{r}");
        assert_eq!(r["bytes"], 9_000_000 + 5 * 3072, "{r}");
        assert!(r["goodput_mbit_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert!(
        report["ratio_relay_direct"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    // The one copy put in storage is gone, and so are the downloaded folders.
    assert_eq!(report["deleted"], 6, "{report}");
    let source = rows[0]["destination"].as_str().unwrap_or_default();
    let prefix = source.split_once('/').map_or("", |(_, p)| p);
    for name in ["large-1.bin", "small/small-1.bin", "small/small-5.bin"] {
        assert!(
            !blob_exists(&container, &format!("{prefix}/{name}")).await,
            "{prefix}/{name}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path("work"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !left
            .iter()
            .any(|n| n.to_string_lossy().starts_with("download-")),
        "{left:?}"
    );

    // The text table says which direction it measured and prints the ratio.
    let i = args.iter().position(|a| a == "--json").unwrap_or_default();
    args.remove(i);
    let i = args.iter().position(|a| a == "--runs").unwrap_or_default();
    args[i + 1] = "1".into();
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("download"), "{text}");
    assert!(
        text.contains("ratio relay/direct (median goodput): "),
        "{text}"
    );
    assert!(!text.contains("no:"), "{text}");
}

/// `bench --download --from DIR`: the user's own files (a log file and an
/// incompressible one) come back through the relay with compression, without
/// it, and direct; every file on disk checked. The compressed row carried
/// fewer bytes than the files (the first chunk of a blob is always a
/// compressed sample, and logs shrink); the plain row says nothing of wire
/// bytes; the user's files are never changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_download_from_a_directory_compares_compression_on_the_way_back() {
    use relay_tests::datasets::DataSet;
    let az = shared_azurite();
    let (relay, container) = relay_tests::download_client::setup("benchdlfrom", None).await;
    let dir = Scratch::new("benchdlfrom");
    let from = dir.path("mine");
    let logs = DataSet::Logs.write(&from.join("app.log"), 3 << 20, 8);
    let random = DataSet::Random.write(&from.join("sub/photo.jpg"), (1 << 20) + 5, 8);
    let storage_url = az.url();
    let env = bench_env(relay_tests::relay::LIMITED_TOKEN, &storage_url);
    let mut args = bench_args(&relay, &format!("{container}/df"), &dir.path("work"));
    let i = args.iter().position(|a| a == "--runs").unwrap_or_default();
    args[i + 1] = "1".into();
    args.extend(["--from".to_string(), from.to_string_lossy().into_owned()]);
    args.push("--download".into());
    let out = run_client(&args, &env, Duration::from_secs(300)).await;
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["direction"], "download", "{report}");
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let methods: Vec<&str> = rows
        .iter()
        .map(|r| r["method"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(methods, ["relay", "relay-off", "direct"], "{report}");
    let bytes = 3u64 * MIB_U64 + MIB_U64 + 5;
    for r in &rows {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["files"], 2, "{r}");
        assert_eq!(r["bytes"], bytes, "{r}");
    }
    let wire = rows[0]["wire_bytes"].as_u64();
    assert!(wire.is_some_and(|w| w < bytes), "{}", rows[0]);
    assert!(rows[1].get("wire_bytes").is_none(), "{}", rows[1]);
    assert_eq!(relay_tests::files::sha256_file(&from.join("app.log")), logs);
    assert_eq!(
        relay_tests::files::sha256_file(&from.join("sub/photo.jpg")),
        random
    );
    assert_eq!(report["deleted"], 2, "{report}");
}
