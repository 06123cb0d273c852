//! `relay-client bench` with AzCopy beside the relay and direct mode, against
//! Azurite and a real relay: the real AzCopy (the pinned npm binary) runs on
//! the same generated files in both directions, each of its rows is verified
//! (every blob read back and hashed, every downloaded file hashed), the ratio
//! and CPU per GiB are reported, and the SAS it ran with is printed nowhere,
//! not even when AzCopy fails.

use std::time::Duration;

use relay_tests::azcopy::azcopy_bin;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, new_container};
use relay_tests::client_bench::{bench_args, bench_env};
use relay_tests::files::Scratch;
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::{DEV_ACCOUNT, DEV_KEY, run_client, summary};

const T: Duration = Duration::from_secs(300);

/// A PATH holding only `azcopy` (a link to the npm binary), or nothing.
fn path_with_azcopy(dir: &Scratch, with: bool) -> String {
    let bin = dir.path("path");
    std::fs::create_dir_all(&bin).expect("mkdir");
    if with {
        std::os::unix::fs::symlink(azcopy_bin(), bin.join("azcopy")).expect("link");
    }
    bin.to_string_lossy().into_owned()
}

/// A container SAS the test signs itself, so it knows what must never show.
fn sas(container: &str, permissions: &str) -> (String, String) {
    let q = relay_storage::sas::container_sas(
        DEV_ACCOUNT,
        DEV_KEY,
        container,
        permissions,
        time::OffsetDateTime::now_utc(),
        time::Duration::hours(1),
    )
    .expect("sas");
    let sig = url::form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "sig")
        .map(|(_, v)| v.into_owned())
        .expect("sig");
    (q, sig)
}

/// Neither spelling of `sig` (nor the account key) is in what the run printed.
fn never_printed(out: &std::process::Output, sig: &str) {
    let encoded: String = url::form_urlencoded::byte_serialize(sig.as_bytes()).collect();
    for (name, stream) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(stream);
        for secret in [sig, encoded.as_str(), DEV_KEY] {
            assert!(!text.contains(secret), "{name} holds a secret:\n{text}");
        }
    }
}

fn rows(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["rows"].as_array().cloned().unwrap_or_default()
}

fn methods(report: &serde_json::Value) -> Vec<(String, u64)> {
    rows(report)
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap_or("").to_string(),
                r["run"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Found on PATH, AzCopy runs beside the others with a SAS the bench signs
/// from the account key; every row is verified and reports CPU per GiB; the
/// blobs AzCopy wrote are deleted with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_azcopy_from_path_verified_with_a_ratio_and_cpu() {
    let az = shared_azurite();
    let container = new_container("benchazc").await;
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("benchazc");
    let path = path_with_azcopy(&dir, true);
    let home = dir.path("home").to_string_lossy().into_owned();
    let storage_url = az.url();
    let mut env = bench_env(TOKEN, &storage_url);
    env.extend([
        ("PATH", &*path),
        // AzCopy keeps its pid files in ~/.azcopy: the test's own.
        ("HOME", &*home),
    ]);
    let mut args = bench_args(&relay, &format!("{container}/a"), &dir.path("work"), 2);
    args.push("--json".into());
    let out = run_client(&args, &env, T).await;
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    let want: Vec<(String, u64)> = [
        ("relay", 1),
        ("direct", 1),
        ("azcopy", 1),
        ("azcopy", 2),
        ("direct", 2),
        ("relay", 2),
    ]
    .iter()
    .map(|(m, r)| (m.to_string(), *r))
    .collect();
    assert_eq!(methods(&report), want, "{report}");
    for r in rows(&report) {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["bytes"], 9_000_000 + 5 * 3072, "{r}");
        assert!(r["cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        if r["method"] == "azcopy" {
            // Timed to the job's end in its log, before its process noticed.
            let (s, p) = (r["seconds"].as_f64(), r["process_seconds"].as_f64());
            assert!(s.zip(p).is_some_and(|(s, p)| s > 0.0 && s <= p), "{r}");
        }
    }
    assert!(
        report["ratio_relay_azcopy"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    let note = &report["azcopy"];
    assert_eq!(note["version"], "10.32.2", "{report}");
    assert_eq!(note["sas_from"], "account-key", "{report}");
    // Its own defaults on this 2-core machine: 32 connections, 8 MiB blocks.
    assert!(note["concurrency"].as_u64().is_some(), "{report}");
    assert_eq!(note["block_size_bytes"], 8 << 20, "{report}");
    assert_eq!(report["deleted"], 6 * 6, "{report}");
    for r in rows(&report) {
        let dest = r["destination"].as_str().unwrap_or_default();
        let prefix = dest.split_once('/').map_or("", |(_, p)| p);
        assert!(!blob_exists(&container, &format!("{prefix}/small/small-5.bin")).await);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("sig="), "{text}");
}

/// `--download --azcopy PATH --azcopy-sas`: AzCopy downloads the staged files
/// beside the relay and direct mode, every file hashed on disk; the SAS given
/// is printed nowhere, in JSON or text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_download_runs_azcopy_with_the_given_sas_and_never_prints_it() {
    let az = shared_azurite();
    let (relay, container) = relay_tests::download_client::setup("benchazcdl", None).await;
    let dir = Scratch::new("benchazcdl");
    let path = path_with_azcopy(&dir, false);
    let home = dir.path("home").to_string_lossy().into_owned();
    let (query, sig) = sas(&container, "rl");
    let storage_url = az.url();
    let mut env = bench_env(relay_tests::relay::LIMITED_TOKEN, &storage_url);
    env.extend([
        ("RELAY_AZCOPY_SAS", &*query),
        ("PATH", &*path),
        // AzCopy keeps its pid files in ~/.azcopy: the test's own.
        ("HOME", &*home),
    ]);
    let mut args = bench_args(&relay, &format!("{container}/d"), &dir.path("work"), 1);
    args.extend(["--download".into(), "--azcopy".into()]);
    args.push(azcopy_bin().to_string_lossy().into_owned());
    let mut json = args.clone();
    json.push("--json".into());
    let out = run_client(&json, &env, T).await;
    never_printed(&out, &sig);
    let report = summary(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["direction"], "download", "{report}");
    let want: Vec<(String, u64)> = [("relay", 1), ("direct", 1), ("azcopy", 1)]
        .iter()
        .map(|(m, r)| (m.to_string(), *r))
        .collect();
    assert_eq!(methods(&report), want, "{report}");
    for r in rows(&report) {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert_eq!(report["azcopy"]["sas_from"], "azcopy-sas", "{report}");
    assert!(
        report["ratio_relay_azcopy"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );

    let out = run_client(&args, &env, T).await;
    never_printed(&out, &sig);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("ratio relay/AzCopy (median goodput): "),
        "{text}"
    );
    assert!(text.contains("AzCopy 10.32.2"), "{text}");
}

/// A SAS storage refuses: the AzCopy row fails (and so the bench, exit 1),
/// its error says why, and the SAS is still printed nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_azcopy_run_fails_its_row_without_printing_the_sas() {
    let az = shared_azurite();
    let container = new_container("benchazcbad").await;
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("benchazcbad");
    let path = path_with_azcopy(&dir, true);
    let home = dir.path("home").to_string_lossy().into_owned();
    // Signed for another container: storage refuses it for this one.
    let (query, sig) = sas("some-other-container", "w");
    let storage_url = az.url();
    let mut env = bench_env(TOKEN, &storage_url);
    env.extend([
        ("PATH", &*path),
        // AzCopy keeps its pid files in ~/.azcopy: the test's own.
        ("HOME", &*home),
    ]);
    let mut args = bench_args(&relay, &format!("{container}/x"), &dir.path("work"), 1);
    args.extend(["--json".into(), "--azcopy-sas".into(), query]);
    let out = run_client(&args, &env, T).await;
    never_printed(&out, &sig);
    assert_eq!(out.status.code(), Some(1));
    let report = summary(&out);
    let azcopy = rows(&report)
        .into_iter()
        .find(|r| r["method"] == "azcopy")
        .unwrap_or_else(|| panic!("no azcopy row: {report}"));
    assert_eq!(azcopy["verified"], false, "{azcopy}");
    assert!(
        azcopy["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{azcopy}"
    );
    assert!(report.get("ratio_relay_azcopy").is_none(), "{report}");
}

/// Without AzCopy on PATH (and without `--azcopy`), or with `--no-azcopy`
/// beside one, the bench is what it was: no AzCopy row, ratio or note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_azcopy_the_bench_is_unchanged() {
    let az = shared_azurite();
    let container = new_container("benchnoazc").await;
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("benchnoazc");
    for (with, extra) in [(false, None), (true, Some("--no-azcopy"))] {
        let sub = Scratch::new(if with {
            "benchnoazc-off"
        } else {
            "benchnoazc-none"
        });
        let path = path_with_azcopy(&sub, with);
        let home = sub.path("home").to_string_lossy().into_owned();
        let storage_url = az.url();
        let mut env = bench_env(TOKEN, &storage_url);
        env.extend([("PATH", &*path), ("HOME", &*home)]);
        let mut args = bench_args(&relay, &format!("{container}/n"), &dir.path("work"), 1);
        args.push("--json".into());
        args.extend(extra.map(str::to_string));
        let out = run_client(&args, &env, T).await;
        let report = summary(&out);
        assert!(out.status.success(), "{report}");
        let want: Vec<(String, u64)> =
            [("relay".to_string(), 1), ("direct".to_string(), 1)].to_vec();
        assert_eq!(methods(&report), want, "{report}");
        assert!(report.get("azcopy").is_none(), "{report}");
        assert!(report.get("ratio_relay_azcopy").is_none(), "{report}");
    }
}

/// A bench that cannot start (an `--azcopy` that does not run, a storage URL
/// that is not one) says why, exits 2, and leaves no generated files behind
/// in the temporary directory it would have used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bench_that_cannot_start_leaves_no_files_behind() {
    let az = shared_azurite();
    let relay = RelayHandle::start(az.storage(), RelayOptions::default());
    let dir = Scratch::new("benchazcstart");
    let tmp = dir.path("tmp");
    std::fs::create_dir_all(&tmp).expect("mkdir");
    let tmp_s = tmp.to_string_lossy().into_owned();
    let no_azcopy = dir.path("no-such-azcopy").to_string_lossy().into_owned();
    let cases = [
        ("--no-azcopy", String::new(), "ftp://not-storage"),
        ("--azcopy", no_azcopy, &*az.url()),
    ];
    for (flag, value, url) in cases {
        let mut args: Vec<String> = bench_args(&relay, "c/p", &dir.path("unused"), 1)
            .into_iter()
            .take_while(|a| a != "--workdir")
            .collect();
        args.push(flag.into());
        if !value.is_empty() {
            args.push(value.clone());
        }
        let mut env = bench_env(TOKEN, url);
        env.extend([("TMPDIR", &*tmp_s)]);
        let out = run_client(&args, &env, T).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains("relay-client: bench: "), "{err}");
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{flag}: left behind {left:?}");
    }
}
