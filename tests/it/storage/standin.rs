//! The stand-in storage (`relay_tests::standin`, what `wanbench --storage
//! standin` measures against) answers the Azure SDK as the service does, for
//! every request an upload and the bench's checks make: through the same
//! `relay_storage` writer the relay uses, over real HTTP on loopback. A
//! stand-in that accepted what the service refuses (a second If-None-Match
//! commit, a stale etag, a wrong MD5) would flatter the figures measured on it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use relay_proto::protocol::Secret;
use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{EntraSource, StorageAccess};
use relay_storage::store::{Commit, Condition};
use relay_tests::{DEV_ACCOUNT, DEV_KEY};
use sha2::{Digest, Sha256};

async fn start() -> Storage {
    start_with(WriterOptions::default()).await.0
}

pub(super) async fn start_with(options: WriterOptions) -> (Storage, SocketAddr) {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    let addr: SocketAddr = probe.local_addr().expect("addr");
    drop(probe);
    tokio::spawn(relay_tests::standin::serve(addr));
    // Ready once it accepts.
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let url = format!("http://{addr}/{DEV_ACCOUNT}");
    let access =
        StorageAccess::resolve(&url, Some(&Secret(DEV_KEY.into())), EntraSource::default())
            .expect("access");
    (Storage::new(access, &options).expect("storage"), addr)
}

fn commit<'a>(sha: &'a str, meta: &'a BTreeMap<String, String>, cond: &'a Condition) -> Commit<'a> {
    Commit {
        sha256_hex: sha,
        seal: "seal",
        content_type: Some("text/plain"),
        content_md5: None,
        metadata: meta,
        condition: cond,
    }
}

#[tokio::test]
async fn answers_an_upload_as_the_service_does() {
    relay_transport::install_crypto_provider();
    let s = start().await;
    s.ensure_container("c").await.expect("container");
    s.ensure_container("c")
        .await
        .expect("an existing container is fine");
    let meta = BTreeMap::new();
    let absent = Condition::IfAbsent;

    // Put Blob, then its properties and bytes as the bench reads them.
    let w = s.writer("c", "dir/small.txt").expect("writer");
    assert!(w.properties().await.expect("props").is_none());
    let data = Bytes::from_static(b"hello, stand-in");
    let sha = hex::encode(Sha256::digest(&data));
    let etag = w
        .put_blob(data.clone(), &commit(&sha, &meta, &absent))
        .await
        .expect("put blob");
    let p = w.properties().await.expect("props").expect("blob");
    assert_eq!(
        (p.etag.as_str(), p.size),
        (etag.as_str(), data.len() as u64)
    );
    assert_eq!(p.sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(p.seal.as_deref(), Some("seal"));
    assert!(p.last_modified.is_some());
    let (n, h) = w.content_sha256().await.expect("download");
    assert_eq!((n, hex::encode(h)), (data.len() as u64, sha.clone()));
    assert!(w.content_md5().await.expect("md5").is_some());

    // A second writer under If-None-Match loses; a stale If-Match too; the
    // current etag wins.
    let again = w
        .put_blob(Bytes::from_static(b"other"), &commit(&sha, &meta, &absent))
        .await;
    assert_eq!(again.err().and_then(|e| e.status), Some(409));
    let stale = Condition::IfMatch("\"0xSTALE\"".into());
    let e = w
        .put_blob(Bytes::from_static(b"other"), &commit(&sha, &meta, &stale))
        .await;
    assert_eq!(e.err().and_then(|e| e.status), Some(412));
    let current = Condition::IfMatch(etag);
    w.put_blob(Bytes::from_static(b"other"), &commit(&sha, &meta, &current))
        .await
        .expect("at the current etag");

    // Blocks: staged, listed, committed in the listed order, list cleared.
    let b = s.writer("c", "big.bin").expect("writer");
    b.stage_block(b"id-1", Bytes::from_static(b"first "))
        .await
        .expect("stage");
    b.stage_block(b"id-2", Bytes::from_static(b"second"))
        .await
        .expect("stage");
    let staged = b.uncommitted_blocks().await.expect("list");
    assert_eq!(staged, vec![(b"id-1".to_vec(), 6), (b"id-2".to_vec(), 6)]);
    let whole = b"first second";
    let sha = hex::encode(Sha256::digest(whole));
    b.commit(
        vec![b"id-1".to_vec(), b"id-2".to_vec()],
        &commit(&sha, &meta, &absent),
    )
    .await
    .expect("commit");
    assert!(b.uncommitted_blocks().await.expect("list").is_empty());
    assert_eq!(b.committed_blocks().await.expect("list").len(), 2);
    let (n, h) = b.content_sha256().await.expect("download");
    assert_eq!((n, hex::encode(h)), (whole.len() as u64, sha.clone()));
    // A list naming a block nobody staged is refused, the blob unchanged.
    let e = b
        .commit(
            vec![b"id-9".to_vec()],
            &commit(&sha, &meta, &Condition::Always),
        )
        .await;
    assert_eq!(e.err().and_then(|e| e.status), Some(400));
    assert_eq!(
        b.content_sha256().await.expect("download").0,
        whole.len() as u64
    );

    b.delete().await.expect("delete");
    assert!(b.properties().await.expect("props").is_none());
}

/// Under `--block-checksum crc64` the stand-in checks `x-ms-content-crc64` on a
/// Put Blob and a Put Block as the service does (a wrong one: 400
/// Crc64Mismatch), and a Put Blob that sent no MD5 gets the one of its bytes.
#[tokio::test]
async fn checks_crc64_and_sets_a_put_blobs_md5() {
    use md5::Md5;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    relay_transport::install_crypto_provider();
    let options = WriterOptions {
        block_checksum: relay_storage::checksum::BlockChecksum::Crc64,
        ..WriterOptions::default()
    };
    let (s, addr) = start_with(options).await;
    s.ensure_container("c").await.expect("container");
    let meta = BTreeMap::new();
    let w = s.writer("c", "small").expect("writer");
    let data = Bytes::from_static(b"checked by its crc64");
    let sha = hex::encode(Sha256::digest(&data));
    w.put_blob(data.clone(), &commit(&sha, &meta, &Condition::IfAbsent))
        .await
        .expect("put blob");
    assert_eq!(
        w.content_md5().await.expect("md5"),
        Some(Md5::digest(&data).to_vec())
    );
    w.stage_block(b"id", Bytes::from_static(b"a block"))
        .await
        .expect("stage");

    // A CRC-64 that is not the body's, by hand (the writer always sends the
    // right one); the stand-in's own endpoint takes no SAS.
    for (path, code) in [
        (format!("/{DEV_ACCOUNT}/c/bad"), "Crc64Mismatch"),
        (
            format!("/{DEV_ACCOUNT}/c/bad?comp=block&blockid=aWQ%3D"),
            "Crc64Mismatch",
        ),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "PUT {path} HTTP/1.1\r\nhost: x\r\nx-ms-blob-type: BlockBlob\r\n\
             x-ms-content-crc64: AAAAAAAAAAA=\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc"
        );
        tcp.write_all(req.as_bytes()).await.expect("send");
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains(code), "{answer}");
    }
    assert!(
        s.writer("c", "bad")
            .expect("writer")
            .properties()
            .await
            .expect("props")
            .is_none()
    );
}

/// A download's first Get Blob (a range, no `If-Match`) gets from the
/// stand-in what it gets from the service: the whole blob's size in
/// `Content-Range`, a blob shorter than the range whole, the blob's MD5 in
/// `x-ms-blob-content-md5` and the range's in Content-MD5, the metadata; a
/// blob of 0 bytes 416, then its properties; a later range under a stale
/// `If-Match` 412.
#[tokio::test]
async fn answers_a_downloads_first_range_as_the_service_does() {
    use relay_storage::read::{RangeCheck, ReadError, ReadProperties};
    use relay_storage::source::{BlobSource, ContainerReader};
    relay_transport::install_crypto_provider();
    let s = start().await;
    s.ensure_container("c").await.expect("container");
    let meta = BTreeMap::new();
    let always = Condition::Always;
    let data = Bytes::from(
        (0..100_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let sha = hex::encode(Sha256::digest(&data));
    let w = s.writer("c", "big").expect("writer");
    let etag = w
        .put_blob(data.clone(), &commit(&sha, &meta, &always))
        .await
        .expect("put");
    let empty_sha = hex::encode(Sha256::digest(b""));
    s.writer("c", "empty")
        .expect("writer")
        .put_blob(Bytes::new(), &commit(&empty_sha, &meta, &always))
        .await
        .expect("put empty");
    let r = ContainerReader::new(&s, "c").expect("reader");
    // The range's MD5 is checked: a stand-in sending the blob's would fail.
    let md5 = |_: &ReadProperties| RangeCheck::StorageMd5;
    let first = r.first_range("big", 1000, &md5).await.expect("first");
    assert_eq!(&first.bytes[..], &data[..1000]);
    assert_eq!(
        (first.props.size, first.props.etag.as_str()),
        (100_000, etag.as_str())
    );
    assert_eq!(first.props.sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(first.props.seal.as_deref(), Some("seal"));
    assert_eq!(first.props.content_type.as_deref(), Some("text/plain"));
    assert!(first.props.content_md5.is_some(), "the blob's MD5");
    assert_eq!(r.requests(), 1);
    let whole = r.first_range("big", 4 << 20, &md5).await.expect("whole");
    assert_eq!((whole.bytes.len(), whole.props.size), (100_000, 100_000));
    assert_eq!(
        r.requests(),
        2,
        "a blob shorter than the range: one request"
    );
    let empty = r.first_range("empty", 1000, &md5).await.expect("empty");
    assert_eq!((empty.bytes.len(), empty.props.size), (0, 0));
    assert_eq!(empty.props.sha256.as_deref(), Some(empty_sha.as_str()));
    assert_eq!(r.requests(), 4, "416, then Get Blob Properties");
    assert!(matches!(
        r.range("big", "\"0xSTALE\"", 1000, 1000, RangeCheck::StorageMd5)
            .await,
        Err(ReadError::Changed)
    ));
}
