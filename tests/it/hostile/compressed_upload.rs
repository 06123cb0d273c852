//! Hostile compressed chunks against a real relay: a raw client
//! agrees on compression, sends a valid Offer and `Start{encoding: zstd}`,
//! then one of `relay_proto::hostile_chunks`. Each is refused with
//! `bad_encoding` and a reason naming what it did, nothing is published, and
//! every byte of the memory budget (blocks and the decoder) comes back. A
//! positive control shows the same raw client's valid chunks commit.

use std::time::{Duration, Instant};

use relay_proto::chunk::Deflater;
use relay_proto::hostile_chunks as hostile;
use relay_proto::protocol::{Code, Encoding, Message, Start, Trailer};
use relay_tests::blobs::{blob_exists, blob_sha};
use relay_tests::hostile::{hostile_chunks, offer, open_with_offer};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN};
use relay_transport::frames::{read_frame, write_frame};
use sha2::Digest;

const T: Duration = Duration::from_secs(60);

/// Offers `blob` of `size` bytes, starts compressed at 0, sends `wire` and
/// (when `trailer` is given) the Trailer; returns the relay's answer.
async fn send_chunks(
    conn: &quinn::Connection,
    container: &str,
    blob: &str,
    size: u64,
    wire: &[u8],
    trailer: Option<String>,
) -> Message {
    let (mut send, mut recv, plan) =
        open_with_offer(conn, offer(TOKEN, container, blob, size)).await;
    match plan {
        Message::Plan(p) => assert_eq!(p.resume_offset, 0),
        other => panic!("expected a Plan, got {other:?}"),
    }
    let start = Start {
        offset: 0,
        encoding: Some(Encoding::Zstd),
    };
    write_frame(&mut send, &Message::Start(start))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The relay may stop reading as soon as it refuses: a failed write is fine.
    let _ = send.write_all(wire).await;
    if let Some(sha256) = trailer {
        let _ = write_frame(&mut send, &Message::Trailer(Trailer { sha256 })).await;
    }
    match tokio::time::timeout(T, read_frame(&mut recv)).await {
        Ok(Ok(m)) => m,
        other => panic!("no answer: {other:?}"),
    }
}

/// Waits (bounded) until every byte of the budget is back.
async fn budget_returns(relay: &RelayHandle) {
    let deadline = Instant::now() + T;
    while relay.shared.limits.budget.in_use_bytes() > 0 {
        assert!(Instant::now() < deadline, "budget never returned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hostile_chunk_is_refused_and_publishes_nothing() {
    let (relay, container) = RelayHandle::with_container("zhostile", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).zstd(true).connect().await;
    assert!(relay_transport::tls::agreed_zstd(&conn));
    let cases = hostile_chunks();
    for (name, (wire, size), reason) in cases {
        let blob = format!("{name}.bin");
        // Bytes after the chunk, as a peer that keeps going would send them.
        let mut wire = wire;
        wire.extend(Deflater::plain(&hostile::text(64)));
        match send_chunks(&conn, &container, &blob, size, &wire, None).await {
            Message::Error(f) => {
                assert_eq!(f.code, Code::BadEncoding, "{name}: {f:?}");
                assert!(f.message.contains(reason), "{name}: {}", f.message);
                assert!(
                    f.message.contains("nothing committed"),
                    "{name}: {}",
                    f.message
                );
            }
            other => panic!("{name}: expected an Error, got {other:?}"),
        }
        assert!(!blob_exists(&container, &blob).await, "{name}: published");
        budget_returns(&relay).await;
    }
    // Positive control: the same raw client's valid chunks commit the file.
    let file = hostile::text(3 << 20 | 777);
    let mut d = Deflater::new().unwrap_or_else(|e| panic!("{e}"));
    let mut wire = Vec::new();
    for part in file.chunks(1 << 20) {
        wire.extend(d.chunk(part, 3).unwrap_or_else(|e| panic!("{e}")));
    }
    let sha = hex::encode(sha2::Sha256::digest(&file));
    match send_chunks(
        &conn,
        &container,
        "good.txt",
        file.len() as u64,
        &wire,
        Some(sha.clone()),
    )
    .await
    {
        Message::Receipt(r) => assert_eq!(r.sha256, sha),
        other => panic!("expected a Receipt, got {other:?}"),
    }
    assert_eq!(
        blob_sha(&container, "good.txt").await,
        (file.len() as u64, sha)
    );
    budget_returns(&relay).await;
    relay.stop().await;
}

/// A peer that did not announce compression (plain ALPN) and sends a
/// compressed Start all the same is refused: chunks only where both agreed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_chunks_without_agreement_are_refused() {
    let (relay, container) = RelayHandle::with_container("znoagree", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).zstd(false).connect().await;
    assert!(!relay_transport::tls::agreed_zstd(&conn));
    let wire = Deflater::plain(&hostile::text(100));
    match send_chunks(&conn, &container, "x.bin", 100, &wire, None).await {
        Message::Error(f) => {
            assert_eq!(f.code, Code::BadEncoding, "{f:?}");
            assert!(f.message.contains("not agreed"), "{}", f.message);
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    assert!(!blob_exists(&container, "x.bin").await);
    relay.stop().await;
}

/// 6 MiB and a bit of text as honest zstd chunks: a file with blocks staged
/// before its last chunk.
fn honest_prefix() -> (Vec<u8>, Vec<u8>) {
    let file = hostile::text(6 << 20 | 4321);
    let mut d = Deflater::new().unwrap_or_else(|e| panic!("{e}"));
    let mut wire = Vec::new();
    for part in file.chunks(1 << 20) {
        wire.extend(d.chunk(part, 3).unwrap_or_else(|e| panic!("{e}")));
    }
    (file, wire)
}

/// The file's LAST chunk is hostile: every byte it declares comes out, the
/// Trailer names exactly those bytes, and only the chunk's end gives it away.
/// Refused with `bad_encoding`, nothing published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_last_chunk_is_refused_and_publishes_nothing() {
    let (relay, container) = RelayHandle::with_container("zlast", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).zstd(true).connect().await;
    let (prefix, prefix_wire) = honest_prefix();
    // (name, the last chunk and its declared size, the bytes it declares,
    // what the refusal says)
    type Case = (&'static str, (Vec<u8>, u64), Vec<u8>, &'static str);
    let cases: [Case; 3] = [
        (
            "no-checksum",
            hostile::unchecked_end(),
            hostile::text(5000),
            "end inside its frame",
        ),
        (
            "past-its-chunk",
            (hostile::bomb().0, 1000),
            vec![0u8; 1000],
            "decompression bomb",
        ),
        (
            "bomb",
            hostile::last_bomb(),
            vec![0u8; 1 << 20],
            "decompression bomb",
        ),
    ];
    for (name, (chunk, declared), bytes, reason) in cases {
        for with_prefix in [false, true] {
            let blob = format!("{name}-{with_prefix}.bin");
            let (mut file, mut wire) = match with_prefix {
                true => (prefix.clone(), prefix_wire.clone()),
                false => (Vec::new(), Vec::new()),
            };
            file.extend_from_slice(&bytes);
            wire.extend_from_slice(&chunk);
            assert_eq!(bytes.len() as u64, declared);
            let sha = hex::encode(sha2::Sha256::digest(&file));
            let size = file.len() as u64;
            match send_chunks(&conn, &container, &blob, size, &wire, Some(sha)).await {
                Message::Error(f) => {
                    assert_eq!(f.code, Code::BadEncoding, "{blob}: {f:?}");
                    assert!(f.message.contains(reason), "{blob}: {}", f.message);
                    assert!(f.message.contains("nothing committed"), "{blob}");
                }
                other => panic!("{blob}: expected an Error, got {other:?}"),
            }
            assert!(!blob_exists(&container, &blob).await, "{blob}: published");
            budget_returns(&relay).await;
        }
    }
    relay.stop().await;
}

/// An honest file whose last 4 wire bytes (the last frame's checksum) arrive
/// after the relay has every file byte, as after a lost last packet: the relay
/// waits for them before it reads the Trailer, and commits the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_frames_late_checksum_is_waited_for() {
    let (relay, container) = RelayHandle::with_container("zlate", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).zstd(true).connect().await;
    let (prefix, wire) = honest_prefix();
    for (blob, file, wire) in [
        ("one-chunk.txt", hostile::text(5000), {
            let mut d = Deflater::new().unwrap_or_else(|e| panic!("{e}"));
            d.chunk(&hostile::text(5000), 3)
                .unwrap_or_else(|e| panic!("{e}"))
        }),
        ("blocks.txt", prefix, wire),
    ] {
        let size = file.len() as u64;
        let sha = hex::encode(sha2::Sha256::digest(&file));
        let received = relay.shared.metrics.bytes_received.clone();
        let before = received.load(std::sync::atomic::Ordering::SeqCst);
        let (mut send, mut recv, plan) =
            open_with_offer(&conn, offer(TOKEN, &container, blob, size)).await;
        assert!(matches!(plan, Message::Plan(_)), "{plan:?}");
        let start = Start {
            offset: 0,
            encoding: Some(Encoding::Zstd),
        };
        write_frame(&mut send, &Message::Start(start))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (body, late) = wire.split_at(wire.len() - 4);
        send.write_all(body).await.unwrap_or_else(|e| panic!("{e}"));
        // Deterministic: the relay has every file byte before the rest goes.
        let deadline = Instant::now() + T;
        while received.load(std::sync::atomic::Ordering::SeqCst) < before + size {
            assert!(
                Instant::now() < deadline,
                "{blob}: the relay never had the file's bytes"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        send.write_all(late).await.unwrap_or_else(|e| panic!("{e}"));
        let _ = write_frame(
            &mut send,
            &Message::Trailer(Trailer {
                sha256: sha.clone(),
            }),
        )
        .await;
        match tokio::time::timeout(T, read_frame(&mut recv)).await {
            Ok(Ok(Message::Receipt(r))) => assert_eq!(r.sha256, sha, "{blob}"),
            other => panic!("{blob}: expected a Receipt, got {other:?}"),
        }
        assert_eq!(blob_sha(&container, blob).await, (size, sha), "{blob}");
    }
    budget_returns(&relay).await;
    relay.stop().await;
}

/// No memory for the decoder within the budget wait: the relay answers
/// `busy` (retryable, as for a block) with the budget's reason, never
/// `bad_encoding` or `internal`, publishes nothing and gives the memory back.
/// The budget holds the file's one block but not the decoder beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_memory_for_the_decoder_is_busy() {
    let opts = RelayOptions {
        memory_budget: (2 << 20) + (64 << 10),
        configure: Some(Box::new(|cfg| {
            cfg.limits.token_share_percent = 100;
            cfg.limits.budget_wait = Duration::from_secs(1);
        })),
        ..Default::default()
    };
    let (relay, container) = RelayHandle::with_container("znomem", opts).await;
    let (_c, conn) = Dial::to(&relay).zstd(true).connect().await;
    let file = hostile::text(100_000);
    let wire = Deflater::new()
        .and_then(|mut d| d.chunk(&file, 3))
        .unwrap_or_else(|e| panic!("{e}"));
    let sha = hex::encode(sha2::Sha256::digest(&file));
    let size = file.len() as u64;
    match send_chunks(&conn, &container, "f.txt", size, &wire, Some(sha)).await {
        Message::Error(f) => {
            assert_eq!(f.code, Code::Busy, "{f:?}");
            assert!(f.message.contains("no memory"), "{}", f.message);
            assert!(!f.outcome_unknown, "{f:?}");
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    assert!(!blob_exists(&container, "f.txt").await);
    budget_returns(&relay).await;
    relay.stop().await;
}
