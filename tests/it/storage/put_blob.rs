//! Put Blob, the one request that publishes a small file, as the relay's
//! storage writer builds it itself (`relay_storage`'s `put_blob.rs`, through
//! the account's shared pipeline rather than the SDK's per-blob client),
//! against Azurite: what it stores (bytes, Content-MD5, the SHA-256 and seal
//! in metadata, under an awkward name), the conditions that keep two writers
//! from overwriting each other, and writers racing for one name.

use std::collections::BTreeMap;

use bytes::Bytes;
use md5::{Digest as _, Md5};
use relay_storage::store::{Commit, Condition};
use relay_tests::blobs::{blob_content_md5, blob_sha, new_container, writer};
use sha2::Sha256;

fn sha_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn commit<'a>(sha: &'a str, meta: &'a BTreeMap<String, String>, cond: &'a Condition) -> Commit<'a> {
    Commit {
        sha256_hex: sha,
        seal: "seal-v1",
        content_type: Some("text/plain"),
        content_md5: None,
        metadata: meta,
        condition: cond,
    }
}

#[tokio::test]
async fn stores_bytes_md5_and_metadata_and_keeps_to_its_conditions() {
    relay_transport::install_crypto_provider();
    let container = new_container("putblob").await;
    // Every character class a blob name may hold that a URL must escape.
    let name = "dir/sub dir/a#b?c%d ü+.txt";
    let meta: BTreeMap<String, String> = [("origin".to_string(), "lab".to_string())].into();
    let first = Bytes::from_static(b"the first version");
    let sha1 = sha_hex(&first);
    let w = writer(&container, name);
    let etag = w
        .put_blob(first.clone(), &commit(&sha1, &meta, &Condition::IfAbsent))
        .await
        .expect("put blob");

    let p = w.properties().await.expect("props").expect("the blob");
    assert_eq!(p.etag, etag);
    assert_eq!(p.size, first.len() as u64);
    assert_eq!(p.sha256.as_deref(), Some(sha1.as_str()));
    assert_eq!(p.seal.as_deref(), Some("seal-v1"));
    assert_eq!(
        blob_content_md5(&container, name).await,
        Some(hex::encode(Md5::digest(&first)))
    );
    assert_eq!(
        blob_sha(&container, name).await,
        (first.len() as u64, sha1.clone())
    );

    // Another writer that expects no blob loses; so does one holding a stale
    // etag. Neither changes a byte.
    let other = Bytes::from_static(b"someone else's bytes");
    let sha2 = sha_hex(&other);
    let absent = writer(&container, name)
        .put_blob(other.clone(), &commit(&sha2, &meta, &Condition::IfAbsent))
        .await;
    assert_eq!(absent.err().and_then(|e| e.status), Some(409));
    let stale = Condition::IfMatch("\"0x8D0000000000000\"".into());
    let stale = writer(&container, name)
        .put_blob(other.clone(), &commit(&sha2, &meta, &stale))
        .await;
    assert_eq!(stale.err().and_then(|e| e.status), Some(412));
    assert_eq!(
        blob_sha(&container, name).await,
        (first.len() as u64, sha1.clone())
    );

    // The writer holding the current etag replaces it, metadata and all.
    let current = Condition::IfMatch(etag.clone());
    let etag2 = writer(&container, name)
        .put_blob(other.clone(), &commit(&sha2, &meta, &current))
        .await
        .expect("at the current etag");
    assert_ne!(etag2, etag);
    let p = w.properties().await.expect("props").expect("the blob");
    assert_eq!(p.sha256.as_deref(), Some(sha2.as_str()));
    assert_eq!(blob_sha(&container, name).await, (other.len() as u64, sha2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_writers_racing_for_one_name_exactly_one_publishes_and_its_hash_holds() {
    relay_transport::install_crypto_provider();
    let container = new_container("putblob-race").await;
    let meta = BTreeMap::new();
    for round in 0..30u32 {
        let name = format!("race/{round}.bin");
        let bodies: Vec<Bytes> = (0..2u8)
            .map(|who| Bytes::from(vec![who ^ (round as u8); 1000 + usize::from(who) * 7]))
            .collect();
        let shas: Vec<String> = bodies.iter().map(|b| sha_hex(b)).collect();
        let put = |who: usize| {
            let w = writer(&container, &name);
            let (body, sha, meta) = (bodies[who].clone(), &shas[who], &meta);
            async move {
                w.put_blob(body, &commit(sha, meta, &Condition::IfAbsent))
                    .await
            }
        };
        let (a, b) = tokio::join!(put(0), put(1));
        let winners: Vec<usize> = [&a, &b]
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_ok())
            .map(|(who, _)| who)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {a:?} / {b:?}");
        let loser = if winners[0] == 0 { &b } else { &a };
        assert_eq!(
            loser.as_ref().err().and_then(|e| e.status),
            Some(409),
            "round {round}"
        );
        let won = winners[0];
        // What is stored is the winner's bytes, under the winner's SHA-256.
        let props = writer(&container, &name)
            .properties()
            .await
            .expect("props")
            .expect("the blob");
        assert_eq!(
            props.sha256.as_deref(),
            Some(shas[won].as_str()),
            "round {round}"
        );
        assert_eq!(
            blob_sha(&container, &name).await,
            (bodies[won].len() as u64, shas[won].clone()),
            "round {round}"
        );
    }
}
