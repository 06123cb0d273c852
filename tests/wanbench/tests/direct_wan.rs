//! Direct mode in the WAN lab: direct upload over a 200 ms RTT, 1 % loss, 200
//! Mbit/s path with the client's TCP pinned to CUBIC (the default of Windows,
//! macOS and most Linux installations). Before progress-based deadlines, a 48
//! MiB `relay-client upload --direct` here never finished: each 16 MiB Put
//! Block had to finish within 15 s + 1 s per MiB, which no CUBIC connection on
//! this path can, so every block was abandoned and sent again, forever.
//!
//! Now the upload must finish, verified by a download inside the cloud
//! namespace, with no request given up while its body still moved (the
//! client's own count, `abandoned.while_moving` in its JSON report). It runs as
//! the fallback a user whose UDP is blocked gets: `--fallback direct` with a
//! relay address where nothing answers over UDP, so the same run checks that
//! the client says it fell back (`--direct` itself: tests/it/upload/end_to_end.rs). Nothing
//! here asserts a time or a rate: how long it takes depends on the shared
//! machine; the bound on the wait is against hangs only. The 512 MiB runs,
//! BBR, 100 ms / 0.5 %, and the comparison with plain TCP flows are in the
//! bench (docs/bench/direct-honest/). Needs root and /dev/net/tun; prints
//! SKIPPED otherwise.

use wanbench::{cloud, tcp_cc};

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile, Side};
use relay_tests::files::{Scratch, write_random};
use relay_tests::{DEV_KEY, binary};

const MIB: u64 = 1 << 20;
const CONTAINER: &str = "direct-wan";

#[test]
fn fallback_direct_over_cubic_at_200ms_1pct_finishes_without_abandoning_moving_requests() {
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED direct_wan: {e:#}");
        return;
    }
    let _allow = tcp_cc::AllowGuard::ensure(&["cubic"]).unwrap_or_else(|e| panic!("{e:#}"));
    let lab =
        Lab::start(LinkProfile::new(200.0, 0.01, 200.0)).unwrap_or_else(|e| panic!("lab: {e:#}"));
    tcp_cc::pin_site(&lab, "cubic").unwrap_or_else(|e| panic!("{e:#}"));
    let dir = Scratch::new("direct-wan");
    let bins = cloud::CloudBins {
        storage: cloud::StorageBin::Azurite(relay_tests::azurite::azurite_bin()),
        relay_server: binary("relay-server"),
        storage_cpus: None,
    };
    let cloud = cloud::Cloud::start(&lab, &bins, "relay", None, &dir.0)
        .unwrap_or_else(|e| panic!("cloud: {e:#}"));
    cloud::ensure_container(&lab, CONTAINER).unwrap_or_else(|e| panic!("container: {e:#}"));

    let file = dir.path("f48.bin");
    let sha = write_random(&file, 48 * MIB, 37);
    let out = dir.path("upload.json");
    let err = dir.path("upload.err");
    let mut cmd = Command::new(binary("relay-client"));
    // The relay's host, a port where nothing listens: no QUIC answer.
    let dead_relay = format!("{}:4999", cloud.relay_addr.ip());
    cmd.arg("upload")
        .arg(&file)
        .args(["--relay", &dead_relay, "--connect-timeout", "3"])
        .args(["--relay-cert-sha256", &cloud.fingerprint])
        .args(["--fallback", "direct", "--json"])
        .args(["--storage-url", &cloud::Cloud::storage_url_from_site(&lab)])
        .args(["--to", &format!("{CONTAINER}/cubic")])
        .env("RELAY_TOKEN", cloud::TOKEN)
        .env("RELAY_ACCOUNT_KEY", DEV_KEY)
        .env("RELAY_ID_KEY_FILE", dir.path("direct-id.key"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap_or_else(|e| panic!("{e}")))
        .stderr(std::fs::File::create(&err).unwrap_or_else(|e| panic!("{e}")));
    cloud::strip_proxies(&mut cmd);
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let t0 = Instant::now();
    let mut child = lab
        .spawn_in(Side::Site, cmd)
        .unwrap_or_else(|e| panic!("client: {e:#}"));
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        // A bound against hangs only: the old client never finished at all.
        if t0.elapsed() > Duration::from_secs(900) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "direct upload did not finish in 900 s: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    let f = &report["files"][0];
    eprintln!(
        "direct_wan: {:.1} s, {} MiB blocks x {} in flight (storage RTT {} ms), retries {}, abandoned {}\n{stderr}",
        report["totals"]["seconds"].as_f64().unwrap_or(0.0),
        report["direct"]["block_size_bytes"].as_u64().unwrap_or(0) >> 20,
        report["direct"]["connections"],
        report["direct"]["storage_rtt_ms"],
        f["retries"],
        f["abandoned"],
    );
    assert_eq!(status.code(), Some(0), "{stderr}\n{report}");
    assert!(
        stderr.contains("falling back to direct upload (--fallback direct)"),
        "{stderr}"
    );
    assert_eq!(report["mode"], "direct", "{report}");
    assert_eq!(report["direct"]["fell_back"], true, "{report}");
    assert_eq!(f["status"], "committed", "{report}");
    assert_eq!(f["sha256"], sha.as_str(), "{report}");
    // The request watch saw every attempt; none ended while its body moved.
    assert_eq!(f["abandoned"]["while_moving"], 0, "{report}");
    // The sizing came from the measured path: far, so AzCopy's 8 MiB blocks.
    assert!(
        report["direct"]["storage_rtt_ms"].as_f64().unwrap_or(0.0) >= 190.0,
        "{report}"
    );
    assert_eq!(report["direct"]["block_size_bytes"], 8 * MIB, "{report}");
    // And what storage holds is the file.
    let blob = f["blob"].as_str().unwrap_or_default().to_string();
    let ok = cloud::verify_blobs(&lab, CONTAINER, vec![(blob, sha.clone())])
        .unwrap_or_else(|e| panic!("verify: {e:#}"));
    assert_eq!(
        ok,
        vec![true],
        "the committed blob hashes to the file's SHA-256"
    );
}
