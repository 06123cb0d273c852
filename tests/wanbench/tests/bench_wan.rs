//! `relay-client bench` in the WAN lab: the client in the site namespace, Azurite
//! and a relay-server process in the cloud namespace, a 50 ms RTT, 100 Mbit/s
//! emulated link between them that the relay's QUIC, the direct upload's HTTP
//! and AzCopy's (`--azcopy`, with a SAS the bench signs) all cross. Every
//! method must verify, the relay run must report the link's round trip, and
//! the bench must delete what it wrote. Needs root and /dev/net/tun; prints
//! SKIPPED otherwise.

use wanbench::cloud;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile, Side};
use relay_tests::files::Scratch;
use relay_tests::{DEV_KEY, binary};

const CONTAINER: &str = "bench-wan";

#[test]
fn bench_measures_relay_and_direct_across_the_emulated_link() {
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED bench_wan: {e:#}");
        return;
    }
    let lab =
        Lab::start(LinkProfile::new(50.0, 0.0, 100.0)).unwrap_or_else(|e| panic!("lab: {e:#}"));
    let dir = Scratch::new("bench-wan");
    let bins = cloud::CloudBins {
        storage: cloud::StorageBin::Azurite(relay_tests::azurite::azurite_bin()),
        relay_server: binary("relay-server"),
        storage_cpus: None,
    };
    let cloud = cloud::Cloud::start(&lab, &bins, "relay", None, &dir.0)
        .unwrap_or_else(|e| panic!("cloud: {e:#}"));
    cloud::ensure_container(&lab, CONTAINER).unwrap_or_else(|e| panic!("container: {e:#}"));

    let out = dir.path("bench.json");
    let mut cmd = Command::new(binary("relay-client"));
    cmd.args(["bench", "--relay", &cloud.relay_addr.to_string()])
        .args(["--relay-cert-sha256", &cloud.fingerprint])
        .args(["--to", &format!("{CONTAINER}/wan")])
        .args([
            "--large-size",
            "8MiB",
            "--small-count",
            "8",
            "--small-size",
            "64KiB",
        ])
        .args(["--runs", "1", "--connections", "4", "--json"])
        .args(["--storage-url", &cloud::Cloud::storage_url_from_site(&lab)])
        .args(["--account-key", DEV_KEY])
        .arg("--azcopy")
        .arg(relay_tests::azcopy::azcopy_bin())
        .arg("--workdir")
        .arg(dir.path("work"))
        .env("RELAY_TOKEN", cloud::TOKEN)
        .env("RELAY_ID_KEY_FILE", dir.path("direct-id.key"))
        // AzCopy keeps its pid files in ~/.azcopy: the test's own.
        .env("HOME", dir.path("home"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap_or_else(|e| panic!("{e}")))
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap_or_else(|e| panic!("{e}")));
    cloud::strip_proxies(&mut cmd);
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = lab
        .spawn_in(Side::Site, cmd)
        .unwrap_or_else(|e| panic!("client: {e:#}"));
    let t0 = Instant::now();
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("bench did not finish (a bound against hangs only)");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    eprintln!("{report:#}");
    assert_eq!(status.code(), Some(0), "{stderr}\n{report}");
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 3, "{report}");
    for r in &rows {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert!(rows.iter().any(|r| r["method"] == "azcopy"), "{report}");
    assert!(
        report["ratio_relay_azcopy"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    assert!(!stdout.contains("sig="), "{stdout}");
    let relay = rows
        .iter()
        .find(|r| r["method"] == "relay")
        .cloned()
        .unwrap_or_default();
    // QUIC saw the emulated path: at least its 50 ms of propagation delay.
    let rtt = relay["quic"]["rtt_ms"].as_f64().unwrap_or(0.0);
    assert!(rtt >= 45.0, "RTT {rtt} ms on a 50 ms link: {relay}");
    assert_eq!(report["deleted"], 3 * 9, "{report}");
    // It says which TCP congestion control its direct runs had: the site
    // namespace's default for new sockets.
    let site_cc = lab
        .run_in(Side::Site, || {
            Ok(std::fs::read_to_string(
                "/proc/sys/net/ipv4/tcp_congestion_control",
            )?)
        })
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        report["direct_tcp_congestion"].as_str(),
        Some(site_cc.trim()),
        "{report}"
    );
}
