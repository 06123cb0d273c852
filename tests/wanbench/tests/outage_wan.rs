//! Outages in the WAN lab: the network goes away and comes back, the client's
//! address changes, the relay is replaced meanwhile; the upload rides it out.
//! On a real emulated path (200 ms RTT, 200 Mbit/s, client capped at 40 Mbit/s
//! so the events land mid-transfer) between the site namespace (relay-client)
//! and the cloud namespace (Azurite, relay-server processes).
//!
//! CI must not wait minutes, so the client runs with a short idle timeout
//! (2 s), connect timeout (1 s) and patience (60 s) and the outages last 10 s:
//! the same behaviour as the defaults (10 s, 5 s, 10 min) against a 90 s
//! outage, which the bench runs (docs/bench/wan-outage/, the ignored test
//! `default_values_ride_out_a_90_s_outage`). Every outage is longer than the
//! idle timeout plus several failed connection attempts.
//!
//! Each test asserts exit 0, the resumed bytes, every blob verified by
//! download, and that no byte crossed the link twice beyond one block per file
//! (the emulator's count of IP bytes from the site, against the files' sizes
//! plus one block each, plus QUIC's header overhead). Every wait is on an
//! observable condition with a generous bound; no assertion is on wall-clock
//! timing. Needs root and /dev/net/tun; prints SKIPPED otherwise.

#[allow(dead_code)]
mod wan_cloud;

use std::path::Path;
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile};
use relay_tests::files::{Scratch, write_random};
use serde_json::Value;
use wan_cloud::{
    Cloud, LABS, MIB, Proc, spawn_client, staged_blocks, verify, wait_blocks, wait_client,
};

const CONTAINER: &str = "outage-wan";
const BLOCK: u64 = 8 * MIB;
/// Longer than the idle timeout (2 s) plus several connection attempts.
const OUTAGE: Duration = Duration::from_secs(10);
/// QUIC and IP headers on the payload (about 4 % at a 1452-byte MTU, more
/// before MTU discovery), ACKs and handshakes: what the byte bound allows on top.
const OVERHEAD: f64 = 1.08;

/// The test configuration: short timeouts, so 10 s outages show what 90 s
/// ones do with the defaults.
fn short_weather(patience: &str) -> Vec<String> {
    [
        "--idle-timeout",
        "2s",
        "--connect-timeout",
        "1",
        "--patience",
        patience,
        "--block-size",
        "8MiB",
        "--max-rate",
        "40",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

struct Setup {
    // Field order is drop order: processes before the lab.
    cloud: Cloud,
    dir: Scratch,
    lab: Lab,
    t0: Instant,
}

fn setup(test: &str, nat: bool) -> Option<Setup> {
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED {test}: {e:#}");
        return None;
    }
    let lab = Lab::start(LinkProfile {
        nat,
        ..LinkProfile::new(200.0, 0.0, 200.0)
    })
    .unwrap_or_else(|e| panic!("lab: {e:#}"));
    let dir = Scratch::new(test);
    let cloud = Cloud::start(&lab, &dir.0, CONTAINER);
    Some(Setup {
        cloud,
        dir,
        lab,
        t0: Instant::now(),
    })
}

impl Setup {
    fn client(&self, paths: &[&Path], extra: &[&str], out: &str) -> (Proc, std::path::PathBuf) {
        self.client_patient(paths, "60s", extra, out)
    }

    fn client_patient(
        &self,
        paths: &[&Path],
        patience: &str,
        extra: &[&str],
        out: &str,
    ) -> (Proc, std::path::PathBuf) {
        let mut args = self.cloud.client_args(&self.lab, paths);
        args.extend(short_weather(patience));
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = self.dir.path(out);
        (spawn_client(&self.lab, &args, &out), out)
    }

    /// No byte crossed twice beyond one block per file: IP bytes from the site
    /// at most (each file's size plus the smaller of its size and a block)
    /// plus overhead. A file resent from zero would break it.
    fn assert_no_resend(&self, sizes: &[u64]) {
        let sent = self.lab.stats().site_to_cloud.forwarded_bytes;
        let bound: u64 = sizes.iter().map(|s| s + s.min(&BLOCK)).sum();
        let bound = (bound as f64 * OVERHEAD) as u64 + 256 * 1024;
        let payload: u64 = sizes.iter().sum();
        assert!(
            sent <= bound,
            "{sent} IP bytes from the site for {payload} bytes of files: more than one block \
             per file sent twice (bound {bound})"
        );
    }

    /// Neither the client's nor the relay's log has an ANSI escape: both
    /// write to files here.
    fn assert_plain_logs(&self, client_err: &str) {
        assert!(
            !client_err.contains('\x1b'),
            "ANSI escapes in the client's log: {client_err:?}"
        );
        let relay = self.cloud.relay_err();
        assert!(
            !relay.contains('\x1b'),
            "ANSI escapes in the relay's log: {relay:?}"
        );
    }
}

/// `--json-lines` output: every event.
fn events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn file_events(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["event"] == "file")
        .map(|e| &e["file"])
        .collect()
}

/// A 40 MiB file loses its link for 10 s after its first 8 MiB block is
/// staged: the client says so, waits, reconnects, resumes from the staged
/// prefix on a new connection, and the outage costs no attempt (`--attempts 1`).
#[test]
fn outage_mid_file_resumes_from_the_staged_prefix() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("outfile", false) else {
        return;
    };
    let size = 40 * MIB;
    let file = s.dir.path("outfile.bin");
    let sha = write_random(&file, size, 32);
    let (mut c, out) = s.client(&[&file], &["--attempts", "1", "--json-lines"], "run");
    wait_blocks(&s.lab, CONTAINER, "outfile.bin", 1, &mut c);
    let cut = s.lab.outage();
    std::thread::sleep(OUTAGE);
    cut.end();
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}\n{stdout}");
    let ev = events(&stdout);
    let network: Vec<&str> = ev
        .iter()
        .filter(|e| e["event"] == "network")
        .filter_map(|e| e["state"].as_str())
        .collect();
    assert_eq!(network.first(), Some(&"unreachable"), "{stdout}");
    assert_eq!(network.last(), Some(&"reachable"), "{stdout}");
    assert!(
        stderr.contains("unreachable for") && stderr.contains("reachable again after"),
        "{stderr}"
    );
    let files = file_events(&ev);
    let f = files[0];
    assert_eq!(f["status"], "committed", "{f}");
    assert_eq!(f["attempts"], 1, "the outage cost an attempt: {f}");
    assert!(f["reconnects"].as_u64() >= Some(1), "{f}");
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(
        resumed >= BLOCK && resumed.is_multiple_of(BLOCK),
        "resumed at {resumed}: {f}"
    );
    verify(
        &s.lab,
        CONTAINER,
        &[("outfile.bin".to_string(), sha.clone())],
    );
    assert_eq!(staged_blocks(&s.lab, CONTAINER, "outfile.bin"), 0);
    s.assert_no_resend(&[size]);
    s.assert_plain_logs(&stderr);
    println!(
        "outfile: {f} {} ({:.1} s)",
        s.lab.stats().to_json(),
        s.t0.elapsed().as_secs_f64()
    );
}

/// 300 small files and two of 24 MiB, all in flight when the link goes away:
/// every one finishes, none is reported failed, the large ones resume from
/// their staged blocks.
#[test]
fn outage_mid_directory_every_file_finishes() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("outdir", false) else {
        return;
    };
    let root = s.dir.path("outdir");
    std::fs::create_dir_all(root.join("small")).unwrap_or_else(|e| panic!("{e}"));
    let mut blobs = Vec::new();
    let mut sizes = Vec::new();
    for i in 0..2u64 {
        let name = format!("large-{i}.bin");
        let size = 24 * MIB;
        let sha = write_random(&root.join(&name), size, 100 + i);
        blobs.push((format!("outdir/{name}"), sha));
        sizes.push(size);
    }
    for i in 0..300u64 {
        let name = format!("small/s{i:03}.bin");
        // 1 KiB to about 200 KiB, spread.
        let size = 1024 + (i * 7919 % 200) * 1024;
        let sha = write_random(&root.join(&name), size, 1000 + i);
        blobs.push((format!("outdir/{name}"), sha));
        sizes.push(size);
    }
    let (mut c, out) = s.client(&[&root], &["--json"], "run");
    wait_blocks(&s.lab, CONTAINER, "outdir/large-0.bin", 1, &mut c);
    let cut = s.lab.outage();
    std::thread::sleep(OUTAGE);
    cut.end();
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(180));
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(v["totals"]["committed"], 302, "{}", v["totals"]);
    assert_eq!(v["totals"]["failed"], 0);
    let files = v["files"].as_array().cloned().unwrap_or_default();
    let reconnected = files
        .iter()
        .filter(|f| f["reconnects"].as_u64() >= Some(1))
        .count();
    assert!(reconnected >= 1, "no file went on after the outage");
    for f in files.iter().filter(|f| {
        f["blob"]
            .as_str()
            .is_some_and(|b| b.starts_with("outdir/large"))
    }) {
        assert_eq!(f["attempts"], 1, "{f}");
        let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
        assert!(resumed.is_multiple_of(BLOCK), "{f}");
    }
    let large0 = files
        .iter()
        .find(|f| f["blob"] == "outdir/large-0.bin")
        .unwrap_or_else(|| panic!("no report of large-0"));
    assert!(large0["bytes_resumed"].as_u64() >= Some(BLOCK), "{large0}");
    verify(&s.lab, CONTAINER, &blobs);
    s.assert_no_resend(&sizes);
    s.assert_plain_logs(&stderr);
    println!(
        "outdir: {} files, {reconnected} went on after the outage, {} ({:.1} s)",
        files.len(),
        s.lab.stats().to_json(),
        s.t0.elapsed().as_secs_f64()
    );
}

/// The relay is SIGKILLed during the outage and a new process started on the
/// same address with the same key and certificate; the upload resumes on it.
#[test]
fn relay_replaced_during_the_outage() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut s) = setup("outrelay", false) else {
        return;
    };
    let size = 40 * MIB;
    let file = s.dir.path("outrelay.bin");
    let sha = write_random(&file, size, 33);
    let (mut c, out) = s.client(&[&file], &["--attempts", "1", "--json"], "run");
    wait_blocks(&s.lab, CONTAINER, "outrelay.bin", 1, &mut c);
    let cut = s.lab.outage();
    let t = Instant::now();
    s.cloud.kill_relay();
    s.cloud.start_relay(&s.lab);
    std::thread::sleep(OUTAGE.saturating_sub(t.elapsed()));
    cut.end();
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    let f = &v["files"][0];
    assert_eq!(f["status"], "committed", "{f}");
    assert_eq!(f["attempts"], 1, "{f}");
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(
        resumed >= BLOCK && resumed.is_multiple_of(BLOCK),
        "resumed at {resumed}: {f}"
    );
    assert!(v["connections"].as_u64() >= Some(2), "{v}");
    verify(&s.lab, CONTAINER, &[("outrelay.bin".to_string(), sha)]);
    s.assert_no_resend(&[size]);
    s.assert_plain_logs(&stderr);
    println!("outrelay: {f} ({:.1} s)", s.t0.elapsed().as_secs_f64());
}

/// A NAT in front of the client rebinds its UDP port after the first block,
/// then moves it to another address after the second: the relay validates
/// the new path and the one QUIC connection carries on (no reconnect, nothing
/// resumed, one connection for the whole run).
#[test]
fn rebinding_port_then_address_keeps_the_connection() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("rebind", true) else {
        return;
    };
    let size = 40 * MIB;
    let file = s.dir.path("rebind.bin");
    let sha = write_random(&file, size, 34);
    let (mut c, out) = s.client(&[&file], &["--attempts", "1", "--json"], "run");
    wait_blocks(&s.lab, CONTAINER, "rebind.bin", 1, &mut c);
    s.lab
        .rebind_port()
        .unwrap_or_else(|e| panic!("rebind: {e:#}"));
    wait_blocks(&s.lab, CONTAINER, "rebind.bin", 2, &mut c);
    let moved = s
        .lab
        .rebind_address()
        .unwrap_or_else(|e| panic!("rebind: {e:#}"));
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    let f = &v["files"][0];
    assert_eq!(f["status"], "committed", "{f}");
    assert_eq!(f["attempts"], 1, "{f}");
    assert_eq!(f["bytes_resumed"], 0, "the transfer restarted: {f}");
    assert!(f.get("reconnects").is_none(), "{f}");
    assert_eq!(v["connections"], 1, "the connection did not migrate: {v}");
    verify(&s.lab, CONTAINER, &[("rebind.bin".to_string(), sha)]);
    s.assert_no_resend(&[size]);
    s.assert_plain_logs(&stderr);
    println!(
        "rebind: moved to {moved}; nat drops {:?}; {f} ({:.1} s)",
        s.lab.weather_drops(),
        s.t0.elapsed().as_secs_f64()
    );
}

/// The relay's name resolves elsewhere after the outage (the instance
/// replaced behind DNS: the old one killed, a new one on another address with
/// the same key and certificate): the client resolves `--relay` again for its
/// new connection and resumes there. That connection is made by the run's one
/// `Connector`, whose verifier accepts only the pinned certificate, as the
/// first was. The client sees a hosts file of the test's (a private mount
/// namespace), rewritten during the outage.
#[test]
fn relay_name_resolved_again_after_the_outage() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut s) = setup("outdns", false) else {
        return;
    };
    let second = s
        .lab
        .add_cloud_address()
        .unwrap_or_else(|e| panic!("address: {e:#}"));
    let hosts = s.dir.path("hosts");
    let point = |addr: std::net::Ipv4Addr| {
        // In place (same inode): the client's bind mount sees the new text.
        std::fs::write(&hosts, format!("127.0.0.1 localhost\n{addr} relay.lab\n"))
            .unwrap_or_else(|e| panic!("{e}"));
    };
    point(s.lab.addr(linklab::Side::Cloud));
    let size = 40 * MIB;
    let file = s.dir.path("outdns.bin");
    let sha = write_random(&file, size, 36);
    let mut args = s.cloud.client_args(&s.lab, &[&file]);
    let relay = args
        .iter()
        .position(|a| a == "--relay")
        .unwrap_or_else(|| panic!("no --relay in {args:?}"));
    args[relay + 1] = format!("relay.lab:{}", wan_cloud::RELAY_PORT);
    args.extend(short_weather("60s"));
    args.extend(
        ["--attempts", "1", "--json", "-v"]
            .iter()
            .map(|a| a.to_string()),
    );
    let out = s.dir.path("run");
    let mut c = wan_cloud::spawn_client_with_hosts(&s.lab, &args, &out, &hosts);
    wait_blocks(&s.lab, CONTAINER, "outdns.bin", 1, &mut c);
    let cut = s.lab.outage();
    let t = Instant::now();
    s.cloud.kill_relay();
    s.cloud.start_relay_at(&s.lab, second);
    point(second);
    std::thread::sleep(OUTAGE.saturating_sub(t.elapsed()));
    cut.end();
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("relay name resolves elsewhere now")
            && stderr.contains(&second.to_string()),
        "{stderr}"
    );
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    let f = &v["files"][0];
    assert_eq!(f["status"], "committed", "{f}");
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(
        resumed >= BLOCK && resumed.is_multiple_of(BLOCK),
        "resumed at {resumed}: {f}"
    );
    verify(&s.lab, CONTAINER, &[("outdns.bin".to_string(), sha)]);
    s.assert_no_resend(&[size]);
    println!("outdns: {f} ({:.1} s)", s.t0.elapsed().as_secs_f64());
}

/// Patience runs out while the link is still down: exit 130, the message and
/// the command that resumes; once the link is back that command finishes the
/// upload from the staged prefix.
#[test]
fn out_of_patience_stops_resumably_and_the_rerun_resumes() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("patience", false) else {
        return;
    };
    let size = 40 * MIB;
    let file = s.dir.path("patience.bin");
    let sha = write_random(&file, size, 35);
    let (mut c, out) = s.client_patient(&[&file], "4s", &["--json"], "run1");
    wait_blocks(&s.lab, CONTAINER, "patience.bin", 1, &mut c);
    let cut = s.lab.outage();
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(60));
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("stopped: the relay stayed unreachable for 4 s (--patience)")
            && stderr.contains("1 stopped in flight")
            && stderr.contains("to resume, run the same command"),
        "{stderr}"
    );
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(v["interrupted"], true, "{v}");
    assert_eq!(v["stopped_by"], "patience", "{v}");
    cut.end();
    let (c, out) = s.client_patient(&[&file], "4s", &["--json"], "run2");
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    let f = &v["files"][0];
    assert_eq!(f["status"], "committed", "{f}");
    assert!(f["bytes_resumed"].as_u64() >= Some(BLOCK), "{f}");
    verify(&s.lab, CONTAINER, &[("patience.bin".to_string(), sha)]);
    s.assert_no_resend(&[size]);
    println!("patience: {f} ({:.1} s)", s.t0.elapsed().as_secs_f64());
}

/// The bench (not in CI: minutes of wall time): the client with its default
/// timeouts and patience (idle 10 s, connect 5 s, patience 10 min, 16 MiB
/// blocks, no rate cap) on the path, 200 ms / 1 % / 200 Mbit/s; a
/// directory of two 128 MiB files and 200 small ones; the link cut for
/// `OUTAGE_S` seconds (default 90) once the first block is staged. Prints one
/// JSON line with what happened (docs/bench/wan-outage/ has the runs):
///
/// `OUTAGE_S=90 cargo test --release -p wanbench --test outage_wan -- --ignored --nocapture default_values`
#[test]
#[ignore = "bench: minutes of wall time (docs/bench/wan-outage/)"]
fn default_values_ride_out_an_outage() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let test = "outbench";
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED {test}: {e:#}");
        return;
    }
    let outage_s: u64 = std::env::var("OUTAGE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(90);
    let lab =
        Lab::start(LinkProfile::new(200.0, 0.01, 200.0)).unwrap_or_else(|e| panic!("lab: {e:#}"));
    let dir = Scratch::new(test);
    let cloud = Cloud::start(&lab, &dir.0, CONTAINER);
    let root = dir.path("bench");
    std::fs::create_dir_all(root.join("small")).unwrap_or_else(|e| panic!("{e}"));
    let mut blobs = Vec::new();
    let mut sizes = Vec::new();
    for i in 0..2u64 {
        let name = format!("large-{i}.bin");
        let size = 128 * MIB;
        let sha = write_random(&root.join(&name), size, 200 + i);
        blobs.push((format!("bench/{name}"), sha));
        sizes.push(size);
    }
    for i in 0..200u64 {
        let name = format!("small/s{i:03}.bin");
        let size = 64 * 1024;
        let sha = write_random(&root.join(&name), size, 2000 + i);
        blobs.push((format!("bench/{name}"), sha));
        sizes.push(size);
    }
    let mut args = cloud.client_args(&lab, &[&root]);
    args.extend(["--json".to_string(), "--quiet".to_string()]);
    let out = dir.path("run");
    let t0 = Instant::now();
    let mut c = spawn_client(&lab, &args, &out);
    wait_blocks(&lab, CONTAINER, "bench/large-0.bin", 1, &mut c);
    let cut_at = t0.elapsed();
    let cut = lab.outage();
    std::thread::sleep(Duration::from_secs(outage_s));
    let before = lab.stats().site_to_cloud;
    cut.end();
    let back_at = t0.elapsed();
    // Queue loss in the first seconds after the link returns (the client's
    // first connection after the outage must not start faster than the path).
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = lab.stats().site_to_cloud;
        if now.forwarded_packets > before.forwarded_packets + 100 && first.is_none() {
            first = Some((Instant::now(), now));
        }
        if let Some((at, start)) = first
            && at.elapsed() >= Duration::from_secs(5)
        {
            first = Some((at, start));
            break;
        }
    }
    let after5 = lab.stats().site_to_cloud;
    let resumed_at = first.map(|(at, _)| at);
    let (code, stdout, stderr) = wait_client(c, &out, Duration::from_secs(outage_s + 900));
    let total = t0.elapsed();
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(v["totals"]["failed"], 0, "{}", v["totals"]);
    verify(&lab, CONTAINER, &blobs);
    let sent = lab.stats().site_to_cloud.forwarded_bytes;
    let payload: u64 = sizes.iter().sum();
    let files = v["files"].as_array().cloned().unwrap_or_default();
    let large: Vec<Value> = files
        .iter()
        .filter(|f| {
            f["blob"]
                .as_str()
                .is_some_and(|b| b.starts_with("bench/large"))
        })
        .map(|f| {
            serde_json::json!({"blob": f["blob"], "bytes_resumed": f["bytes_resumed"],
                "attempts": f["attempts"], "reconnects": f["reconnects"]})
        })
        .collect();
    let (start_pkts, start_q) = first.map_or((0, 0), |(_, s)| {
        (s.forwarded_packets + s.dropped_queue, s.dropped_queue)
    });
    let window_pkts = (after5.forwarded_packets + after5.dropped_queue).saturating_sub(start_pkts);
    let window_q = after5.dropped_queue.saturating_sub(start_q);
    let report = serde_json::json!({
        "outage_s": outage_s,
        "cut_at_s": cut_at.as_secs_f64(),
        "link_back_at_s": back_at.as_secs_f64(),
        "first_packets_after_s": resumed_at.map(|r| (r - t0 - back_at).as_secs_f64()),
        "queue_loss_first_5s": if window_pkts > 0 { window_q as f64 / window_pkts as f64 } else { 0.0 },
        "total_s": total.as_secs_f64(),
        "exit": code,
        "committed": v["totals"]["committed"],
        "failed": v["totals"]["failed"],
        "connections": v["connections"],
        "large": large,
        "files_that_reconnected": files.iter().filter(|f| f["reconnects"].as_u64() >= Some(1)).count(),
        "payload_bytes": payload,
        "ip_bytes_from_site": sent,
        "notices": stderr.lines().filter(|l| l.contains("unreachable") || l.contains("reachable again")).collect::<Vec<_>>(),
        "lab": serde_json::from_str::<Value>(&lab.stats().to_json()).unwrap_or_default(),
    });
    println!("{report}");
    let bound = sizes.iter().map(|s| s + s.min(&(16 * MIB))).sum::<u64>() as f64 * 1.1;
    assert!(
        (sent as f64) < bound,
        "{sent} IP bytes for {payload}: {report}"
    );
}
