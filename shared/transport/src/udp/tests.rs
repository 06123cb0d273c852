//! Real loopback sockets: every datagram arrives whichever way the reader
//! waits, and a blocked writer is woken when the socket has room.

use std::future::poll_fn;
use std::io::IoSliceMut;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use quinn::AsyncUdpSocket;
use quinn::udp::RecvMeta;

use super::{BatchingSocket, ReceivePolicy, Wait};

const LOCAL: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

fn bound() -> UdpSocket {
    crate::quic::bind_udp(LOCAL, 4 << 20).expect("bind a loopback UDP socket")
}

/// Sends `bursts` bursts of `burst` numbered datagrams, each burst only after
/// the previous one was read (so nothing is dropped for want of buffer), and
/// returns the numbers in the order a reader task read them. The reader reads
/// until the socket is empty after every burst, so it waits (per arrival or for
/// a tick) before each new one.
async fn numbers_received(socket: Arc<BatchingSocket>, bursts: u32, burst: u32) -> Vec<u32> {
    let sender = UdpSocket::bind(LOCAL).expect("bind sender");
    let to = socket.local_addr().expect("local addr");
    let (numbers, mut read) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut storage = vec![0u8; 32 * 2048];
        loop {
            let mut metas = [RecvMeta::default(); 32];
            let mut bufs: Vec<IoSliceMut<'_>> =
                storage.chunks_mut(2048).map(IoSliceMut::new).collect();
            let n = poll_fn(|cx| socket.poll_recv(cx, &mut bufs, &mut metas))
                .await
                .expect("receive");
            assert!(n > 0, "a ready receive reads at least one datagram");
            for (meta, buf) in metas.iter().zip(&bufs).take(n) {
                // With GRO one buffer may hold several datagrams of `stride` bytes.
                for datagram in buf[..meta.len].chunks(meta.stride) {
                    assert_eq!(datagram.len(), 1200);
                    let number = [datagram[0], datagram[1], datagram[2], datagram[3]];
                    if numbers.send(u32::from_le_bytes(number)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut received = Vec::new();
    for b in 0..bursts {
        for i in 0..burst {
            let mut datagram = [0u8; 1200];
            datagram[..4].copy_from_slice(&(b * burst + i).to_le_bytes());
            sender.send_to(&datagram, to).expect("send");
        }
        while received.len() < ((b + 1) * burst) as usize {
            received.push(read.recv().await.expect("reader alive"));
        }
    }
    reader.abort();
    received
}

#[tokio::test]
async fn every_datagram_arrives_when_woken_per_arrival() {
    let socket = Arc::new(
        BatchingSocket::with_policy(bound(), ReceivePolicy::per_arrival_only()).expect("socket"),
    );
    let got = numbers_received(socket, 40, 50).await;
    assert_eq!(got, (0..2000).collect::<Vec<_>>());
}

#[tokio::test]
async fn every_datagram_arrives_when_read_on_ticks() {
    let socket = Arc::new(
        BatchingSocket::with_policy(bound(), ReceivePolicy::on_ticks_only()).expect("socket"),
    );
    let got = numbers_received(socket.clone(), 40, 50).await;
    assert_eq!(got, (0..2000).collect::<Vec<_>>());
    assert_eq!(socket.receive_wait(), Wait::Tick);
}

#[tokio::test]
async fn every_datagram_arrives_with_the_default_policy() {
    let socket = Arc::new(BatchingSocket::new(bound()).expect("socket"));
    let got = numbers_received(socket, 200, 10).await;
    assert_eq!(got, (0..2000).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_blocked_writer_is_released_when_the_socket_has_room() {
    let socket = Arc::new(BatchingSocket::new(bound()).expect("socket"));
    let mut poller = socket.clone().create_io_poller();
    // Nothing blocked: ready at once, without registering.
    poll_fn(|cx| Pin::as_mut(&mut poller).poll_writable(cx))
        .await
        .expect("writable");
    // As after a send that returned WouldBlock: the poller waits for the
    // reactor's writability event (an empty send buffer reports it at once).
    socket.write_blocked.store(true, Ordering::Release);
    poll_fn(|cx| Pin::as_mut(&mut poller).poll_writable(cx))
        .await
        .expect("writable");
    assert!(!socket.write_blocked.load(Ordering::Acquire));
}
