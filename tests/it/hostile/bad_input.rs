//! Bad input gets a clear error and nothing is published: hostile Offers sent with a
//! raw protocol client, and the CLI's own refusals.

use std::time::Duration;

use relay_proto::codec::encode;
use relay_proto::limits::MAX_FRAME_LEN;
use relay_proto::protocol::{Code, Message, Offer, Secret, Start, Trailer};
use relay_server::TestHooks;
use relay_tests::blobs::blob_exists;
use relay_tests::files::{Scratch, write_random};
use relay_tests::hostile::open_with_offer;
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, stderr, summary};
use relay_transport::frames::{read_frame, write_frame};

const T: Duration = Duration::from_secs(120);

async fn setup(tag: &str, opts: RelayOptions) -> (RelayHandle, String) {
    RelayHandle::with_container(tag, opts).await
}

fn offer(container: &str, blob: &str, size: u64) -> Offer {
    let mut o = relay_tests::hostile::offer(TOKEN, container, blob, size);
    o.block_size = None;
    o
}

/// Sends one Offer; returns the relay's first answer.
async fn answer(conn: &quinn::Connection, o: Offer) -> Message {
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::Offer(o))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn rejected(m: &Message) -> Code {
    match m {
        Message::Reject(f) => {
            assert!(!f.message.is_empty());
            f.code
        }
        other => panic!("expected a Reject, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_offers_are_rejected_with_reasons() {
    let (relay, container) = setup("hostile", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;

    let long = "a".repeat(1025);
    for name in [
        "",
        "../x",
        "a/../b",
        "a\u{1}b",
        "dir/",
        "file.",
        "a//b",
        long.as_str(),
    ] {
        let code = rejected(&answer(&conn, offer(&container, name, 10)).await);
        assert_eq!(code, Code::InvalidName, "{name:?}");
    }
    // A refusal for the token or its grant closes a connection that has no
    // valid Offer (it would hold a pending slot for nothing): a new one each.
    let mut o = offer(&container, "ok.bin", 10);
    o.token = Secret("not-a-valid-token-at-all".into());
    assert_eq!(rejected(&answer(&conn, o).await), Code::Unauthorized);
    let (_c, conn) = Dial::to(&relay).connect().await;
    let mut o = offer(&container, "ok.bin", 10);
    o.token = Secret(LIMITED_TOKEN.into());
    assert_eq!(rejected(&answer(&conn, o).await), Code::Forbidden);
    let (_c, conn) = Dial::to(&relay).connect().await;
    let mut o = offer(&container, "ok.bin", 10);
    o.version = 99;
    assert_eq!(rejected(&answer(&conn, o).await), Code::UnsupportedVersion);
    let o = offer(&container, "huge.bin", u64::MAX);
    assert_eq!(rejected(&answer(&conn, o).await), Code::TooLarge);
    let mut o = offer(&container, "ok.bin", 10);
    o.block_size = Some(1 << 20);
    assert_eq!(rejected(&answer(&conn, o).await), Code::InvalidOffer);
    let mut o = offer(&container, "ok.bin", 10);
    o.metadata.insert("sha256".into(), "forged".into());
    assert_eq!(rejected(&answer(&conn, o).await), Code::InvalidOffer);
    let o = offer("Bad_Container", "ok.bin", 10);
    assert!(matches!(
        rejected(&answer(&conn, o).await),
        Code::InvalidName | Code::Forbidden
    ));
    let (_c, conn) = Dial::to(&relay).connect().await;

    // Malformed and oversized frames.
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    let mut bad = 9u32.to_be_bytes().to_vec();
    bad.extend_from_slice(b"{garbage}");
    send.write_all(&bad).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        rejected(
            &read_frame(&mut recv)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        ),
        Code::InvalidOffer
    );
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    send.write_all(&((MAX_FRAME_LEN as u32) + 1).to_be_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        rejected(
            &read_frame(&mut recv)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        ),
        Code::InvalidOffer
    );

    // The connection survives all of that: a good upload still works.
    assert!(!blob_exists(&container, "ok.bin").await);
    relay.stop().await;
}

/// An eager Offer (bytes follow without waiting for the Plan) that the relay
/// refuses: the Reject explains, and the stream is stopped so the client's bytes
/// stop too (else its writes would block on flow control until a timeout).
///
/// Every interleaving is legal: the relay may refuse (and stop the stream) before
/// the test wrote its Start frame, in the middle of the bytes, or once flow control
/// blocks them. So any write after the Offer may be the one that fails; what must
/// hold is that one fails, with the relay's REJECTED code, that the Reject names
/// the reason, and that the relay took no byte and staged nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_eager_offer_stops_the_bytes() {
    let (relay, container) = setup("eagerno", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;
    let size = 256 * 1024 * 1024;
    let mut o = offer(&container, "eager.bin", size);
    o.token = Secret("not-a-valid-token-at-all".into());
    o.eager = true;
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    let frame = |m: &Message| bytes::Bytes::from(encode(m).unwrap_or_else(|e| panic!("{e}")));
    let offer_frame = frame(&Message::Offer(o));
    let start_frame = frame(&Message::Start(Start::plain(0)));
    let chunk = bytes::Bytes::from(vec![7u8; 1 << 20]);
    // Offer, Start and the whole file, as an eager client sends them; the first
    // failed write ends it.
    let writing = async {
        send.write_chunk(offer_frame).await?;
        send.write_chunk(start_frame).await?;
        for _ in 0..size >> 20 {
            send.write_chunk(chunk.clone()).await?;
        }
        Ok::<(), quinn::WriteError>(())
    };
    // A bound against a hang only: the relay stops the stream at once, and without
    // the stop the writes block for good on flow control (256 MiB is far more than
    // the relay's stream window).
    let written = tokio::time::timeout(Duration::from_secs(120), writing)
        .await
        .unwrap_or_else(|_| panic!("the relay never stopped the refused stream"));
    // Stopped; or, once the Reject was acknowledged, the whole connection
    // closed (it has no valid Offer: `offer_refused`), whichever the writer
    // sees first. The Reject is readable either way.
    match written {
        Err(quinn::WriteError::Stopped(code)) => assert_eq!(
            code.into_inner(),
            u64::from(relay_proto::protocol::app_error::REJECTED)
        ),
        Err(quinn::WriteError::ConnectionLost(quinn::ConnectionError::ApplicationClosed(c))) => {
            assert_eq!(
                c.error_code.into_inner(),
                u64::from(relay_proto::protocol::app_error::UNAUTHENTICATED)
            )
        }
        other => panic!("expected the stream stopped, got {other:?}"),
    }
    let answer = read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rejected(&answer), Code::Unauthorized);
    // The relay read no byte of the file and staged nothing.
    let metrics = relay_server::operations::health::render(&relay.shared);
    assert!(
        metrics.contains("blob_relay_bytes_received_total 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("blob_relay_bytes_staged_total 0\n"),
        "{metrics}"
    );
    assert!(!blob_exists(&container, "eager.bin").await);
    assert!(
        relay_tests::blobs::writer(&container, "eager.bin")
            .uncommitted_blocks()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_empty(),
        "nothing staged"
    );
    relay.stop().await;
}

/// Sends an Offer for `size` bytes, then `body`, then (optionally) a Trailer.
async fn send_raw(
    conn: &quinn::Connection,
    o: Offer,
    body: &[u8],
    trailer: Option<&str>,
) -> Message {
    let (mut send, mut recv, answer) = open_with_offer(conn, o).await;
    match answer {
        Message::Plan(p) => assert_eq!(p.resume_offset, 0),
        other => panic!("expected a Plan, got {other:?}"),
    }
    let mut bytes = encode(&Message::Start(Start::plain(0))).unwrap_or_else(|e| panic!("{e}"));
    bytes.extend_from_slice(body);
    if let Some(h) = trailer {
        bytes.extend(
            encode(&Message::Trailer(Trailer { sha256: h.into() }))
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    send.write_all(&bytes)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = send.finish();
    read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn error_code(m: &Message) -> Code {
    match m {
        Message::Error(f) => f.code,
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_stream_and_wrong_trailer_publish_nothing() {
    let (relay, container) = setup("truncated", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;
    let body = vec![7u8; 6 << 20];

    // Ends early: 1 MiB of an announced 6 MiB.
    let m = send_raw(
        &conn,
        offer(&container, "short.bin", body.len() as u64),
        &body[..1 << 20],
        None,
    )
    .await;
    assert_eq!(error_code(&m), Code::Truncated);
    assert!(!blob_exists(&container, "short.bin").await);

    // All bytes, no Trailer.
    let m = send_raw(
        &conn,
        offer(&container, "notrailer.bin", body.len() as u64),
        &body,
        None,
    )
    .await;
    assert_eq!(error_code(&m), Code::Truncated);
    assert!(!blob_exists(&container, "notrailer.bin").await);

    // All bytes, a Trailer with another hash.
    let wrong = "00".repeat(32);
    let m = send_raw(
        &conn,
        offer(&container, "wronghash.bin", body.len() as u64),
        &body,
        Some(&wrong),
    )
    .await;
    assert_eq!(error_code(&m), Code::HashMismatch);
    assert!(!blob_exists(&container, "wronghash.bin").await);

    // A manifest hash that disagrees with the bytes.
    let right = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    let mut o = offer(&container, "manifest.bin", body.len() as u64);
    o.sha256 = Some("ab".repeat(32));
    let m = send_raw(&conn, o, &body, Some(&right)).await;
    assert_eq!(error_code(&m), Code::HashMismatch);
    assert!(!blob_exists(&container, "manifest.bin").await);

    // And the control: the same bytes with the right Trailer commit.
    let m = send_raw(
        &conn,
        offer(&container, "good.bin", body.len() as u64),
        &body,
        Some(&right),
    )
    .await;
    assert!(
        matches!(m, Message::Receipt(ref r) if r.sha256 == right),
        "{m:?}"
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_side_corruption_is_caught_by_the_verifier() {
    // Test-only hook: the relay flips one byte of what it received before hashing,
    // as a bad NIC or memory would. The hashes disagree, so nothing is published.
    let hooks = TestHooks {
        mangle: Some(std::sync::Arc::new(|offset: u64, chunk: &mut [u8]| {
            let target = 3 * (1u64 << 20) + 5;
            if (offset..offset + chunk.len() as u64).contains(&target) {
                chunk[(target - offset) as usize] ^= 0x01;
            }
        })),
        ..Default::default()
    };
    let (relay, container) = setup(
        "corrupt",
        RelayOptions {
            hooks,
            ..Default::default()
        },
    )
    .await;
    let dir = Scratch::new("corrupt");
    let file = dir.path("victim.bin");
    write_random(&file, 12 << 20, 3);
    let mut a: Vec<String> = [
        "upload",
        file.to_str().unwrap_or_default(),
        "--json",
        "--block-size",
        "5MiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(relay.client_args(&container));
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(1));
    let s = summary(&out);
    assert_eq!(s["files"][0]["status"], "failed");
    assert_eq!(s["files"][0]["error"]["code"], "hash_mismatch");
    let stderr = stderr(&out);
    assert!(
        stderr.contains("victim.bin") && stderr.contains("mismatch"),
        "{stderr}"
    );
    assert!(!blob_exists(&container, "victim.bin").await);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_errors_are_clear() {
    let (relay, container) = setup("cli", RelayOptions::default()).await;
    let dir = Scratch::new("cli");
    let file = dir.path("f.bin");
    write_random(&file, 100, 1);
    let path = file.to_str().unwrap_or_default().to_string();
    let base = |token: &str, to: &str| -> Vec<String> {
        let mut a = vec!["upload".to_string(), path.clone()];
        a.extend(relay.client_args(to));
        let n = a.len();
        a[n - 1] = token.to_string();
        a
    };

    // Unknown token: one setup error (exit 2), whatever the number of files.
    let out = run_client(&base("wrong-token-0123456789", &container), &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("the relay refused the token (refused: unknown or expired token)"),
        "{e}"
    );

    // A token limited to another container: also a setup error.
    let out = run_client(&base(LIMITED_TOKEN, &container), &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("may not write container"), "{e}");

    // A missing container is one setup error that says so.
    let out = run_client(&base(TOKEN, "no-such-container"), &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("container \"no-such-container\" does not exist"),
        "{e}"
    );

    // Wrong pin: the handshake is refused, exit 2 (setup), no transfer.
    let mut a = base(TOKEN, &container);
    let pin = a
        .iter()
        .position(|s| s == "--relay-cert-sha256")
        .map(|i| i + 1)
        .unwrap_or(0);
    a[pin] = "00".repeat(32);
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("fingerprint"), "{e}");

    // No trust option at all: a usage error that says what to do.
    let a: Vec<String> = [
        "upload",
        &path,
        "--relay",
        &relay.addr.to_string(),
        "--to",
        &container,
        "--token",
        TOKEN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--relay-cert-sha256"));

    // The token comes from RELAY_TOKEN too.
    let mut a = base(TOKEN, &container);
    a.truncate(a.len() - 2);
    let out = run_client(&a, &[("RELAY_TOKEN", TOKEN)], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(blob_exists(&container, "f.bin").await);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_token_expires_without_restart() {
    let (relay, container) = setup("expire", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;
    // The limited token works for its container...
    let mut o = offer("allowed-only", "x.bin", 1);
    o.token = Secret(LIMITED_TOKEN.into());
    // (container may not exist; we only care that auth passes: no Unauthorized/Forbidden)
    let first = answer(&conn, o.clone()).await;
    assert!(
        !matches!(&first, Message::Reject(f) if matches!(f.code, Code::Unauthorized | Code::Forbidden)),
        "{first:?}"
    );
    // ...until it is removed from the tokens file: the relay looks at the file's
    // mtime every few seconds, so ask until it refuses (the bound only guards
    // against a relay that never reloads).
    relay.rewrite_tokens(&format!("{TOKEN}\n"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match answer(&conn, o.clone()).await {
            Message::Reject(f) if f.code == Code::Unauthorized => break,
            Message::Reject(f) => assert!(
                f.code != Code::Forbidden,
                "the limited token was not refused as unknown: {f:?}"
            ),
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed token still works after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = container;
    relay.stop().await;
}

/// The sample `series` of the relay's /metrics text (name and labels as rendered).
fn metric(relay: &RelayHandle, series: &str) -> Option<u64> {
    let text = relay_server::operations::health::render(&relay.shared);
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn rejections(relay: &RelayHandle, reason: &str) -> Option<u64> {
    metric(
        relay,
        &format!("blob_relay_rejections_total{{reason=\"{reason}\"}}"),
    )
}

/// Streams refused before an Offer was parsed (bad frame,
/// another message first, ended early) are counted by reason in /metrics, and
/// so are refused Offers, by their code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_streams_are_counted_by_reason() {
    let (relay, container) = setup("reasons", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;
    for r in [
        "bad_frame",
        "not_offer",
        "offer_timeout",
        "closed_early",
        "unauthorized",
    ] {
        assert_eq!(rejections(&relay, r), Some(0), "{r}");
    }

    // Garbage where the Offer should be. (The count is taken before the Reject
    // is written, so it is there once the Reject arrived.)
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    let mut bad = 9u32.to_be_bytes().to_vec();
    bad.extend_from_slice(b"{garbage}");
    send.write_all(&bad).await.unwrap_or_else(|e| panic!("{e}"));
    let m = read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rejected(&m), Code::InvalidOffer);
    assert_eq!(rejections(&relay, "bad_frame"), Some(1));

    // A Start before any Offer.
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::Start(Start::plain(0)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let m = read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rejected(&m), Code::InvalidOffer);
    assert_eq!(rejections(&relay, "not_offer"), Some(1));

    // Half a length prefix, then the end of the stream.
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    send.write_all(&[0, 0])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = send.finish();
    let m = read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rejected(&m), Code::InvalidOffer);
    assert_eq!(rejections(&relay, "closed_early"), Some(1));

    // Refused Offers count under their code.
    let mut o = offer(&container, "ok.bin", 10);
    o.token = Secret("not-a-valid-token-at-all".into());
    assert_eq!(rejected(&answer(&conn, o).await), Code::Unauthorized);
    assert_eq!(rejections(&relay, "unauthorized"), Some(1));
    // That closed the connection (no Offer of it was valid): a new one.
    let (_c, conn) = Dial::to(&relay).connect().await;
    let o = offer(&container, "a\nb", 10);
    assert_eq!(rejected(&answer(&conn, o).await), Code::InvalidName);
    assert_eq!(rejections(&relay, "invalid_name"), Some(1));

    // A stream ended with nothing on it gets no answer (nobody reads one), so
    // wait for the count rather than for a reply.
    let (mut send, _recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    let _ = send.finish();
    let counted = async {
        while rejections(&relay, "closed_early") != Some(2) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), counted)
        .await
        .unwrap_or_else(|_| panic!("an empty stream was not counted"));
    assert_eq!(rejections(&relay, "bad_frame"), Some(1));
    relay.stop().await;
}

/// Names with bidirectional-control characters (which make
/// `invoice\u{202e}fdp.exe` read as `invoiceexe.pdf`) are refused with a clear
/// message, by the relay and by the client before it sends anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidi_names_are_refused_with_a_clear_message() {
    let (relay, container) = setup("bidi", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;
    for c in ['\u{202e}', '\u{2066}', '\u{200f}', '\u{61c}'] {
        let name = format!("invoice{c}fdp.exe");
        match answer(&conn, offer(&container, &name, 10)).await {
            Message::Reject(f) => {
                assert_eq!(f.code, Code::InvalidName);
                assert!(f.message.contains("bidirectional-control"), "{}", f.message);
                assert!(!f.message.contains(c), "raw {c:?} in {}", f.message);
            }
            other => panic!("{name:?}: expected a Reject, got {other:?}"),
        }
        let mut o = offer(&container, "ok.bin", 10);
        o.metadata.insert("note".into(), format!("a{c}b"));
        match answer(&conn, o).await {
            Message::Reject(f) => assert!(f.message.contains("bidirectional-control"), "{f:?}"),
            other => panic!("expected a Reject, got {other:?}"),
        }
        assert!(!blob_exists(&container, &name).await);
    }

    // The real client refuses such a file by itself, with the reason.
    let dir = Scratch::new("bidi");
    let file = dir.path("invoice\u{202e}fdp.exe");
    write_random(&file, 100, 4);
    let mut a: Vec<String> = vec![
        "upload".into(),
        file.to_string_lossy().into_owned(),
        "--json".into(),
    ];
    a.extend(relay.client_args(&container));
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(1));
    let s = summary(&out);
    assert_eq!(s["files"][0]["error"]["code"], "invalid_name", "{s}");
    let msg = s["files"][0]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        msg.contains("bidirectional-control character (U+202E)"),
        "{msg}"
    );
    assert!(!blob_exists(&container, "invoice\u{202e}fdp.exe").await);
    relay.stop().await;
}

/// A tokens file with one line that breaks a rule (a
/// 13-character token) is not a reason to keep serving the previous tokens: the
/// token it no longer lists is refused, the tokens it lists still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_tokens_line_does_not_keep_a_removed_token() {
    let (relay, container) = setup("badline", RelayOptions::default()).await;
    let (_c, conn) = Dial::to(&relay).connect().await;
    let mut limited = offer("allowed-only", "x.bin", 1);
    limited.token = Secret(LIMITED_TOKEN.into());
    let auth_refused = |m: &Message| matches!(m, Message::Reject(f) if matches!(f.code, Code::Unauthorized | Code::Forbidden));
    assert!(!auth_refused(&answer(&conn, limited.clone()).await));

    // LIMITED_TOKEN removed; a typo added. The relay looks at the file every 2 s:
    // ask until it has (a relay keeping the old tokens never refuses).
    relay.rewrite_tokens(&format!("# ops\nshort-13-char\n{TOKEN}\n"));
    let revoked = async {
        loop {
            let m = answer(&conn, limited.clone()).await;
            if auth_refused(&m) {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let m = tokio::time::timeout(Duration::from_secs(30), revoked)
        .await
        .unwrap_or_else(|_| panic!("the removed token is still accepted"));
    assert_eq!(rejected(&m), Code::Unauthorized);
    // The valid line still stands.
    let m = answer(&conn, offer(&container, "still.bin", 1)).await;
    assert!(matches!(m, Message::Plan(_)), "{m:?}");
    relay.stop().await;
}
