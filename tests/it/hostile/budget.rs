//! The relay's admission and memory against hostile peers:
//! peers that never authenticate cannot lock others out, pre-authentication
//! credit is small, and one token holder cannot hold the whole budget. Real
//! relay, real QUIC on loopback, Azurite; every committed blob is hashed.

use std::time::{Duration, Instant};

use relay_proto::protocol::{Code, Message, Start};
use relay_server::{BlockFill, Config};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, new_container, writer};
use relay_tests::files::{Scratch, write_random};
use relay_tests::hostile::{offer, open_with_offer, relay_with, upload_args};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, stderr};
use relay_transport::frames::{read_frame, write_frame};

const MIB: u64 = 1 << 20;
const T: Duration = Duration::from_secs(120);

/// Connections that never present a valid Offer hold no
/// `--max-connections` slot, are capped per source address, and are closed at
/// the deadline; a legitimate client uploads meanwhile. With many pending, new
/// peers must validate their address (Retry), which a real client does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_peers_cannot_lock_others_out() {
    let container = new_container("lockout").await;
    let relay = relay_with(&container, |cfg| {
        cfg.listen.max_connections = 2;
        cfg.listen.admission.max_pending = 16;
        cfg.listen.admission.max_per_address = 3;
        cfg.listen.admission.retry_above_pending = 6;
        // Long enough that every connection below is still pending when counted.
        cfg.listen.admission.auth_deadline = Duration::from_secs(20);
    });
    // Three "hosts" open as many tokenless connections as they may, and more.
    let mut held = Vec::new();
    let mut refused = 0;
    for host in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..5 {
            match Dial::to(&relay).from(host).try_connect().await {
                Ok(c) => held.push(c),
                Err(_) => refused += 1,
            }
        }
    }
    assert_eq!(held.len(), 9, "three per address are admitted");
    assert_eq!(refused, 6, "the rest are refused at once");
    let admission = relay.shared.admission.clone();
    assert_eq!(
        admission.authenticated_now(),
        0,
        "pending peers hold no connection slot"
    );
    assert!(
        admission
            .refusals
            .retry_sent
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "with many pending, new peers had to validate their address"
    );

    // A legitimate client from another address is admitted and uploads, twice
    // the connection limit's worth of files on one connection.
    let dir = Scratch::new("lockout");
    let file = dir.path("ok.bin");
    let sha = write_random(&file, 3 * MIB, 41);
    let out = run_client(&upload_args(&relay, &file, &container, TOKEN), &[], T).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(blob_sha(&container, "ok.bin").await, (3 * MIB, sha));

    // The tokenless connections are closed at the deadline, with a reason.
    for (_c, conn) in &held {
        let why = tokio::time::timeout(Duration::from_secs(60), conn.closed())
            .await
            .unwrap_or_else(|_| panic!("a tokenless connection outlived its deadline"));
        match why {
            quinn::ConnectionError::ApplicationClosed(c) => assert_eq!(
                c.error_code,
                quinn::VarInt::from_u32(relay_proto::protocol::app_error::UNAUTHENTICATED)
            ),
            other => panic!("unexpected close: {other}"),
        }
    }
    relay.stop().await;
}

/// Before a valid Offer a connection may not make the relay buffer
/// more than a small window: the relay advertises 1 MiB of connection credit,
/// raised only after authentication. (A peer that withholds byte 0 of every
/// stream can make quinn buffer everything up to the credit.)
#[test]
fn pre_auth_credit_is_small_and_raised_only_by_a_valid_offer() {
    let limits = relay_server::connection::admission::Limits::default();
    let windows = relay_transport::quic::Windows::default();
    assert!(limits.window_before_auth <= MIB);
    assert!(limits.window_before_auth < windows.connection_window / 16);
    assert!(limits.streams_before_auth <= 4);
    // The relay's whole pre-auth exposure is in its memory bound.
    let cfg = Config::for_tests(
        shared_azurite().storage(),
        relay_server::sign_in::auth::TokenStore::load(&tokens_file())
            .unwrap_or_else(|e| panic!("{e}")),
        256 * MIB,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bound = cfg.memory_bound();
    assert!(bound.pending >= cfg.listen.admission.max_pending as u64 * limits.window_before_auth);
    assert!(
        bound.authenticated
            >= cfg.listen.max_connections as u64 * cfg.listen.windows.connection_window
    );
    // Downloads: what the relay has written and not had acknowledged.
    let send_window = cfg
        .listen
        .windows
        .send_window
        .unwrap_or(cfg.listen.windows.connection_window);
    assert_eq!(
        bound.sending,
        cfg.listen.max_connections as u64 * send_window
    );
    assert_eq!(
        bound.total(),
        bound.base + bound.budget + bound.authenticated + bound.sending + bound.pending
    );
}

fn tokens_file() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hostile-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("tokens");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// One token holder asks for huge blocks and trickles bytes into the
/// ones it gets. Block size is capped, a token holds at most its share of the
/// budget, waiting for memory ends in a retryable `busy`, a block that fills too
/// slowly is cut, and another token's uploads go through meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_cannot_hold_the_budget() {
    let container = new_container("hog").await;
    let relay = RelayHandle::start(
        shared_azurite().storage(),
        RelayOptions {
            memory_budget: 64 * MIB,
            limited_to: container.clone(),
            configure: Some(Box::new(|cfg: &mut Config| {
                cfg.limits.max_block_size = 16 * MIB;
                cfg.limits.token_share_percent = 50;
                cfg.limits.budget_wait = Duration::from_secs(2);
                // Trickling blocks are cut 15 s after their memory is granted.
                cfg.limits.block_fill = BlockFill {
                    min_bytes_per_s: u64::MAX,
                    grace: Duration::from_secs(15),
                };
            })),
            ..Default::default()
        },
    );
    let (_c, conn) = Dial::to(&relay).connect().await;
    // A 1 GiB block is refused outright.
    let mut huge = offer(LIMITED_TOKEN, &container, "hog.bin", 64 << 30);
    huge.block_size = Some(1 << 30);
    match open_with_offer(&conn, huge).await.2 {
        Message::Reject(f) => assert_eq!(f.code, Code::TooLarge, "{f:?}"),
        other => panic!("expected a Reject, got {other:?}"),
    }

    // Three streams with 16 MiB blocks, a few bytes each: two fit the token's
    // 32 MiB share, the third waits and is told `busy`.
    let mut hogs = Vec::new();
    for i in 0..3 {
        let mut o = offer(LIMITED_TOKEN, &container, &format!("hog{i}.bin"), 64 * MIB);
        o.block_size = Some(16 * MIB);
        let (mut send, recv, answer) = open_with_offer(&conn, o).await;
        match answer {
            Message::Plan(p) => assert_eq!(p.resume_offset, 0),
            other => panic!("expected a Plan, got {other:?}"),
        }
        write_frame(&mut send, &Message::Start(Start::plain(0)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        send.write_all(&[7u8; 100])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        hogs.push((send, recv));
        // Observe the relay hold this block before the next stream asks.
        let want = ((i as u64) + 1).min(2) * 16 * MIB;
        let t0 = Instant::now();
        while relay.shared.limits.budget.in_use_bytes() < want && i < 2 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the relay never granted the block"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(
        relay.shared.limits.budget.in_use_bytes() <= 32 * MIB,
        "a token holds at most its share"
    );

    // Meanwhile the other token uploads (the global budget still has room).
    let dir = Scratch::new("hog");
    let file = dir.path("legit.bin");
    let sha = write_random(&file, 12 * MIB + 3, 51);
    let out = run_client(&upload_args(&relay, &file, &container, TOKEN), &[], T).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(blob_sha(&container, "legit.bin").await, (12 * MIB + 3, sha));

    // The waiting stream is told busy (retryable); the trickling ones are cut.
    let mut codes = Vec::new();
    for (_send, mut recv) in hogs {
        let m = tokio::time::timeout(Duration::from_secs(60), read_frame(&mut recv))
            .await
            .unwrap_or_else(|_| panic!("a hog stream was never ended"))
            .unwrap_or_else(|e| panic!("{e}"));
        match m {
            Message::Error(f) => codes.push((f.code, f.message)),
            other => panic!("expected an Error, got {other:?}"),
        }
    }
    assert!(
        codes.iter().filter(|(c, _)| *c == Code::Truncated).count() == 2
            && codes
                .iter()
                .any(|(c, m)| *c == Code::Busy && m.contains("memory")),
        "{codes:?}"
    );
    for i in 0..3 {
        assert!(
            writer(&container, &format!("hog{i}.bin"))
                .properties()
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .is_none()
        );
    }
    assert_eq!(
        relay.shared.limits.budget.in_use_bytes(),
        0,
        "every block returned"
    );
    relay.stop().await;
}
