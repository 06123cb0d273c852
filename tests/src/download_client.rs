//! What `tests/it/download/end_to_end.rs` shares: a relay whose token may read, the
//! client's `download` command lines (through a relay or `--direct`), blobs
//! put into Azurite under any name, the tree of files a download wrote, and a
//! small tmpfs in a mount namespace of the client's own.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::azurite::shared_azurite;
use crate::blobs::new_container;
use crate::files::{sha256_file, write_random};
use crate::gate::Gate;
use crate::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use crate::{run_client, stderr, summary};
use relay_server::TestHooks;

pub const T: Duration = Duration::from_secs(180);

pub fn s(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A relay whose limited token may read and write a fresh container.
pub async fn setup(tag: &str, rate_mbit: Option<f64>) -> (RelayHandle, String) {
    setup_with(tag, rate_mbit, TestHooks::default()).await
}

/// A relay whose fetches stop once they have sent their first range, until
/// the test releases the gate: a download provably mid-file, without timing
/// (what the test does meanwhile cannot race the download's end).
pub async fn setup_gated(tag: &str) -> (RelayHandle, String, Arc<Gate>) {
    let gate = Gate::new(1);
    let hooks = TestHooks {
        fetch_pace: Some(gate.pace()),
        ..TestHooks::default()
    };
    let (relay, c) = setup_with(tag, None, hooks).await;
    (relay, c, gate)
}

/// As `setup`, with the relay's test hooks (a `Gate` on its fetches, say).
pub async fn setup_with(
    tag: &str,
    rate_mbit: Option<f64>,
    hooks: TestHooks,
) -> (RelayHandle, String) {
    let container = new_container(tag).await;
    let opts = RelayOptions {
        hooks,
        limited_to: format!("{container}:rw"),
        configure: rate_mbit.map(|r| {
            Box::new(move |cfg: &mut relay_server::Config| {
                cfg.listen.windows.max_rate_mbit = Some(r)
            }) as crate::relay::Configure
        }),
        ..RelayOptions::default()
    };
    (
        RelayHandle::start(shared_azurite().storage(), opts),
        container,
    )
}

pub fn relay_flags(relay: &RelayHandle) -> Vec<String> {
    s(&[
        "--relay",
        &relay.addr.to_string(),
        "--relay-cert-sha256",
        &relay.fingerprint,
        "--token",
        LIMITED_TOKEN,
    ])
}

pub async fn upload(relay: &RelayHandle, path: &Path, to: &str) {
    let mut a = s(&[
        "upload",
        path.to_str().unwrap_or_default(),
        "--to",
        to,
        "--json",
    ]);
    a.extend(relay_flags(relay));
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "upload: {}", stderr(&out));
}

pub fn download_args(
    relay: &RelayHandle,
    sources: &[&str],
    to: &Path,
    extra: &[&str],
) -> Vec<String> {
    args_via(&relay_flags(relay), sources, to, extra)
}

/// `download` through `way` (a relay's flags, or `direct_flags()`).
pub fn args_via(way: &[String], sources: &[&str], to: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = s(&["download"]);
    a.extend(s(sources));
    a.extend(s(&["--to", to.to_str().unwrap_or_default(), "--json"]));
    a.extend(s(extra));
    a.extend(way.iter().cloned());
    a
}

pub async fn download(
    relay: &RelayHandle,
    sources: &[&str],
    to: &Path,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let out = run_client(&download_args(relay, sources, to, extra), &[], T).await;
    let v = summary(&out);
    (out, v)
}

/// Every file under `dir` (relative path, SHA-256), sorted; links are listed
/// as links, never followed.
pub fn tree(dir: &Path) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap_or(&p).display().to_string();
            let ft = e.file_type().unwrap_or_else(|e| panic!("{e}"));
            if ft.is_symlink() {
                out.push((rel, "link".into()));
            } else if ft.is_dir() {
                walk(base, &p, out);
            } else {
                out.push((rel, sha256_file(&p)));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

pub fn files_of(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["files"].as_array().cloned().unwrap_or_default()
}

/// A folder of files: nested, empty, one of several blocks.
pub fn make_data(root: &Path) -> Vec<(String, String)> {
    let mut want = Vec::new();
    for i in 0..12u64 {
        let rel = format!("d{}/s{}/f{i}.bin", i % 3, i % 2);
        want.push((
            rel.clone(),
            write_random(&root.join(&rel), 1000 + i * 4097, i),
        ));
    }
    std::fs::write(root.join("empty.txt"), b"").unwrap_or_else(|e| panic!("{e}"));
    want.push(("empty.txt".into(), sha256_file(&root.join("empty.txt"))));
    let big = "big.bin";
    want.push((
        big.into(),
        write_random(&root.join(big), (9 << 20) + 77, 99),
    ));
    want.sort();
    want
}

/// Puts a blob straight into Azurite under any name (percent-encoded byte by
/// byte, so nothing on the way normalizes `..` or `//`).
pub async fn put_raw(container: &str, name: &str, body: &[u8]) {
    let az = shared_azurite();
    let sas = relay_storage::sas::account_sas(
        crate::DEV_ACCOUNT,
        crate::DEV_KEY,
        time::OffsetDateTime::now_utc(),
        time::Duration::hours(1),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut path = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            path.push(b as char);
        } else if b == b'/' && !path.is_empty() && !path.ends_with('/') {
            path.push('/');
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    let url = format!("{}/{container}/{path}?{sas}", az.url());
    let resp = reqwest::Client::new()
        .put(&url)
        .header("x-ms-blob-type", "BlockBlob")
        .header("x-ms-version", "2021-08-06")
        .body(body.to_vec())
        .send()
        .await
        .unwrap_or_else(|e| panic!("put {name:?}: {e}"));
    assert!(
        resp.status().is_success(),
        "put {name:?}: {}",
        resp.status()
    );
}

/// Runs the client in a mount namespace of its own with a small tmpfs at
/// `dir` (`ro`: read-only); `None` when this test cannot (not root, no unshare).
pub async fn in_tmpfs(args: &[String], dir: &Path, opts: &str) -> Option<std::process::Output> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let bin = crate::binary("relay-client");
    let script = format!("mount -t tmpfs -o {opts} tmpfs \"$1\" || exit 97; shift; exec \"$@\"");
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.arg("-m")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(dir)
        .arg(bin)
        .args(args);
    cmd.env(
        "RELAY_PATH_CACHE",
        std::env::temp_dir().join("blob-relay-tests-dl-paths.json"),
    );
    cmd.env_remove("RELAY_TOKEN");
    let out = tokio::time::timeout(T, cmd.output()).await.ok()?.ok()?;
    (out.status.code() != Some(97)).then_some(out)
}

pub fn direct_flags() -> Vec<String> {
    direct_flags_at(&shared_azurite().url())
}

/// Direct mode to the development account at `url` (a fault proxy's, say).
pub fn direct_flags_at(url: &str) -> Vec<String> {
    s(&[
        "--direct",
        "--storage-url",
        url,
        "--account-key",
        crate::DEV_KEY,
    ])
}
