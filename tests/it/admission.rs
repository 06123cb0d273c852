//! Admission and waiting, each promise pinned: refused connections
//! give their slots back at once, a client refused for good closes its
//! connection, an authenticated connection gets its streams, a peer that
//! grants no stream credit cannot pin a transfer, and the client hears a
//! receive failure before in-flight blocks are drained. Real relay, real QUIC
//! on loopback, Azurite; raw-protocol clients where the real one cannot
//! misbehave. Every committed blob is downloaded and hashed. Every wait below
//! is a guard against hangs: what is checked is a count or an order.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use relay_proto::protocol::{Code, Message, Start};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::hostile::{offer, open_with_offer, relay_with, upload_args};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, stderr, summary};
use relay_transport::frames::{read_frame, write_frame};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(120);

/// Polls `done` until it holds; `T` only stops a hang.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn proxy() -> FaultProxy {
    FaultProxy::start(
        SocketAddr::from(([127, 0, 0, 1], shared_azurite().port)),
        Schedule::seeded(1),
    )
    .await
}

/// A connection whose Offer was refused for its token gives
/// its pending and per-address slots back at once, whatever the peer does
/// next (nothing, close, or open more streams). 100 refusals from one address
/// (32 slots per address, an auth deadline far beyond the test), then a real
/// client from the same address uploads without being refused a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_give_their_slots_back_at_once() {
    let container = new_container("refusedslots").await;
    let relay = relay_with(&container, |cfg| {
        cfg.listen.admission.auth_deadline = Duration::from_secs(3600);
    });
    let admission = relay.shared.admission.clone();
    let mut kept = Vec::new();
    for i in 0..100 {
        let (c, conn) = Dial::to(&relay)
            .try_connect()
            .await
            .unwrap_or_else(|e| panic!("attempt {i}: {e}"));
        let o = offer("not-a-token-0123456789", &container, "x.bin", 1000);
        let (_send, _recv, answer) = open_with_offer(&conn, o).await;
        match answer {
            Message::Reject(f) => assert_eq!(f.code, Code::Unauthorized, "{f:?}"),
            other => panic!("attempt {i}: {other:?}"),
        }
        match i % 3 {
            // Polite: closes its connection.
            0 => {
                c.close(Some(&conn)).await;
            }
            // Silent: keeps it open and does nothing.
            1 => kept.push((c, conn)),
            // Hostile: keeps it and opens more streams, trying to stay.
            _ => {
                for _ in 0..8 {
                    let Ok((mut s, _r)) = conn.open_bi().await else {
                        break;
                    };
                    let o = offer("not-a-token-0123456789", &container, "y.bin", 1000);
                    if write_frame(&mut s, &Message::Offer(o)).await.is_err() {
                        break;
                    }
                }
                // The relay closed it: a refused connection is not kept.
                let why = tokio::time::timeout(T, conn.closed())
                    .await
                    .unwrap_or_else(|_| panic!("attempt {i}: the relay kept a refused connection"));
                assert!(
                    matches!(why, quinn::ConnectionError::ApplicationClosed(_)),
                    "{why:?}"
                );
                kept.push((c, conn));
            }
        }
    }
    wait_until("no connection pending after 100 refusals", || {
        admission.pending_now() == 0
    })
    .await;
    for (_, conn) in &kept {
        assert!(conn.close_reason().is_some(), "a refused connection stays");
    }
    // A legitimate client behind the same address: admitted at once.
    let dir = Scratch::new("refusedslots");
    let file = dir.path("f.bin");
    let sha = write_random(&file, 100 * KIB, 7);
    let out = run_client(&upload_args(&relay, &file, &container, TOKEN), &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["totals"]["committed"], 1);
    assert_eq!(blob_sha(&container, "f.bin").await, (100 * KIB, sha));
    let refusals = &admission.refusals;
    assert_eq!(refusals.per_address.load(Ordering::Relaxed), 0);
    assert_eq!(refusals.evicted.load(Ordering::Relaxed), 0);
    assert_eq!(refusals.auth_deadline.load(Ordering::Relaxed), 0);
    relay.stop().await;
}

/// A client that closed its connection (as the real one
/// does on a fatal refusal: every stream reset, then the endpoint closed)
/// has its CONNECTION_CLOSE on the wire when `Connector::close` returns, even
/// if the process ends right after. Played by a runtime dropped at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_connection_is_closed_on_the_wire_before_exit() {
    let container = new_container("abortclose").await;
    let relay = relay_with(&container, |cfg| {
        cfg.listen.admission.auth_deadline = Duration::from_secs(3600);
    });
    let admission = relay.shared.admission.clone();
    let addr = relay.addr;
    for round in 0..30 {
        let pending = admission.clone();
        let fingerprint = relay.fingerprint.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            rt.block_on(async {
                let (c, conn) = Dial::at(addr, &fingerprint).connect().await;
                // The relay has it pending before it is aborted.
                let t0 = Instant::now();
                while pending.pending_now() == 0 {
                    assert!(t0.elapsed() < T, "never pending");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                conn.close(
                    relay_proto::protocol::app_error::CLIENT_ABORT.into(),
                    b"interrupted",
                );
                c.close(Some(&conn)).await;
            });
            // Process exit, as far as this connection knows: nothing more is sent.
            drop(rt);
        })
        .join()
        .unwrap_or_else(|_| panic!("round {round}: the client thread panicked"));
        // Half the idle timeout (60 s): only a close the relay received ends
        // the connection sooner.
        let t0 = Instant::now();
        while admission.pending_now() != 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "round {round}: the relay never heard the aborted connection's close"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    relay.stop().await;
}

/// Through the real client: a refusal every file would get
/// (here a container that does not exist, on an authenticated connection the
/// relay keeps) ends the run, and the relay hears the client's close before
/// its idle timeout, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_refused_for_good_closes_its_connection() {
    let container = new_container("fatalclose").await;
    let relay = relay_with(&container, |_| {});
    let dir = Scratch::new("fatalclose");
    let file = dir.path("f.bin");
    write_random(&file, 10 * KIB, 9);
    let missing = format!("{container}-missing");
    for round in 0..10 {
        let out = run_client(&upload_args(&relay, &file, &missing, TOKEN), &[], T).await;
        assert!(!out.status.success(), "round {round}: {}", stderr(&out));
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.contains("does not exist"), "{report}");
        // Half the idle timeout (60 s): only a close the relay received ends
        // the connection sooner.
        let t0 = Instant::now();
        while relay.metric("blob_relay_connections_authenticated") != Some(0) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "round {round}: the relay still holds the refused client's connection"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    relay.stop().await;
}

/// With `--storage-concurrency 64`, an authenticated
/// connection's stream limit is raised from the 4 it had before its first
/// valid Offer. Every Put Blob is held, so every file stays open on the
/// connection: more than 4 held at once prove the limit was raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_gets_more_than_its_pre_auth_streams_with_64_storage_requests() {
    let container = new_container("credit64").await;
    let proxy = proxy().await;
    proxy.hold(Op::Other);
    let storage = shared_azurite().storage_at(
        &proxy.url(),
        relay_storage::blob::WriterOptions {
            max_concurrent_requests: 64,
            max_idle_per_host: 64,
            // A held Put Blob is never abandoned and sent again: each one
            // held is a file open on the connection.
            patience: relay_storage::watch::Patience::both(Duration::from_secs(3600)),
            ..Default::default()
        },
    );
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let dir = Scratch::new("credit64");
    const FILES: u64 = 64;
    const SIZE: u64 = 4 * KIB;
    let mut files = Vec::new();
    for i in 0..FILES {
        let name = format!("s{i:02}.bin");
        let sha = write_random(&dir.path(&format!("d/{name}")), SIZE, 640 + i);
        files.push((name, sha));
    }
    let mut a = vec![
        "upload".to_string(),
        dir.path("d").display().to_string(),
        "--json".into(),
    ];
    a.extend(relay.client_args(&container));
    let client = tokio::spawn(async move { run_client(&a, &[], T).await });
    let active = || relay.shared.metrics.transfers_active.load(Ordering::SeqCst);
    wait_until("more than 4 files at once (16 Put Blobs held)", || {
        assert!(!client.is_finished(), "the client ended early");
        proxy.stats.held.load(Ordering::SeqCst) >= 16
    })
    .await;
    assert!(active() >= 16, "{} files open", active());
    proxy.release();
    let out = client.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["totals"]["committed"], FILES);
    for (name, sha) in &files {
        assert_eq!(
            blob_sha(&container, &format!("d/{name}")).await,
            (SIZE, sha.clone())
        );
    }
    relay.stop().await;
}

/// A transport that grants the relay no credit on any stream: it can never
/// write a frame back.
fn no_stream_credit() -> quinn::TransportConfig {
    let mut t = relay_transport::quic::Windows::default().transport();
    t.stream_receive_window(0u32.into());
    t
}

/// A peer that grants no stream credit cannot hold the
/// relay's Reject, Plan or Error writes: the transfers end, the refused
/// connection's pending slot comes back, the authenticated one's transfer
/// stops counting as active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_grants_no_stream_credit_cannot_pin_a_transfer() {
    let container = new_container("nocredit").await;
    let relay = relay_with(&container, |cfg| {
        cfg.listen.admission.auth_deadline = Duration::from_secs(3600);
    });
    let admission = relay.shared.admission.clone();
    let active = || relay.shared.metrics.transfers_active.load(Ordering::SeqCst);
    // Refused: the Reject cannot be written.
    let (_c1, refused) = Dial::to(&relay)
        .transport(no_stream_credit())
        .connect()
        .await;
    let (mut send, _recv) = refused.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    let o = offer("not-a-token-0123456789", &container, "x.bin", 1000);
    write_frame(&mut send, &Message::Offer(o))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_until("the refused transfer ended", || {
        active() == 0 && admission.pending_now() == 0
    })
    .await;
    // Authenticated: the Plan cannot be written, nor the Error after it.
    let (_c2, valid) = Dial::to(&relay)
        .transport(no_stream_credit())
        .connect()
        .await;
    let (mut send, _recv) = valid.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    let o = offer(TOKEN, &container, "y.bin", 1000);
    write_frame(&mut send, &Message::Offer(o))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_until("the Offer was read", || admission.authenticated_now() == 1).await;
    wait_until("the unanswerable transfer ended", || active() == 0).await;
    assert!(!blob_exists(&container, "y.bin").await);
    relay.stop().await;
}

/// After a receive failure the client hears the Error while
/// the relay still waits for a block it sent to storage (kept for a resume),
/// not after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_error_comes_before_in_flight_blocks_are_drained() {
    let container = new_container("errorfirst").await;
    let proxy = proxy().await;
    proxy.hold(Op::PutBlock);
    // The held Put Block is never abandoned for want of an answer: only its
    // release ends it.
    let storage = shared_azurite().storage_at(
        &proxy.url(),
        relay_storage::blob::WriterOptions {
            patience: relay_storage::watch::Patience::both(Duration::from_secs(3600)),
            ..Default::default()
        },
    );
    let relay = RelayHandle::start(storage, RelayOptions::default());
    let (_c, conn) = Dial::to(&relay).connect().await;
    // Two 5 MiB blocks and a bit; the stream ends after the first block.
    let size = 10 * MIB + 1000;
    let (mut send, mut recv, plan) =
        open_with_offer(&conn, offer(TOKEN, &container, "e.bin", size)).await;
    assert!(matches!(plan, Message::Plan(_)), "{plan:?}");
    write_frame(
        &mut send,
        &Message::Start(Start {
            offset: 0,
            encoding: None,
        }),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let chunk = vec![7u8; 64 * KIB as usize];
    for _ in 0..(5 * MIB / (64 * KIB)) + 1 {
        send.write_all(&chunk)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    proxy.wait_held(1, T).await;
    let _ = send.finish();
    let answer = tokio::time::timeout(T, read_frame(&mut recv))
        .await
        .unwrap_or_else(|_| panic!("no answer while a Put Block is held"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(answer, Message::Error(_)), "{answer:?}");
    assert_eq!(
        (
            proxy.stats.requests_of(Op::PutBlock),
            proxy.stats.answered_of(Op::PutBlock)
        ),
        (1, 0),
        "the Error came after the held Put Block"
    );
    proxy.release();
    assert!(!blob_exists(&container, "e.bin").await);
    relay.stop().await;
}
