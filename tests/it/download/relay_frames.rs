//! The relay's side of downloads over real QUIC against a real
//! relay and Azurite, spoken frame by frame: what comes back and how it is
//! checked, resume by ETag, read grants, a blob overwritten mid-read, a
//! listing of several storage pages, hostile names, and a client that stops
//! reading (its memory comes back after the write timeout).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use md5::{Digest as _, Md5};
use relay_proto::id_key::IdKey;
use relay_proto::protocol::{Check, Code, Message};
use relay_server::state::DownloadLimits;
use relay_storage::store::{Commit, Condition};
use relay_tests::blobs::{new_container, put_sealed, writer};
use relay_tests::download::{fetch, fetch_of, list, read_rest, start_fetch, upload_raw};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use sha2::Sha256;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 131 + i / 7919) as u8).wrapping_add(seed))
        .collect()
}

/// A relay on which the limited token reads and writes `container`, writes
/// (only) `write_only`, and reads the reserved `relay-boot`.
async fn relay(tag: &str, limits: DownloadLimits) -> (RelayHandle, String) {
    let container = new_container(tag).await;
    let grants = format!("{container}:rw,writeonly-{tag},relay-boot:r");
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: grants,
            configure: Some(Box::new(move |cfg| cfg.storage.download = limits)),
            ..Default::default()
        },
    );
    (relay, container)
}

fn source(m: &Message) -> &relay_proto::protocol::Source {
    match m {
        Message::Source(s) => s,
        other => panic!("expected a Source, got {other:?}"),
    }
}

fn refusal(m: &Message) -> Code {
    match m {
        Message::Reject(f) | Message::Error(f) => f.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_sealed_blob_comes_back_byte_exact_with_its_sha256() {
    let (relay, c) = relay("dlsealed", DownloadLimits::default()).await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    // Three ranges of 4 MiB, the last one short.
    let data = pattern((9 * MIB + 123) as usize, 1);
    let sha = hex::encode(Sha256::digest(&data));
    let receipt = upload_raw(&conn, LIMITED_TOKEN, &c, "dir/big ü.bin", &data).await;
    assert_eq!(receipt.sha256, sha);

    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "dir/big ü.bin")).await;
    let s = source(&got.first);
    assert_eq!(
        (s.check, s.sha256.as_deref()),
        (Check::Sealed, Some(sha.as_str()))
    );
    assert_eq!((s.size, s.offset), (data.len() as u64, 0));
    assert_eq!(s.etag, receipt.etag);
    assert_eq!(got.data.len(), data.len());
    assert_eq!(hex::encode(Sha256::digest(&got.data)), sha);
    // The seal's SHA-256 checks the whole blob at the client: no range is
    // read with storage's MD5, nor hashed by the relay.
    match got.end {
        Some(Message::Sent(sent)) => assert_eq!(sent.ranges_checked, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(relay.metric("blob_relay_fetches_completed_total"), Some(1));
    assert_eq!(
        relay.metric("blob_relay_bytes_sent_total"),
        Some(data.len() as u64)
    );
    // An empty blob: a Source and a Sent, nothing between.
    upload_raw(&conn, LIMITED_TOKEN, &c, "empty", b"").await;
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "empty")).await;
    assert_eq!(source(&got.first).check, Check::Sealed);
    assert_eq!((got.sections, got.data.len()), (0, 0));
    assert!(matches!(got.end, Some(Message::Sent(_))), "{:?}", got.end);
    relay.stop().await;
}

#[tokio::test]
async fn an_unsealed_blob_is_checked_by_its_content_md5_or_its_ranges() {
    let (relay, c) = relay("dlmd5", DownloadLimits::default()).await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    let data = pattern((MIB + 5) as usize, 2);
    let sha = hex::encode(Sha256::digest(&data));
    // Metadata that claims a SHA-256 under another deployment's seal: storage
    // writers can set metadata, so the relay does not vouch for it.
    let forged = IdKey::random().seal(&c, "direct.bin", data.len() as u64, &sha);
    put_sealed(&c, "direct.bin", &data, &sha, &forged).await;
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "direct.bin")).await;
    let s = source(&got.first);
    assert_eq!(s.check, Check::ContentMd5);
    assert_eq!(s.sha256, None);
    assert_eq!(s.content_md5, Some(hex::encode(Md5::digest(&data))));
    assert_eq!(got.data, data);
    // The Content-MD5 checks it whole: its ranges are not checked one by one.
    assert!(matches!(got.end, Some(Message::Sent(ref s)) if s.ranges_checked == 0));

    // Blocks committed without a Content-MD5: only the ranges' checks.
    let w = writer(&c, "blocks.bin");
    let ids: Vec<Vec<u8>> = vec![b"block-00".to_vec(), b"block-01".to_vec()];
    w.stage_block(&ids[0], Bytes::copy_from_slice(&data[..600_000]))
        .await
        .expect("stage");
    w.stage_block(&ids[1], Bytes::copy_from_slice(&data[600_000..]))
        .await
        .expect("stage");
    let meta = BTreeMap::new();
    w.commit(
        ids,
        &Commit {
            sha256_hex: &sha,
            seal: "not-a-seal",
            content_type: None,
            content_md5: None,
            metadata: &meta,
            condition: &Condition::Always,
        },
    )
    .await
    .expect("commit");
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "blocks.bin")).await;
    let s = source(&got.first);
    assert_eq!((s.check, s.content_md5.as_deref()), (Check::Ranges, None));
    assert_eq!(got.data, data);
    assert!(matches!(got.end, Some(Message::Sent(ref s)) if s.ranges_checked == 1));

    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "missing")).await;
    assert_eq!(refusal(&got.first), Code::NotFound);
    relay.stop().await;
}

/// A blob whose bytes are not the ones its (valid) seal names, as storage
/// corrupting a sealed blob would leave it: the relay sends what storage has
/// under the sealed SHA-256, and it is the client's end-to-end check that
/// refuses it (`end_to_end.rs`: nothing is placed).
#[tokio::test]
async fn a_sealed_blob_whose_bytes_changed_is_sent_under_its_seal_for_the_client_to_check() {
    let (relay, c) = relay("dlrot", DownloadLimits::default()).await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    let data = pattern((5 * MIB + 3) as usize, 4);
    let sha = hex::encode(Sha256::digest(&data));
    let mut rotten = data.clone();
    rotten[4 * MIB as usize + 7] ^= 0x10;
    let seal = relay.id_key().seal(&c, "rot.bin", data.len() as u64, &sha);
    put_sealed(&c, "rot.bin", &rotten, &sha, &seal).await;
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "rot.bin")).await;
    let s = source(&got.first);
    assert_eq!(
        (s.check, s.sha256.as_deref()),
        (Check::Sealed, Some(sha.as_str()))
    );
    assert_eq!(got.data, rotten);
    assert_ne!(hex::encode(Sha256::digest(&got.data)), sha);
    assert!(matches!(got.end, Some(Message::Sent(ref s)) if s.ranges_checked == 0));
    relay.stop().await;
}

#[tokio::test]
async fn a_resume_with_the_same_etag_gets_exactly_the_rest_and_another_etag_all() {
    let (relay, c) = relay("dlresume", DownloadLimits::default()).await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    let data = pattern((5 * MIB + 77) as usize, 3);
    let receipt = upload_raw(&conn, LIMITED_TOKEN, &c, "r.bin", &data).await;
    let offset = 3 * MIB + 11;
    let mut f = fetch_of(LIMITED_TOKEN, &c, "r.bin");
    f.offset = offset;
    f.etag = Some(receipt.etag.clone());
    let got = fetch(&conn, f.clone()).await;
    assert_eq!(source(&got.first).offset, offset);
    assert_eq!(got.data, data[offset as usize..]);
    assert!(matches!(got.end, Some(Message::Sent(_))));

    f.etag = Some("\"0xNOTTHEETAG\"".into());
    let got = fetch(&conn, f).await;
    assert_eq!(source(&got.first).offset, 0);
    assert_eq!(got.data, data);
    relay.stop().await;
}

#[tokio::test]
async fn reading_needs_a_read_grant_and_names_are_checked() {
    let (relay, c) = relay("dlgrant", DownloadLimits::default()).await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    upload_raw(&conn, LIMITED_TOKEN, &c, "x", b"hello").await;
    // A token without a list writes anything and reads nothing; a bare name
    // in a list is write only.
    let got = fetch(&conn, fetch_of(TOKEN, &c, "x")).await;
    assert_eq!(refusal(&got.first), Code::Forbidden);
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, "writeonly-dlgrant", "x")).await;
    assert_eq!(refusal(&got.first), Code::Forbidden);
    let got = fetch(&conn, fetch_of("not-a-token-0123456789", &c, "x")).await;
    assert_eq!(refusal(&got.first), Code::Unauthorized);
    // The deployment's own container: never, whatever the grant says.
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, "relay-boot", "id.key")).await;
    assert_eq!(refusal(&got.first), Code::Forbidden);
    let (names, end, first) = list(&conn, TOKEN, &c, "").await;
    assert_eq!((names.len(), end), (0, None));
    assert_eq!(first.as_ref().map(refusal), Some(Code::Forbidden));

    let long = "n".repeat(1025);
    for bad in [
        "",
        "a\u{0}b",
        "x\u{202e}gpj.exe",
        "dir\\file",
        "dir/",
        long.as_str(),
    ] {
        let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, bad)).await;
        assert_eq!(refusal(&got.first), Code::InvalidName, "{bad:?}");
    }
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, "Bad_Container", "x")).await;
    assert_eq!(refusal(&got.first), Code::InvalidName);
    let mut wrong = fetch_of(LIMITED_TOKEN, &c, "x");
    wrong.version = 99;
    let got = fetch(&conn, wrong).await;
    assert_eq!(refusal(&got.first), Code::UnsupportedVersion);
    // The valid one still works on the same connection.
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "x")).await;
    assert_eq!(got.data, b"hello");
    relay.stop().await;
}

#[tokio::test]
async fn a_valid_fetch_or_list_admits_a_connection_as_a_valid_offer_does() {
    // An auth deadline far past the wait below: a refused connection that is
    // gone before it was closed by the refusal, not by the deadline.
    let container = new_container("dladmit").await;
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: format!("{container}:rw,writeonly-dladmit,relay-boot:r"),
            configure: Some(Box::new(|cfg| {
                cfg.listen.admission.auth_deadline = Duration::from_secs(600);
            })),
            ..Default::default()
        },
    );
    let c = container;
    let (_ep, uploader) = Dial::to(&relay).connect().await;
    upload_raw(&uploader, LIMITED_TOKEN, &c, "x", b"hello").await;
    assert_eq!(
        relay.metric("blob_relay_connections_authenticated"),
        Some(1)
    );
    for valid_first in ["fetch", "list"] {
        // Refused for its grant before it authenticated: the relay closes the
        // connection (as after an Offer refused for its token or grant), so it
        // keeps no pending slot until the auth deadline.
        let (_ep, refused) = Dial::to(&relay).connect().await;
        let got = fetch(&refused, fetch_of(TOKEN, &c, "x")).await;
        assert_eq!(refusal(&got.first), Code::Forbidden);
        until(&relay, "the refused connection is closed", |r| {
            r.metric("blob_relay_connections_pending") == Some(0)
        })
        .await;
        assert_eq!(
            relay.metric("blob_relay_connections_authenticated"),
            Some(1)
        );
        let (_ep, reader) = Dial::to(&relay).connect().await;
        if valid_first == "fetch" {
            let got = fetch(&reader, fetch_of(LIMITED_TOKEN, &c, "x")).await;
            assert_eq!(got.data, b"hello");
        } else {
            let (names, _, _) = list(&reader, LIMITED_TOKEN, &c, "").await;
            assert_eq!(names, ["x"]);
        }
        until(&relay, "the reader's connection is authenticated", |r| {
            r.metric("blob_relay_connections_authenticated") == Some(2)
                && r.metric("blob_relay_connections_pending") == Some(0)
        })
        .await;
        reader.close(0u32.into(), b"");
        until(&relay, "the reader's connection is gone", |r| {
            r.metric("blob_relay_connections_authenticated") == Some(1)
        })
        .await;
    }
    relay.stop().await;
}

/// Small ranges, few in flight, and a client window of one range: the relay
/// can be at most a few ranges ahead of what the client read, so a blob
/// overwritten after the Source arrives is read, further on, at its new ETag.
fn small_ranges() -> DownloadLimits {
    DownloadLimits {
        ranges_in_flight: 2,
        range_bytes: 64 * KIB,
        ..DownloadLimits::default()
    }
}

#[tokio::test]
async fn a_blob_overwritten_mid_read_ends_in_changed_never_mixed() {
    let (relay, c) = relay("dlchanged", small_ranges()).await;
    let (_ep, conn) = Dial::to(&relay).window(64 * KIB).connect().await;
    let data = pattern((2 * MIB) as usize, 4);
    upload_raw(&conn, LIMITED_TOKEN, &c, "moving", &data).await;
    let (_send, mut recv, first) = start_fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "moving")).await;
    let etag = source(&first).etag.clone();
    let v2 = pattern((2 * MIB) as usize, 5);
    let new_etag = put_sealed(&c, "moving", &v2, "00", "none").await;
    assert_ne!(new_etag, etag);
    let got = read_rest(&mut recv, first).await;
    assert_eq!(got.end.as_ref().map(refusal), Some(Code::Changed));
    // What came is a prefix of the first version, never a byte of the second.
    assert!(got.data.len() < data.len());
    assert_eq!(got.data, data[..got.data.len()]);
    relay.stop().await;
}

#[tokio::test]
async fn a_client_that_stops_the_stream_after_the_source_frees_the_relay_at_once() {
    // As a client that only wanted the Source (its SHA-256) does.
    let (relay, c) = relay("dlstopped", small_ranges()).await;
    let (_ep, conn) = Dial::to(&relay).window(64 * KIB).connect().await;
    let data = pattern((2 * MIB) as usize, 8);
    upload_raw(&conn, LIMITED_TOKEN, &c, "peek", &data).await;
    let (_send, mut recv, first) = start_fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "peek")).await;
    source(&first);
    recv.stop(0u32.into()).expect("stop");
    until(&relay, "the download ends and its memory is back", |r| {
        r.metric("blob_relay_fetches_failed_total") == Some(1)
            && r.metric("blob_relay_budget_in_use_bytes") == Some(0)
    })
    .await;
    // Not a stalled reader: nothing waited for the write timeout.
    assert_eq!(relay.metric("blob_relay_fetches_stalled_total"), Some(0));
    relay.stop().await;
}

#[tokio::test]
async fn a_relay_shutting_down_ends_a_download_with_busy_and_sends_no_more() {
    let (relay, c) = relay("dlstop", small_ranges()).await;
    let (_ep, conn) = Dial::to(&relay).window(64 * KIB).connect().await;
    let data = pattern((2 * MIB) as usize, 7);
    upload_raw(&conn, LIMITED_TOKEN, &c, "long", &data).await;
    // The client's window holds about one range: the relay waits to write the
    // next when shutdown begins, and the one after is never read.
    let (_send, mut recv, first) = start_fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "long")).await;
    source(&first);
    let stopping = tokio::spawn(relay.stop());
    let got = read_rest(&mut recv, first).await;
    match &got.end {
        Some(Message::Error(f)) => {
            assert_eq!(f.code, Code::Busy);
            assert!(f.code.is_retryable());
        }
        other => panic!("{other:?}"),
    }
    assert!(got.data.len() < data.len());
    assert_eq!(got.data, data[..got.data.len()]);
    stopping.await.expect("relay stopped");
}

#[tokio::test]
async fn a_blob_deleted_mid_read_ends_in_not_found() {
    let (relay, c) = relay("dldeleted", small_ranges()).await;
    let (_ep, conn) = Dial::to(&relay).window(64 * KIB).connect().await;
    let data = pattern((2 * MIB) as usize, 9);
    upload_raw(&conn, LIMITED_TOKEN, &c, "going", &data).await;
    let (_send, mut recv, first) = start_fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "going")).await;
    source(&first);
    writer(&c, "going").delete().await.expect("delete");
    let got = read_rest(&mut recv, first).await;
    assert_eq!(got.end.as_ref().map(refusal), Some(Code::NotFound));
    assert!(got.data.len() < data.len());
    assert_eq!(got.data, data[..got.data.len()]);
    relay.stop().await;
}

#[tokio::test]
async fn a_listing_of_several_pages_names_every_blob_once() {
    let limits = DownloadLimits {
        list_page: 3,
        ..DownloadLimits::default()
    };
    let (relay, c) = relay("dllist", limits).await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    let mut want: Vec<String> = (0..8).map(|i| format!("run/{i:02} é.txt")).collect();
    for n in &want {
        upload_raw(&conn, LIMITED_TOKEN, &c, n, n.as_bytes()).await;
    }
    upload_raw(&conn, LIMITED_TOKEN, &c, "elsewhere/x", b"x").await;
    let (names, end, first) = list(&conn, LIMITED_TOKEN, &c, "run/").await;
    assert_eq!(first, None);
    want.sort();
    assert_eq!(names, want);
    assert_eq!(end, Some(8));
    let (all, end, _) = list(&conn, LIMITED_TOKEN, &c, "").await;
    assert_eq!((all.len(), end), (9, Some(9)));
    assert_eq!(relay.metric("blob_relay_listings_completed_total"), Some(2));
    relay.stop().await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_and_its_memory_comes_back() {
    let limits = DownloadLimits {
        write_timeout: Duration::from_secs(3),
        ..small_ranges()
    };
    let (relay, c) = relay("dlstall", limits).await;
    let (_ep, conn) = Dial::to(&relay).window(64 * KIB).connect().await;
    let data = pattern((2 * MIB) as usize, 6);
    upload_raw(&conn, LIMITED_TOKEN, &c, "stall", &data).await;
    let budget_before = relay.metric("blob_relay_budget_in_use_bytes");
    assert_eq!(budget_before, Some(0));
    // The Source and nothing more: the relay fills the window and waits.
    let (_send, recv, first) = start_fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "stall")).await;
    source(&first);
    until(&relay, "the stalled download holds budget", |r| {
        r.metric("blob_relay_budget_in_use_bytes").unwrap_or(0) > 0
    })
    .await;
    until(&relay, "the stalled download is dropped", |r| {
        r.metric("blob_relay_fetches_stalled_total") == Some(1)
    })
    .await;
    until(&relay, "its budget is given back", |r| {
        r.metric("blob_relay_budget_in_use_bytes") == Some(0)
    })
    .await;
    assert_eq!(relay.metric("blob_relay_fetches_completed_total"), Some(0));
    drop(recv);
    relay.stop().await;
}

/// Waits (at most a minute) for the relay to reach a state.
async fn until(relay: &RelayHandle, what: &str, done: impl Fn(&RelayHandle) -> bool) {
    let t0 = Instant::now();
    while !done(relay) {
        assert!(t0.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
