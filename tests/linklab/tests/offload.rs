//! NIC offloads in the lab (`LinkProfile::offload`), through the real kernel:
//! a UDP GSO batch crosses the site TUN whole and arrives as its datagrams,
//! datagrams released together reach a `UDP_GRO` socket in one read, and TCP
//! (whose checksums the sender leaves to the "NIC") still delivers every byte.
//!
//! Nothing depends on timing: no loss, no rate limit, and each test waits for
//! what it sent (with a bound against hangs only).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use linklab::{LinkProfile, Side};

/// `UDP_SEGMENT` and `UDP_GRO` (linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
const SEGMENT: usize = 1200;

fn offload_profile() -> LinkProfile {
    LinkProfile {
        offload: true,
        ..LinkProfile::new(2.0, 0.0, 0.0)
    }
}

fn set_udp_option(socket: &UdpSocket, option: libc::c_int, value: libc::c_int) {
    // SAFETY: setsockopt on an open socket with a correctly sized int.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt SOL_UDP {option}");
}

/// The site-to-cloud counters once `done` holds for them. The forwarder
/// publishes its counters after writing, so a receiver can see the packets
/// before the counts: wait (bounded against hangs only).
fn stats_once(
    lab: &linklab::Lab,
    done: impl Fn(&linklab::LinkStats) -> bool,
) -> linklab::LinkStats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = lab.stats().site_to_cloud;
        if done(&stats) || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// 10 full segments and a short one, every byte telling its position.
fn batch() -> Vec<u8> {
    (0..10 * SEGMENT + 300)
        .map(|i| (i % 251) as u8 ^ (i / 251) as u8)
        .collect()
}

/// A sink in the cloud namespace and a GSO sender in the site namespace.
fn sockets(lab: &linklab::Lab, port: u16, gro: bool) -> (UdpSocket, UdpSocket, SocketAddr) {
    let sink_addr = SocketAddr::from((lab.cloud_addr(), port));
    let sink = lab
        .run_in(Side::Cloud, move || Ok(UdpSocket::bind(sink_addr)?))
        .unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    if gro {
        set_udp_option(&sink, UDP_GRO, 1);
    }
    let source = lab
        .run_in(Side::Site, || Ok(UdpSocket::bind("10.77.0.1:0")?))
        .unwrap();
    set_udp_option(&source, UDP_SEGMENT, SEGMENT as libc::c_int);
    (sink, source, sink_addr)
}

#[test]
fn a_gso_batch_crosses_whole_and_arrives_as_its_datagrams() {
    let Some(lab) = common::lab_or_skip("offload_gso", offload_profile()) else {
        return;
    };
    let (sink, source, to) = sockets(&lab, 9100, false);
    let sent = batch();
    assert_eq!(source.send_to(&sent, to).unwrap(), sent.len());
    // A socket without UDP_GRO gets datagrams: the kernel segments anything
    // the emulator coalesced.
    let mut received = Vec::new();
    let mut buf = [0u8; 2048];
    for i in 0..sent.len().div_ceil(SEGMENT) {
        let n = sink.recv(&mut buf).expect("every datagram arrives");
        assert!(n == SEGMENT || i == 10, "datagram {i} has {n} bytes");
        received.extend_from_slice(&buf[..n]);
    }
    assert_eq!(received, sent, "every byte, in order");
    let stats = stats_once(&lab, |s| s.forwarded_packets >= 11);
    assert_eq!(
        stats.gso_batches,
        1,
        "read as one batch: {}",
        stats.to_json()
    );
    assert_eq!(stats.forwarded_packets, 11, "{}", stats.to_json());
    assert_eq!(stats.malformed, 0, "{}", stats.to_json());
}

#[test]
fn datagrams_released_together_reach_a_gro_socket_in_one_read() {
    let Some(lab) = common::lab_or_skip("offload_gro", offload_profile()) else {
        return;
    };
    let (sink, source, to) = sockets(&lab, 9101, true);
    let sent = batch();
    source.send_to(&sent, to).unwrap();
    // One batch in, one release time for all of it (no rate limit): one
    // coalesced write, which a UDP_GRO socket reads whole.
    let mut buf = vec![0u8; 65_536];
    let n = sink.recv(&mut buf).expect("the coalesced datagrams arrive");
    assert_eq!(&buf[..n], &sent[..], "all 11 datagrams in one read");
    let stats = stats_once(&lab, |s| s.gro_batches >= 1);
    assert_eq!(stats.gro_batches, 1, "{}", stats.to_json());
}

#[test]
fn tcp_checksums_left_to_the_nic_are_completed_both_ways() {
    let Some(lab) = common::lab_or_skip("offload_tcp", offload_profile()) else {
        return;
    };
    let addr = SocketAddr::from((lab.cloud_addr(), 9102));
    let listener = lab
        .run_in(Side::Cloud, move || Ok(TcpListener::bind(addr)?))
        .unwrap();
    let echo = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut data = Vec::new();
        conn.read_to_end(&mut data).unwrap();
        conn.write_all(&data).unwrap();
    });
    let sent: Vec<u8> = (0..4_000_000u32).map(|i| (i * 7 / 3) as u8).collect();
    let mut conn = lab
        .run_in(Side::Site, move || Ok(TcpStream::connect(addr)?))
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn.write_all(&sent).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    conn.read_to_end(&mut back).unwrap();
    echo.join().unwrap();
    assert!(
        back == sent,
        "4 MB echoed intact ({} bytes back)",
        back.len()
    );
    let stats = lab.stats();
    assert_eq!(
        stats.site_to_cloud.malformed + stats.cloud_to_site.malformed,
        0
    );
}
