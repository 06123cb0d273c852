//! Test harness: a real Azurite per test process, real relays on loopback QUIC, the
//! real `relay-client` binary, and real files. Shared by the end-to-end tests, the
//! demo and the loopback benchmark.

pub mod azurite;
pub mod blobs;
pub mod files;
pub mod proxy;
pub mod relay;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

/// Azurite's well-known development account and key (public, emulator only).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The workspace's target directory holding the binaries (next to this test binary).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary; builds it once if it is missing (the test command
/// builds all binaries first, so this is a fallback for `cargo test` alone).
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = if bin_dir().ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        let status = std::process::Command::new(cargo)
            .args(["build", "--bin", name])
            .args(profile)
            .status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "could not build {name}; run `cargo build --workspace --bins` first"
        );
    }
    path
}

/// Runs the real `relay-client` with `args`, bounded in time.
pub async fn run_client(args: &[String], envs: &[(&str, &str)], timeout: Duration) -> Output {
    let mut cmd = tokio::process::Command::new(binary("relay-client"));
    cmd.args(args).kill_on_drop(true);
    // Only what the test passes: never a token from the caller's environment.
    cmd.env_remove("RELAY_TOKEN");
    // Keep the tests' path estimates (warm start) out of the user's cache.
    cmd.env(
        "RELAY_PATH_CACHE",
        std::env::temp_dir().join(format!(
            "blob-relay-tests-paths-{}.json",
            std::process::id()
        )),
    );
    // Direct mode's key (resume and seals) per test process, not in $HOME.
    cmd.env(
        "RELAY_ID_KEY_FILE",
        std::env::temp_dir().join(format!(
            "blob-relay-tests-direct-{}.key",
            std::process::id()
        )),
    );
    for (k, v) in envs {
        cmd.env(k, v);
    }
    match tokio::time::timeout(timeout, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("cannot run relay-client: {e}"),
        Err(_) => panic!("relay-client did not finish within {timeout:?}"),
    }
}

/// The JSON summary a `--json` run printed.
pub fn summary(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A fresh, unique container name for one test.
pub fn unique_container(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(30)
        .collect();
    format!("t{}-{tag}-{n}", std::process::id())
}
