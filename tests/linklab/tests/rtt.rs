//! The emulated RTT matches the configured one (UDP echo; ping is not
//! installed on the CI image).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use linklab::{LinkProfile, Side};

/// Probes, one at a time (like `ping -c 40 -i 0.06`).
const PROBES: u32 = 40;

#[test]
fn udp_echo_rtt_is_within_1ms_of_configured() {
    let profile = LinkProfile::new(50.0, 0.0, 100.0);
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
    echo.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let echo_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        // Stops when the probes stop (read timeout).
        while let Ok((n, from)) = echo.recv_from(&mut buf) {
            let _ = echo.send_to(&buf[..n], from);
        }
    });

    probe
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut rtts_ms = Vec::new();
    for seq in 0u32..PROBES {
        let sent = Instant::now();
        probe.send_to(&seq.to_le_bytes(), echo_addr).unwrap();
        let mut buf = [0u8; 64];
        let n = probe.recv(&mut buf).expect("echo reply within 1 s");
        assert_eq!(&buf[..n], &seq.to_le_bytes());
        rtts_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(10));
    }
    let avg = rtts_ms.iter().sum::<f64>() / rtts_ms.len() as f64;
    let min = rtts_ms.iter().cloned().fold(f64::MAX, f64::min);
    let max = rtts_ms.iter().cloned().fold(0.0, f64::max);
    let stats = lab.stats();
    println!(
        "rtt configured 50 ms: min {min:.3} avg {avg:.3} max {max:.3} ms over {PROBES} probes; \
         emulator max release lateness {} / {} us",
        stats.site_to_cloud.max_late_us, stats.cloud_to_site.max_late_us
    );
    assert!(
        min >= 50.0,
        "min rtt {min:.3} ms below the configured 50 ms"
    );
    assert!(
        (avg - 50.0).abs() <= 1.0,
        "avg rtt {avg:.3} ms not within 1 ms of 50 ms"
    );
    drop(lab);
    let _ = echo_thread.join();
}
