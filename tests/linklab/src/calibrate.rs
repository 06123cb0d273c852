//! `linklab calibrate`: how closely the emulator reproduces a profile on this
//! machine, right now. A report, never a pass/fail: accuracy depends on the
//! machine's load, so the tests check only what no load can change (delays
//! never shorter than configured, losses drawn from the seeded model, the rate
//! never exceeded) and the figures live here.
//!
//! Three measurements, one JSON line each on stdout:
//! - `rtt`: UDP echo probes one at a time; min/avg/max against the configured RTT.
//! - `loss`: UDP datagrams at a gentle pace; measured loss against the configured.
//! - `goodput`: one TCP flow per congestion control through the bottleneck;
//!   goodput against the ceiling rate × 1448 / 1500 (MTU 1500, TCP timestamps).

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{Lab, LinkProfile, Side};

/// What to measure; each part runs in a lab of its own.
#[derive(Clone, Debug)]
pub struct Calibration {
    pub rtt_ms: f64,
    pub loss: f64,
    pub rate_mbit: f64,
    pub probes: u32,
    pub packets: u64,
    pub seconds: f64,
    pub ccs: Vec<String>,
}

/// Runs every measurement, printing one JSON line each.
pub fn run(c: &Calibration) -> anyhow::Result<()> {
    println!("{}", rtt(c)?);
    println!("{}", loss(c)?);
    for cc in &c.ccs {
        println!("{}", goodput(c, cc)?);
    }
    Ok(())
}

fn rtt(c: &Calibration) -> anyhow::Result<String> {
    let lab = Lab::start(LinkProfile::new(c.rtt_ms, 0.0, c.rate_mbit))?;
    let echo_addr = SocketAddr::from((lab.cloud_addr(), 7000));
    let echo = lab.run_in(Side::Cloud, move || Ok(UdpSocket::bind(echo_addr)?))?;
    let probe = lab.run_in(Side::Site, || Ok(UdpSocket::bind("10.77.0.1:0")?))?;
    echo.set_read_timeout(Some(Duration::from_secs(5)))?;
    probe.set_read_timeout(Some(Duration::from_secs(5)))?;
    let probes = c.probes;
    let echo_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..probes {
            match echo.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let _ = echo.send_to(&buf[..n], from);
                }
                Err(_) => break,
            }
        }
    });
    let mut rtts_ms = Vec::new();
    for seq in 0..c.probes {
        let sent = Instant::now();
        probe.send_to(&seq.to_le_bytes(), echo_addr)?;
        let mut buf = [0u8; 64];
        probe.recv(&mut buf).context("calibrate: echo reply")?;
        rtts_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = echo_thread.join();
    let avg = rtts_ms.iter().sum::<f64>() / rtts_ms.len().max(1) as f64;
    let min = rtts_ms.iter().cloned().fold(f64::MAX, f64::min);
    let max = rtts_ms.iter().cloned().fold(0.0, f64::max);
    let s = lab.stats();
    Ok(format!(
        "{{\"measure\":\"rtt\",\"configured_ms\":{},\"probes\":{},\"min_ms\":{min:.3},\
         \"avg_ms\":{avg:.3},\"max_ms\":{max:.3},\"avg_error_ms\":{:.3},\
         \"max_late_us\":[{},{}]}}",
        c.rtt_ms,
        c.probes,
        avg - c.rtt_ms,
        s.site_to_cloud.max_late_us,
        s.cloud_to_site.max_late_us
    ))
}

fn loss(c: &Calibration) -> anyhow::Result<String> {
    let lab = Lab::start(LinkProfile::new(10.0, c.loss, c.rate_mbit))?;
    let sink_addr = SocketAddr::from((lab.cloud_addr(), 9000));
    let sink = lab.run_in(Side::Cloud, move || Ok(UdpSocket::bind(sink_addr)?))?;
    sink.set_read_timeout(Some(Duration::from_millis(500)))?;
    let source = lab.run_in(Side::Site, || Ok(UdpSocket::bind("10.77.0.1:0")?))?;
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut received = 0u64;
        while sink.recv(&mut buf).is_ok() {
            received += 1;
        }
        received
    });
    let payload = [0x42u8; 200];
    for i in 0..c.packets {
        source.send_to(&payload, sink_addr)?;
        if i % 10 == 9 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))?;
    let s = lab.stats().site_to_cloud;
    let measured = 1.0 - received as f64 / c.packets as f64;
    Ok(format!(
        "{{\"measure\":\"loss\",\"configured\":{},\"packets\":{},\"received\":{received},\
         \"measured\":{measured:.5},\"counters\":{}}}",
        c.loss,
        c.packets,
        s.to_json()
    ))
}

fn goodput(c: &Calibration, cc: &str) -> anyhow::Result<String> {
    let lab = Lab::start(LinkProfile::new(c.rtt_ms.min(20.0), 0.0, c.rate_mbit))?;
    let bin = std::env::current_exe().context("calibrate: own binary")?;
    let to = format!("{}:5201", lab.cloud_addr());
    let mut sink = Command::new(&bin);
    sink.args(["tcp-sink", "--once", "--listen", &to])
        .stdout(Stdio::null());
    let mut sink = lab.spawn_in(Side::Cloud, sink)?;
    let mut send = Command::new(&bin);
    send.args(["tcp-send", "--cc", cc, "--to", &to])
        .arg("--seconds")
        .arg(c.seconds.to_string())
        .stdout(Stdio::piped());
    let send = lab.spawn_in(Side::Site, send)?;
    let out = send.wait_with_output()?;
    let _ = sink.wait();
    if !out.status.success() {
        bail!("calibrate: tcp-send {cc} failed");
    }
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let goodput = line
        .split("\"goodput_mbit\":")
        .nth(1)
        .and_then(|r| r.trim_end_matches('}').parse::<f64>().ok())
        .unwrap_or(0.0);
    let ceiling = c.rate_mbit * 1448.0 / 1500.0;
    Ok(format!(
        "{{\"measure\":\"goodput\",\"cc\":\"{cc}\",\"rate_mbit\":{},\"rtt_ms\":{},\
         \"goodput_mbit\":{goodput:.3},\"ceiling_mbit\":{ceiling:.3},\"of_ceiling\":{:.4},\
         \"counters\":{}}}",
        c.rate_mbit,
        c.rtt_ms.min(20.0),
        if ceiling > 0.0 {
            goodput / ceiling
        } else {
            0.0
        },
        lab.stats().site_to_cloud.to_json()
    ))
}
