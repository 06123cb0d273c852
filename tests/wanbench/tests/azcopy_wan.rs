//! The AzCopy rows of the WAN-lab bench, end to end through the lab: the
//! `wanbench` binary runs AzCopy (the pinned npm binary) up and down over an
//! emulated 50 ms, 0.1 %-loss link with the site's (or, downloading, the
//! cloud's) TCP controller pinned, defaults and tuned, one file and many, and
//! every row must verify (each blob downloaded in the cloud namespace and
//! hashed, each downloaded file hashed on disk), record how AzCopy ran and be
//! timed to its job's end, at most its process's time. Nothing asserts a rate
//! or a time; the measured matrix is the lead's (docs/BENCHMARKS.md). Needs
//! root and /dev/net/tun; prints SKIPPED otherwise.

use std::process::Command;
use std::time::{Duration, Instant};

use relay_tests::binary;
use relay_tests::files::Scratch;

#[test]
fn azcopy_rows_run_through_the_lab_and_verify() {
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED azcopy_wan: {e:#}");
        return;
    }
    let azcopy = relay_tests::azcopy::azcopy_bin();
    let relay_server = binary("relay-server");
    binary("relay-client");
    let bin_dir = relay_server
        .parent()
        .unwrap_or_else(|| panic!("no bin dir"));
    let dir = Scratch::new("azcopy-wan");
    let methods = "azcopy-cubic,azcopy-tuned-bbr,azcopy-dl-bbr,azcopy-tuned-dl-cubic";
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wanbench"));
    cmd.args(["--profiles", "50/0.001/100", "--methods", methods])
        .args(["--workloads", "1x8MiB,12x64KiB", "--repeats", "1"])
        .args(["--cap-seconds", "300", "--strict"])
        .arg("--azcopy")
        .arg(&azcopy)
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(dir.path("out"))
        .arg("--work-dir")
        .arg(dir.path("work"));
    let err = dir.path("wanbench.err");
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap_or_else(|e| panic!("{e}")));
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("wanbench: {e}"));
    let t0 = Instant::now();
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(900) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wanbench did not finish (a bound against hangs only)");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "wanbench failed:\n{stderr}");
    let text = std::fs::read_to_string(dir.path("out").join("results.json"))
        .unwrap_or_else(|e| panic!("results.json: {e}\n{stderr}"));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("results.json: {e}"));
    assert_eq!(rows.len(), 8, "{text}");
    for r in &rows {
        let method = r["method"].as_str().unwrap_or_default();
        assert_eq!(r["verified"], true, "{r}");
        let cc = if method.contains("cubic") {
            "tcp:cubic"
        } else {
            "tcp:bbr"
        };
        assert_eq!(r["congestion"], cc, "{r}");
        let a = &r["azcopy"];
        assert_eq!(a["version"], "10.32.2", "{r}");
        assert_eq!(a["job_end_logged"], true, "{r}");
        let tuned = method.contains("tuned");
        assert_eq!(a["tuning"], if tuned { "tuned" } else { "defaults" }, "{r}");
        let (s, p) = (r["seconds"].as_f64(), a["process_seconds"].as_f64());
        assert!(s.zip(p).is_some_and(|(s, p)| s > 0.0 && s <= p), "{r}");
        assert!(r["client_cpu_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        if !method.contains("-dl-") {
            let block = if tuned { 16 << 20 } else { 8 << 20 };
            assert_eq!(a["block_size_bytes"], block, "{r}");
        }
    }
    // The verified runs' AzCopy logs are not kept.
    let logs = dir.path("work").join("logs-50ms-0.1--100M");
    let kept: Vec<_> = std::fs::read_dir(&logs)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !kept
            .iter()
            .any(|n| n.to_string_lossy().ends_with(".azcopy")),
        "{kept:?}"
    );
}
