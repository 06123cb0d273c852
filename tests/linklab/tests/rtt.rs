//! The emulated link delays every packet by at least the configured one-way
//! delay (UDP echo; ping is not installed on the CI image).
//!
//! Only the lower bound is a test: the forwarder stamps a packet when it reads it
//! (never before it was sent) and releases it no earlier than that plus the delay,
//! so no RTT can be below the configured one however busy the machine is. How
//! close to it the emulator stays (its accuracy) depends on the machine's load;
//! `linklab calibrate` measures and reports that instead of failing at random.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use linklab::{LinkProfile, Side};

/// Probes, one at a time (like `ping -c 40 -i 0.01`).
const PROBES: u32 = 40;
const RTT_MS: f64 = 50.0;

#[test]
fn udp_echo_rtt_is_never_below_the_configured_rtt() {
    let profile = LinkProfile::new(RTT_MS, 0.0, 100.0);
    let Some(lab) = common::lab_or_skip("rtt", profile) else {
        return;
    };
    let echo_addr = SocketAddr::from((lab.cloud_addr(), 7000));
    let echo = lab
        .run_in(Side::Cloud, move || Ok(UdpSocket::bind(echo_addr)?))
        .unwrap();
    let probe = lab
        .run_in(Side::Site, || Ok(UdpSocket::bind("10.77.0.1:0")?))
        .unwrap();
    // Short read timeouts only to look at `stop`; the echo ends when told to.
    echo.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let echo_thread = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::SeqCst) {
                if let Ok((n, from)) = echo.recv_from(&mut buf) {
                    let _ = echo.send_to(&buf[..n], from);
                }
            }
        }
    });

    // A bound against hangs only: no loss is configured, so every reply comes.
    probe
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rtts_ms = Vec::new();
    for seq in 0u32..PROBES {
        let sent = Instant::now();
        probe.send_to(&seq.to_le_bytes(), echo_addr).unwrap();
        let mut buf = [0u8; 64];
        let n = probe
            .recv(&mut buf)
            .expect("echo reply (no loss configured)");
        // One probe in flight at a time, no loss: the reply is this probe's.
        assert_eq!(&buf[..n], &seq.to_le_bytes());
        rtts_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    echo_thread.join().unwrap();
    let min = rtts_ms.iter().cloned().fold(f64::MAX, f64::min);
    let avg = rtts_ms.iter().sum::<f64>() / rtts_ms.len() as f64;
    let stats = lab.stats();
    println!(
        "rtt configured {RTT_MS} ms: min {min:.3} avg {avg:.3} ms over {PROBES} probes \
         (a report, not checked; see `linklab calibrate`); counters {}",
        stats.to_json()
    );
    assert!(
        min >= RTT_MS,
        "min rtt {min:.3} ms below the configured {RTT_MS} ms"
    );
    // Every probe and every reply crossed the emulated link exactly once.
    assert_eq!(stats.site_to_cloud.forwarded_packets, u64::from(PROBES));
    assert_eq!(stats.cloud_to_site.forwarded_packets, u64::from(PROBES));
}
