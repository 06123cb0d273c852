//! The measured random loss matches the configured probability.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use linklab::{LinkProfile, Side};

#[test]
fn two_percent_loss_over_10000_udp_packets() {
    const SENT: u64 = 10_000;
    let profile = LinkProfile::new(10.0, 0.02, 100.0);
    let Some(lab) = common::lab_or_skip("loss", profile) else {
        return;
    };
    let sink_addr = SocketAddr::from((lab.cloud_addr(), 9000));
    let sink = lab
        .run_in(Side::Cloud, move || {
            let socket = UdpSocket::bind(sink_addr)?;
            // 10k datagrams may arrive faster than we read them.
            socket.set_read_timeout(Some(Duration::from_millis(500)))?;
            Ok(socket)
        })
        .unwrap();
    let source = lab
        .run_in(Side::Site, || Ok(UdpSocket::bind("10.77.0.1:0")?))
        .unwrap();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut received = 0u64;
        // Ends 500 ms after the last datagram.
        while sink.recv(&mut buf).is_ok() {
            received += 1;
        }
        received
    });
    let payload = [0x42u8; 200];
    for i in 0..SENT {
        source.send_to(&payload, sink_addr).unwrap();
        // ~10 packets per ms (~18 Mbit/s): far below the 100 Mbit/s
        // bottleneck, so any drop is random loss, not queue overflow.
        if i % 10 == 9 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let received = receiver.join().unwrap();
    let stats = lab.stats().site_to_cloud;
    let measured = 1.0 - received as f64 / SENT as f64;
    println!(
        "loss configured 2.0 %: measured {:.3} % ({} of {SENT} lost); counters {}",
        measured * 100.0,
        SENT - received,
        stats.to_json()
    );
    assert_eq!(stats.dropped_queue, 0, "no queue drops at this pace");
    assert_eq!(
        received, stats.forwarded_packets,
        "every forwarded packet arrived"
    );
    assert_eq!(stats.forwarded_packets + stats.dropped_loss, SENT);
    assert!((measured - 0.02).abs() <= 0.006, "measured loss {measured}");
}
