//! `download --direct` keeps as many ranges in flight per file as the path
//! wants (`direct_sizing::ranges`: 8 near storage, as an upload's requests),
//! not a fixed 4, and the file still comes back whole. Deterministic: the
//! fault proxy holds every ranged read, so no range completes, and so no
//! further one is asked for, until the test has counted them.

use std::net::SocketAddr;
use std::time::Duration;

use relay_tests::DEV_KEY;
use relay_tests::azurite::shared_azurite;
use relay_tests::download_client::{T, args_via, s, setup, upload};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::{client_command, stderr};

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_download_keeps_the_paths_ranges_in_flight() {
    let (relay, c) = setup("dldirect", None).await;
    let src = Scratch::new("dldirect-src");
    // Sixteen ranges of 4 MiB.
    let sha = write_random(&src.path("big.bin"), 64 * MIB, 3);
    upload(&relay, &src.path("big.bin"), &c).await;
    let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
    let proxy = FaultProxy::start(azurite, Schedule::seeded(5)).await;
    proxy.hold(Op::GetBlob);
    let way = s(&[
        "--direct",
        "--storage-url",
        &proxy.url(),
        "--account-key",
        DEV_KEY,
    ]);
    let out_dir = Scratch::new("dldirect-out");
    let args = args_via(&way, &[&format!("{c}/big.bin")], &out_dir.0, &[]);
    // No read is given up while it is held (a retry would be one more request).
    let child = client_command(&args, &[("RELAY_STORAGE_STALL_TIMEOUT", "10m")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    // Loopback is near storage: 8 ranges, all asked for before any answer
    // (a client keeping fewer never gets there: a minute is a hang detector).
    proxy.wait_held(8, Duration::from_secs(60)).await;
    assert_eq!(proxy.stats.requests_of(Op::GetBlob), 8);
    proxy.release();
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the download did not end"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("4 MiB ranges, 8 in flight per file"),
        "{}",
        stderr(&out)
    );
    assert!(proxy.stats.requests_of(Op::GetBlob) >= 16);
    assert_eq!(sha256_file(&out_dir.path("big.bin")), sha);
    relay.stop().await;
}

/// Files in flight share `--memory-budget`: with room for two ranges in all,
/// four files of three ranges each still all come back whole (a file waits
/// for memory only while it holds none, so no two wait for each other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tight_memory_budget_still_brings_every_file_back() {
    let (relay, c) = setup("dltight", None).await;
    let src = Scratch::new("dltight-src");
    let mut want = Vec::new();
    for i in 0..4u64 {
        let name = format!("f{i}.bin");
        want.push((
            name.clone(),
            write_random(&src.path(&format!("d/{name}")), 10 * MIB, i),
        ));
    }
    upload(&relay, &src.path("d"), &c).await;
    let way = s(&[
        "--direct",
        "--storage-url",
        &shared_azurite().url(),
        "--account-key",
        DEV_KEY,
        "--memory-budget",
        "8MiB",
    ]);
    let out_dir = Scratch::new("dltight-out");
    let args = args_via(&way, &[&format!("{c}/d")], &out_dir.0, &[]);
    let out = relay_tests::run_client(&args, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("2 in flight per file"),
        "{}",
        stderr(&out)
    );
    let got: Vec<(String, String)> = want
        .iter()
        .map(|(name, _)| {
            (
                name.clone(),
                sha256_file(&out_dir.path(&format!("d/{name}"))),
            )
        })
        .collect();
    assert_eq!(got, want);
    relay.stop().await;
}
