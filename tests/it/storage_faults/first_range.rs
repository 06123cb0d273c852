//! A download's first storage request answers for its properties: the relay
//! reads a blob's first range with one Get Blob (no Get Blob Properties) and
//! takes the size, ETag, checksums and seal from that answer. Through the
//! relay over the raw protocol, with the fault proxy counting (and holding)
//! the requests in front of Azurite.

use std::time::Duration;

use relay_client::relay::connect::Connector;
use relay_proto::protocol::{Check, Code, Message, Source};
use relay_storage::read::MAX_CHECKED_RANGE;
use relay_tests::blobs::put_sealed;
use relay_tests::download::{Fetched, fetch, fetch_of};
use relay_tests::proxy::Op;
use relay_tests::raw_quic::Dial;
use relay_tests::read_faults::{Kind, Setup, Way};
use relay_tests::relay::LIMITED_TOKEN;
use sha2::{Digest, Sha256};

/// The relay's range: its default, storage's largest checked range.
const RANGE: usize = MAX_CHECKED_RANGE as usize;
const LIMIT: Duration = Duration::from_secs(60);

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 10) as u8)
        .collect()
}

fn source_of(got: &Fetched) -> &Source {
    match &got.first {
        Message::Source(s) => s,
        other => panic!("no Source: {other:?}"),
    }
}

/// A relay behind the fault proxy, and a raw connection to it.
async fn through_relay(tag: &str) -> (Setup, Connector, quinn::Connection) {
    let setup = Setup::new(Way::Relay, tag).await;
    let Some(relay) = &setup.relay else {
        panic!("a relay")
    };
    let (ep, conn) = Dial::to(relay).connect().await;
    (setup, ep, conn)
}

/// The storage requests the relay sent for one blob (Sent's count).
fn requests_of(got: &Fetched) -> u32 {
    match &got.end {
        Some(Message::Sent(s)) => s.requests,
        other => panic!("not sent: {other:?}"),
    }
}

/// Blobs of 0 and 1 bytes, one short of a range, a range, one over and
/// three ranges, each way a download is checked: every one comes back
/// exact, a blob within one range in one Get Blob and no Get Blob
/// Properties, a longer one in one Get Blob a range; a blob of 0 bytes (no
/// range to read: 416) by its properties. A seal that does not hold is not
/// vouched for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_around_a_range_is_read_from_its_first_answer() {
    let (setup, _ep, conn) = through_relay("fr-sizes").await;
    let c = setup.container.clone();
    let sizes = [0, 1, RANGE - 1, RANGE, RANGE + 1, 3 * RANGE];
    let mut blobs: Vec<(String, Vec<u8>, Kind)> = Vec::new();
    for (k, kind) in [Kind::Ranges, Kind::ContentMd5, Kind::Sealed]
        .into_iter()
        .enumerate()
    {
        for (i, size) in sizes.iter().enumerate() {
            let name = format!("p/{}-{size}", kind.check());
            blobs.push((name, pattern(*size, (k * 10 + i) as u8), kind));
        }
    }
    for (name, data, kind) in &blobs {
        setup.put(name, data, *kind).await;
    }
    for (name, data, kind) in &blobs {
        let (blob_gets, props) = (
            setup.proxy.stats.requests_of(Op::GetBlob),
            setup.proxy.stats.requests_of(Op::GetProperties),
        );
        let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, name)).await;
        let what = format!("{name} ({} bytes)", data.len());
        let s = source_of(&got);
        assert_eq!(s.size, data.len() as u64, "{what}");
        let want_check = match kind {
            Kind::Sealed => Check::Sealed,
            Kind::ContentMd5 => Check::ContentMd5,
            Kind::Ranges => Check::Ranges,
        };
        assert_eq!(s.check, want_check, "{what}");
        let sha = hex::encode(Sha256::digest(data));
        if *kind == Kind::Sealed {
            assert_eq!(s.sha256.as_deref(), Some(sha.as_str()), "{what}");
        }
        assert_eq!(hex::encode(Sha256::digest(&got.data)), sha, "{what}");
        // One Get Blob a range, the first one answering for the properties;
        // for 0 bytes, Get Blob (416), then Get Blob Properties.
        let ranges = data.len().div_ceil(RANGE) as u64;
        let empty = u64::from(data.is_empty());
        assert_eq!(u64::from(requests_of(&got)), ranges + 2 * empty, "{what}");
        assert_eq!(
            setup.proxy.stats.requests_of(Op::GetBlob) - blob_gets,
            ranges + empty,
            "{what}"
        );
        assert_eq!(
            setup.proxy.stats.requests_of(Op::GetProperties) - props,
            empty,
            "{what}: Get Blob Properties only for 0 bytes"
        );
        if data.is_empty() {
            assert_eq!(got.sections, 0, "{what}");
        }
    }

    // A seal over other bytes (any storage writer can set metadata) is not
    // vouched for, on a blob within one range and on a longer one.
    for size in [0, 1000, RANGE + 1] {
        let name = format!("p/forged-{size}");
        let data = pattern(size, 99);
        let sha = hex::encode(Sha256::digest(&data));
        let seal = setup.key.seal(&c, &name, size as u64 + 1, &sha);
        put_sealed(&c, &name, &data, &sha, &seal).await;
        let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, &name)).await;
        let s = source_of(&got);
        assert_eq!(
            (s.check, s.sha256.as_deref()),
            (Check::ContentMd5, None),
            "{name}"
        );
        assert_eq!(hex::encode(Sha256::digest(&got.data)), sha, "{name}");
    }
    setup.stop().await;
}

/// A blob replaced by another writer between its first range (the answer
/// the download's version comes from) and its second: the second is read
/// under `If-Match` of the first's ETag, so the download ends `changed`
/// with only the old version's bytes sent, never the new one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_replaced_after_its_first_range_ends_the_download_changed() {
    let (setup, _ep, conn) = through_relay("fr-replaced").await;
    let c = setup.container.clone();
    let old = pattern(3 * RANGE, 1);
    setup.put("p/x.bin", &old, Kind::Ranges).await;
    // The first Get Blob goes on, the next ones wait.
    setup.proxy.hold_after(Op::GetBlob, 1);
    let download =
        tokio::spawn(async move { fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "p/x.bin")).await });
    setup.proxy.wait_held(1, LIMIT).await;
    let new = pattern(3 * RANGE, 2);
    setup.put("p/x.bin", &new, Kind::Ranges).await;
    setup.proxy.release();
    let got = download.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(source_of(&got).size, old.len() as u64);
    match &got.end {
        Some(Message::Error(f)) => assert_eq!(f.code, Code::Changed, "{}", f.message),
        other => panic!("not changed: {other:?}"),
    }
    assert!(got.data.len() < old.len(), "{}", got.data.len());
    assert_eq!(
        got.data[..],
        old[..got.data.len()],
        "only the old version's bytes"
    );
    setup.stop().await;
}
