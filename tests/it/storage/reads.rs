//! The storage layer's reads (`relay_storage::read`) against Azurite: a
//! blob's properties and the seal vouched for only when its MAC holds, ranges
//! read under `If-Match` with storage's MD5 of each checked, a blob that
//! changed or went away named as such, and a listing paged through a marker.

use std::collections::BTreeMap;

use bytes::Bytes;
use md5::{Digest as _, Md5};
use relay_proto::id_key::IdKey;
use relay_storage::read::{MAX_CHECKED_RANGE, RangeCheck, ReadError};
use relay_storage::store::{Commit, Condition};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{new_container, writer};
use sha2::Sha256;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn put(container: &str, name: &str, data: &[u8], seal: &str, cond: &Condition) -> String {
    let sha = hex::encode(Sha256::digest(data));
    let meta = BTreeMap::new();
    writer(container, name)
        .put_blob(
            Bytes::copy_from_slice(data),
            &Commit {
                sha256_hex: &sha,
                seal,
                content_type: Some("application/x-test"),
                content_md5: None,
                metadata: &meta,
                condition: cond,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("put {name}: {e}"))
}

#[tokio::test]
async fn properties_ranges_and_the_seal() {
    relay_transport::install_crypto_provider();
    let container = new_container("readprops").await;
    let key = IdKey::random();
    let name = "dir/a b#c.bin";
    let data = pattern((MAX_CHECKED_RANGE + 12345) as usize, 7);
    let sha = hex::encode(Sha256::digest(&data));
    let seal = key.seal(&container, name, data.len() as u64, &sha);
    let etag = put(&container, name, &data, &seal, &Condition::IfAbsent).await;

    let storage = shared_azurite().storage();
    let r = storage.reader(&container, name).expect("reader");
    let p = r.properties().await.expect("props");
    assert_eq!(p.etag, etag);
    assert_eq!(p.size, data.len() as u64);
    assert_eq!(p.content_type.as_deref(), Some("application/x-test"));
    assert_eq!(p.content_md5, Some(<[u8; 16]>::from(Md5::digest(&data))));
    assert_eq!(p.sealed_sha256(&key, &container, name), Some(sha.as_str()));
    // Another deployment's key, another name, a forged seal: not vouched for.
    assert_eq!(p.sealed_sha256(&IdKey::random(), &container, name), None);
    assert_eq!(p.sealed_sha256(&key, &container, "other"), None);
    let mut forged = p.clone();
    forged.sha256 = Some("00".repeat(32));
    assert_eq!(forged.sealed_sha256(&key, &container, name), None);

    // The whole blob in checked ranges, the last one short.
    let mut got = Vec::new();
    let mut at = 0u64;
    while at < p.size {
        let len = MAX_CHECKED_RANGE.min(p.size - at);
        got.extend_from_slice(
            &r.range(&etag, at, len, RangeCheck::StorageMd5)
                .await
                .expect("range"),
        );
        at += len;
    }
    assert_eq!(got, data);
    assert!(matches!(
        r.range(&etag, 0, MAX_CHECKED_RANGE + 1, RangeCheck::StorageMd5)
            .await,
        Err(ReadError::RangeTooLarge(_))
    ));

    // Overwritten: a read of the old version is refused, not mixed.
    let new_etag = put(&container, name, b"v2", "x", &Condition::Always).await;
    assert_ne!(new_etag, etag);
    assert!(matches!(
        r.range(&etag, 0, 16, RangeCheck::StorageMd5).await,
        Err(ReadError::Changed)
    ));
    // Deleted: gone.
    writer(&container, name).delete().await.expect("delete");
    assert!(matches!(
        r.range(&new_etag, 0, 2, RangeCheck::StorageMd5).await,
        Err(ReadError::NotFound)
    ));
    assert!(matches!(r.properties().await, Err(ReadError::NotFound)));
}

#[tokio::test]
async fn a_listing_pages_through_every_name_once() {
    relay_transport::install_crypto_provider();
    let container = new_container("readlist").await;
    let mut names: Vec<String> = (0..7).map(|i| format!("run/{i:02} ü.txt")).collect();
    for n in &names {
        put(&container, n, n.as_bytes(), "s", &Condition::IfAbsent).await;
    }
    put(&container, "other/x", b"x", "s", &Condition::IfAbsent).await;
    let lister = shared_azurite()
        .storage()
        .lister(&container)
        .expect("lister");
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = lister
            .page("run/", marker.as_deref(), 3)
            .await
            .expect("page");
        pages += 1;
        assert!(page.blobs.len() <= 3);
        for b in page.blobs {
            assert_eq!(b.size, b.name.len() as u64);
            assert!(!b.etag.is_empty());
            seen.push(b.name);
        }
        match page.next_marker {
            Some(m) => marker = Some(m),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    names.sort();
    assert_eq!(seen, names);
}

/// Puts a one-byte blob whose properties make its List Blobs entry about
/// 9 KiB of XML (a content type, disposition and cache control of 3 KiB
/// each, as any writer of the container may set them).
async fn put_with_long_properties(container: &str, name: &str) {
    let sas = relay_storage::sas::account_sas(
        relay_tests::DEV_ACCOUNT,
        relay_tests::DEV_KEY,
        time::OffsetDateTime::now_utc(),
        time::Duration::hours(1),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("{}/{container}/{name}?{sas}", shared_azurite().url());
    let long = "x".repeat(3 << 10);
    let resp = reqwest::Client::new()
        .put(&url)
        .header("x-ms-blob-type", "BlockBlob")
        .header("x-ms-version", "2021-08-06")
        .header("x-ms-blob-content-type", format!("text/{long}"))
        .header("x-ms-blob-content-disposition", format!("inline; {long}"))
        .header("x-ms-blob-cache-control", format!("no-{long}"))
        .body(b"x".to_vec())
        .send()
        .await
        .unwrap_or_else(|e| panic!("put {name}: {e}"));
    assert!(resp.status().is_success(), "put {name}: {}", resp.status());
}

/// A page's answer is read into a buffer of its cap (4 KiB a name asked
/// for): blobs whose entries are larger are asked for again a quarter as
/// many at a time, so a page never holds more than its size allows; an
/// answer for one name larger than the cap is refused, not read on.
#[tokio::test]
async fn a_page_whose_answer_is_over_its_cap_is_asked_again_for_fewer_names() {
    relay_transport::install_crypto_provider();
    let container = new_container("readcap").await;
    let mut names: Vec<String> = (0..6).map(|i| format!("big/{i}")).collect();
    for n in &names {
        put_with_long_properties(&container, n).await;
    }
    let lister = shared_azurite()
        .storage()
        .lister(&container)
        .expect("lister");
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        // Four names a page: a 16 KiB cap, under four 9 KiB entries.
        let page = lister
            .page("big/", marker.as_deref(), 4)
            .await
            .expect("page");
        assert!(!page.blobs.is_empty() && page.blobs.len() < 4, "{page:?}");
        seen.extend(page.blobs.into_iter().map(|b| b.name));
        match page.next_marker {
            Some(m) => marker = Some(m),
            None => break,
        }
    }
    names.sort();
    assert_eq!(seen, names);
    // Each page asked twice (4 names, over the cap; then 1), but the last:
    // the one name left fits.
    assert_eq!(lister.requests(), 2 * 5 + 1);
    assert!(matches!(
        lister.page("big/", None, 1).await,
        Err(ReadError::AnswerTooLarge(4096))
    ));
}
