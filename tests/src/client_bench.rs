//! `relay-client bench` as the end-to-end tests run it: a command line at a
//! size CI can afford, and the environment that points it at Azurite.

use std::path::Path;

use crate::relay::RelayHandle;

/// `bench` through `relay` into `to`: one 9 MB file and five of 3 KiB, `runs`
/// runs over 4 connections, its files in `work`. `--workdir` comes last, so a
/// test can cut the line there.
pub fn bench_args(relay: &RelayHandle, to: &str, work: &Path, runs: u32) -> Vec<String> {
    let mut args: Vec<String> = [
        "bench",
        "--relay",
        &relay.addr.to_string(),
        "--relay-cert-sha256",
        &relay.fingerprint,
        "--to",
        to,
        "--large-size",
        "9MB",
        "--small-size",
        "3KiB",
        "--small-count",
        "5",
        "--runs",
        &runs.to_string(),
        "--connections",
        "4",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--workdir".to_string(), work.to_string_lossy().into_owned()]);
    args
}

/// The relay token, the storage account's URL and Azurite's key, as the
/// bench reads them from its environment.
pub fn bench_env<'a>(token: &'a str, storage_url: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("RELAY_TOKEN", token),
        ("RELAY_STORAGE_URL", storage_url),
        ("RELAY_ACCOUNT_KEY", crate::DEV_KEY),
    ]
}
