//! `relay-client ls` end to end: through the relay (the SHA-256 it vouches
//! for, abbreviated, or `-`), `--json` (full SHA-256), `--one-level` (each
//! folder once), `--direct` (nothing vouched for), and a refused grant.

use relay_tests::blobs::new_container;
use relay_tests::download_client::{T, direct_flags, put_raw, relay_flags, s, upload};
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, stderr};

/// A relay whose limited token reads and writes a fresh container, and in
/// it `l/sealed.bin` (uploaded through the relay), `l/d/one`, `l/d/two`
/// and `l/raw` (straight to storage), and `l2/x` (outside the source).
async fn listed_container(tag: &str) -> (RelayHandle, String, String) {
    let c = new_container(tag).await;
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: format!("{c}:rw"),
            ..Default::default()
        },
    );
    let dir = Scratch::new(tag);
    let path = dir.path("sealed.bin");
    let sha = write_random(&path, 2048, 7);
    upload(&relay, &path, &format!("{c}/l")).await;
    put_raw(&c, "l/d/one", b"1").await;
    put_raw(&c, "l/d/two", b"22").await;
    put_raw(&c, "l/raw", b"333").await;
    put_raw(&c, "l2/x", b"4444").await;
    (relay, c, sha)
}

fn ls_args(way: &[String], source: &str, extra: &[&str]) -> Vec<String> {
    let mut a = s(&["ls", source]);
    a.extend(s(extra));
    a.extend(way.iter().cloned());
    a
}

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Text: one line per blob under the source (not `l2/`), the relay's
/// SHA-256 abbreviated for the blob it committed and `-` for the others,
/// then the total; `--one-level` shows `l/d/` once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_lists_every_blob_and_what_the_relay_vouches_for() {
    let (relay, c, sha) = listed_container("lstext").await;
    let way = relay_flags(&relay);
    let out = run_client(&ls_args(&way, &format!("{c}/l"), &[]), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let got = lines(&out);
    assert_eq!(got.len(), 5, "{got:?}");
    let line = |name: &str| {
        got.iter()
            .find(|l| l.ends_with(&format!("  {name}")))
            .unwrap_or_else(|| panic!("no {name}: {got:?}"))
            .clone()
    };
    assert!(line("l/sealed.bin").contains(&format!("  {}  ", &sha[..12])));
    assert!(line("l/sealed.bin").trim_start().starts_with("2048 "));
    for raw in ["l/d/one", "l/d/two", "l/raw"] {
        assert!(line(raw).contains("  -  "), "{}", line(raw));
    }
    assert_eq!(got[4], "total: 4 blobs, 2054 bytes (2.0 KiB)", "{got:?}");

    let out = run_client(&ls_args(&way, &format!("{c}/l"), &["--one-level"]), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let got = lines(&out);
    let names: Vec<&str> = got
        .iter()
        .filter(|l| !l.starts_with("total"))
        .filter_map(|l| l.rsplit("  ").next())
        .collect();
    assert_eq!(names, ["l/d/", "l/raw", "l/sealed.bin"], "{got:?}");
    relay.stop().await;
}

/// `--json`: one object per line, the full SHA-256 for the sealed blob and
/// null for the others, a folder with `--one-level`, the total last; with
/// `--direct`, the same blobs and nothing vouched for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_json_through_the_relay_and_direct() {
    let (relay, c, sha) = listed_container("lsjson").await;
    let parse = |out: &std::process::Output| -> Vec<serde_json::Value> {
        assert!(out.status.success(), "{}", stderr(out));
        lines(out)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let args = ls_args(&relay_flags(&relay), &format!("{c}/l"), &["--json"]);
    let v = parse(&run_client(&args, &[], T).await);
    assert_eq!(v.len(), 5);
    let sealed = v.iter().find(|o| o["name"] == "l/sealed.bin").cloned();
    let sealed = sealed.unwrap_or_default();
    assert_eq!(sealed["sha256"], sha.as_str());
    assert_eq!(sealed["size"], 2048);
    assert!(sealed["etag"].as_str().is_some_and(|e| !e.is_empty()));
    let raw = v
        .iter()
        .find(|o| o["name"] == "l/raw")
        .cloned()
        .unwrap_or_default();
    assert!(raw["sha256"].is_null());
    assert_eq!(
        v[4],
        serde_json::json!({"type": "total", "blobs": 4, "bytes": 2054})
    );

    let args = ls_args(
        &relay_flags(&relay),
        &format!("{c}/l"),
        &["--json", "--one-level"],
    );
    let v = parse(&run_client(&args, &[], T).await);
    assert_eq!(v[0]["type"], "folder");
    assert_eq!(
        (v[0]["name"].as_str(), v[0]["blobs"].as_u64()),
        (Some("l/d/"), Some(2))
    );

    let args = ls_args(&direct_flags(), &format!("{c}/l"), &["--json"]);
    let v = parse(&run_client(&args, &[], T).await);
    let names: Vec<&str> = v.iter().filter_map(|o| o["name"].as_str()).collect();
    assert_eq!(names, ["l/d/one", "l/d/two", "l/raw", "l/sealed.bin"]);
    assert!(v.iter().all(|o| o["sha256"].is_null()), "{v:?}");
    relay.stop().await;
}

/// A token that may not read the container is refused: exit 2, a message
/// that says so, no total printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_without_a_read_grant_is_refused() {
    let (relay, c, _) = listed_container("lsref").await;
    let mut way = relay_flags(&relay);
    let at = way.iter().position(|a| a == "--token").map_or(0, |i| i + 1);
    way[at] = TOKEN.into();
    let out = run_client(&ls_args(&way, &c, &[]), &[], T).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("may not read"), "{}", stderr(&out));
    assert!(lines(&out).is_empty());
    relay.stop().await;
}
