//! The emulated link loses packets at random with the configured probability,
//! and only those: every packet it forwards arrives.
//!
//! Nothing here depends on timing: the loss RNG is seeded and drawn once per
//! packet, the link has no rate limit (so no queue can overflow whatever the
//! pace), the receiver's buffer holds every packet even if it is not scheduled
//! for the whole run, and it stops when it has every forwarded packet rather than
//! after a silence. The share lost is checked against a Bernstein bound that a
//! fair Bernoulli(p) link would break with probability below 1e-9.

mod common;

use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use linklab::{LinkProfile, Side};

const SENT: u64 = 10_000;
const LOSS: f64 = 0.02;

/// Half-width of a two-sided interval around n·p that the count of successes of
/// n Bernoulli(p) draws leaves with probability at most `delta` (Bernstein).
fn bernstein_half_width(n: f64, p: f64, delta: f64) -> f64 {
    let l = (2.0 / delta).ln();
    let var = n * p * (1.0 - p);
    // t² = 2·l·(var + t/3), solved for t > 0.
    let b = 2.0 * l / 3.0;
    (b + (b * b + 8.0 * l * var).sqrt()) / 2.0
}

fn set_rcvbuf(socket: &UdpSocket, bytes: libc::c_int) {
    // SAFETY: setsockopt on an open socket with a correctly sized int.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF");
}

#[test]
fn two_percent_loss_over_10000_udp_packets() {
    let profile = LinkProfile::new(10.0, LOSS, 0.0);
    let Some(lab) = common::lab_or_skip("loss", profile) else {
        return;
    };
    let sink_addr = SocketAddr::from((lab.cloud_addr(), 9000));
    let sink = lab
        .run_in(Side::Cloud, move || Ok(UdpSocket::bind(sink_addr)?))
        .unwrap();
    // Room for all 10k datagrams (the lab raised rmem_max to 64 MiB).
    set_rcvbuf(&sink, 32 << 20);
    // A bound against hangs only.
    sink.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let source = lab
        .run_in(Side::Site, || Ok(UdpSocket::bind("10.77.0.1:0")?))
        .unwrap();
    let payload_len = 200;
    // In rounds of ROUND packets, each waited for before the next: never more in
    // flight than the TUN queue, the forwarder's buffers and the socket buffer
    // hold, whatever the pace at which threads are scheduled.
    const ROUND: u64 = 500;
    let mut seen = HashSet::new();
    let mut buf = [0u8; 512];
    let mut stats = lab.stats().site_to_cloud;
    for first in (0..SENT).step_by(ROUND as usize) {
        let last = (first + ROUND).min(SENT);
        for seq in first..last {
            let mut payload = vec![0x42u8; payload_len];
            payload[..8].copy_from_slice(&seq.to_le_bytes());
            source.send_to(&payload, sink_addr).unwrap();
        }
        // Until the forwarder has judged every packet sent (a bound against hangs only).
        let deadline = Instant::now() + Duration::from_secs(60);
        stats = loop {
            let s = lab.stats().site_to_cloud;
            let judged =
                s.forwarded_packets + s.dropped_loss + s.dropped_queue + s.dropped_no_buffer;
            if judged >= last {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the forwarder saw only {judged} of {last} packets: {}",
                s.to_json()
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(
            stats.forwarded_packets + stats.dropped_loss,
            last,
            "{}",
            stats.to_json()
        );
        // Every forwarded packet arrives, each once, each one we sent.
        while (seen.len() as u64) < stats.forwarded_packets {
            let n = sink
                .recv(&mut buf)
                .expect("a forwarded packet did not arrive");
            assert_eq!(n, payload_len);
            let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert!(seq < last, "unknown packet {seq}");
            assert!(seen.insert(seq), "packet {seq} arrived twice");
        }
    }
    assert_eq!(stats.dropped_queue, 0, "no rate limit, no queue");
    assert_eq!(stats.dropped_no_buffer, 0, "{}", stats.to_json());
    assert_eq!(stats.write_errors, 0, "{}", stats.to_json());
    let lost = SENT - seen.len() as u64;
    let expected = SENT as f64 * LOSS;
    let width = bernstein_half_width(SENT as f64, LOSS, 1e-9);
    println!(
        "loss configured {:.1} %: {lost} of {SENT} lost ({:.3} %), allowed {:.0} .. {:.0}; counters {}",
        LOSS * 100.0,
        lost as f64 / SENT as f64 * 100.0,
        expected - width,
        expected + width,
        stats.to_json()
    );
    assert_eq!(lost, stats.dropped_loss);
    assert!(
        (lost as f64 - expected).abs() <= width,
        "{lost} lost, expected {expected} ± {width:.0}"
    );
}
