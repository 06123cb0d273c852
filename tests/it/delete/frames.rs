//! The relay's Delete and the seal in its listing, spoken frame by frame
//! over real QUIC: a listing vouches (its SHA-256) only for a blob whose
//! seal holds under the relay's key; a Delete removes the listed version,
//! says when the blob is gone already, keeps a blob written after the
//! listing, needs a delete grant (never implied by writing or reading) and
//! refuses hostile frames before storage is asked.

use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{Code, Delete, Deleted, MAX_ETAG_BYTES, Message, Removal, Secret};
use relay_tests::blobs::{blob_exists, blob_sha, new_container, put_sealed};
use relay_tests::download::{list_frames, list_of};
use relay_tests::download_client::{T, put_raw, relay_flags, s, upload};
use relay_tests::files::{Scratch, write_random};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, stderr};
use relay_transport::frames::{read_frame, write_frame};

/// Deletes in the test's container, and nothing else.
const DELETER: &str = "deleter-token-0123456789abcdef";
/// Reads the test's container only.
const READER: &str = "reader-token-0123456789abcdef";
/// Writes the test's container only.
const WRITER: &str = "writer-token-0123456789abcdef";

/// A relay on a fresh container: LIMITED_TOKEN reads and writes it, TOKEN
/// writes any container, DELETER only deletes, READER only reads, WRITER
/// only writes there.
async fn relay(tag: &str) -> (RelayHandle, String) {
    let c = new_container(tag).await;
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: format!("{c}:rw"),
            ..Default::default()
        },
    );
    relay.rewrite_tokens(&format!(
        "{TOKEN}\n{LIMITED_TOKEN} {c}:rw\n{DELETER} {c}:d\n{READER} {c}:r\n{WRITER} {c}:w\n"
    ));
    relay.shared.sign_in.tokens.reload();
    (relay, c)
}

fn delete_of(token: &str, container: &str, name: &str, etag: &str) -> Delete {
    Delete {
        version: PROTOCOL_VERSION,
        token: Secret(token.into()),
        container: container.into(),
        name: name.into(),
        etag: etag.into(),
    }
}

/// One Delete stream on a connection of its own (a refused caller's
/// connection is closed), and the relay's answer.
async fn ask(relay: &RelayHandle, d: Delete) -> Message {
    let (_ep, conn) = Dial::to(relay).connect().await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::Delete(d))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = send.finish();
    read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("answer: {e}"))
}

fn outcome(m: &Message) -> Option<Removal> {
    match m {
        Message::Deleted(Deleted { outcome, .. }) => Some(*outcome),
        _ => None,
    }
}

fn refused(m: &Message) -> Option<Code> {
    match m {
        Message::Reject(f) | Message::Error(f) => Some(f.code),
        _ => None,
    }
}

/// The blobs under `prefix` as the relay lists them to LIMITED_TOKEN:
/// (name, etag, sha256).
async fn listed(
    relay: &RelayHandle,
    c: &str,
    prefix: &str,
) -> Vec<(String, String, Option<String>)> {
    let (_ep, conn) = Dial::to(relay).connect().await;
    let got = list_frames(&conn, list_of(LIMITED_TOKEN, c, prefix, None)).await;
    assert!(got.refused.is_none(), "{:?}", got.refused);
    got.frames
        .into_iter()
        .flat_map(|f| f.blobs)
        .map(|b| (b.name, b.etag, b.sha256))
        .collect()
}

/// A blob the relay committed is vouched for with its SHA-256; one written
/// straight to storage, one whose seal was altered, and one carrying
/// another blob's seal are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_vouches_only_for_blobs_whose_seal_holds() {
    let (relay, c) = relay("vouch").await;
    let dir = Scratch::new("vouch");
    let path = dir.path("sealed.bin");
    let sha = write_random(&path, 3000, 1);
    upload(&relay, &path, &format!("{c}/v")).await;
    put_raw(&c, "v/raw.bin", b"straight to storage").await;
    let key = relay.id_key();
    let altered = key.seal(&c, "v/altered.bin", 5, &"00".repeat(32));
    put_sealed(&c, "v/altered.bin", b"12345", &"11".repeat(32), &altered).await;
    // A seal that holds, for another name.
    let moved = key.seal(&c, "v/sealed.bin", 3000, &sha);
    put_sealed(&c, "v/moved.bin", &vec![0; 3000], &sha, &moved).await;
    let got = listed(&relay, &c, "v/").await;
    let sha_of = |n: &str| {
        got.iter()
            .find(|(name, ..)| name == n)
            .map(|(_, _, s)| s.clone())
            .unwrap_or_else(|| panic!("{n} not listed: {got:?}"))
    };
    assert_eq!(sha_of("v/sealed.bin"), Some(sha));
    assert_eq!(sha_of("v/raw.bin"), None);
    assert_eq!(sha_of("v/altered.bin"), None);
    assert_eq!(sha_of("v/moved.bin"), None);
    relay.stop().await;
}

/// The listed version is deleted; asked again, it is gone already; each
/// counted in /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_removes_the_listed_version_then_finds_it_gone() {
    let (relay, c) = relay("delgone").await;
    let dir = Scratch::new("delgone");
    let path = dir.path("a.bin");
    write_random(&path, 5000, 2);
    upload(&relay, &path, &format!("{c}/g")).await;
    let got = listed(&relay, &c, "g/").await;
    let (name, etag, _) = &got[0];
    let first = ask(&relay, delete_of(DELETER, &c, name, etag)).await;
    assert_eq!(outcome(&first), Some(Removal::Deleted), "{first:?}");
    assert!(!blob_exists(&c, name).await);
    let again = ask(&relay, delete_of(DELETER, &c, name, etag)).await;
    assert_eq!(outcome(&again), Some(Removal::AlreadyGone), "{again:?}");
    assert_eq!(relay.metric("blob_relay_deletes_deleted_total"), Some(1));
    assert_eq!(relay.metric("blob_relay_deletes_gone_total"), Some(1));
    relay.stop().await;
}

/// A blob uploaded again after it was listed (a new ETag) is not deleted
/// by a Delete of the listed version: it is kept, said to have changed, and
/// still holds the new file's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_uploaded_after_the_listing_is_kept() {
    let (relay, c) = relay("delkept").await;
    let dir = Scratch::new("delkept");
    let path = dir.path("r.bin");
    write_random(&path, 4000, 3);
    upload(&relay, &path, &format!("{c}/k")).await;
    let got = listed(&relay, &c, "k/").await;
    let (name, listed_etag, _) = got[0].clone();
    // Another file of the name, uploaded after the listing.
    let new_sha = write_random(&path, 6000, 4);
    let mut a = s(&["upload", path.to_str().unwrap_or_default()]);
    a.extend(s(&["--to", &format!("{c}/k"), "--overwrite", "--json"]));
    a.extend(relay_flags(&relay));
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "re-upload: {}", stderr(&out));
    let answer = ask(&relay, delete_of(DELETER, &c, &name, &listed_etag)).await;
    assert_eq!(outcome(&answer), Some(Removal::Changed), "{answer:?}");
    assert!(blob_exists(&c, &name).await);
    assert_eq!(blob_sha(&c, &name).await, (6000, new_sha));
    assert_eq!(relay.metric("blob_relay_deletes_changed_total"), Some(1));
    relay.stop().await;
}

/// Writing, reading, or both, is no delete grant: each such token is
/// refused (Forbidden) and the blob stays; the deleter's own Delete then
/// removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_delete_grant_deletes() {
    let (relay, c) = relay("delgrant").await;
    let etag = put_sealed(&c, "x/a", b"kept", "00", "none").await;
    for token in [WRITER, READER, LIMITED_TOKEN, TOKEN] {
        let answer = ask(&relay, delete_of(token, &c, "x/a", &etag)).await;
        assert_eq!(
            refused(&answer),
            Some(Code::Forbidden),
            "{token}: {answer:?}"
        );
        assert!(blob_exists(&c, "x/a").await, "{token} deleted it");
    }
    let unknown = ask(
        &relay,
        delete_of("nobody-0123456789abcdef", &c, "x/a", &etag),
    )
    .await;
    assert_eq!(refused(&unknown), Some(Code::Unauthorized));
    // The deleter's grant is for its container only.
    let other = ask(&relay, delete_of(DELETER, "other-container", "x/a", &etag)).await;
    assert_eq!(refused(&other), Some(Code::Forbidden));
    assert!(blob_exists(&c, "x/a").await);
    let answer = ask(&relay, delete_of(DELETER, &c, "x/a", &etag)).await;
    assert_eq!(outcome(&answer), Some(Removal::Deleted), "{answer:?}");
    relay.stop().await;
}

/// Hostile Delete frames are refused with their own codes before storage is
/// asked, and nothing is deleted: no ETag, any version (`*`), a list of
/// them, an ETag too long, a name no blob may have, a container name
/// storage refuses, a protocol version from elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_deletes_are_refused_and_delete_nothing() {
    let (relay, c) = relay("delhostile").await;
    let etag = put_sealed(&c, "h/a", b"kept", "00", "none").await;
    let long = "e".repeat(MAX_ETAG_BYTES + 1);
    let cases: Vec<(Delete, Code)> = vec![
        (delete_of(DELETER, &c, "h/a", ""), Code::InvalidOffer),
        (delete_of(DELETER, &c, "h/a", "\"\""), Code::InvalidOffer),
        (delete_of(DELETER, &c, "h/a", "*"), Code::InvalidOffer),
        (
            delete_of(DELETER, &c, "h/a", &format!("{etag},*")),
            Code::InvalidOffer,
        ),
        (delete_of(DELETER, &c, "h/a", &long), Code::TooLarge),
        (
            delete_of(DELETER, &c, "h/\u{202e}a", &etag),
            Code::InvalidName,
        ),
        (delete_of(DELETER, &c, "", &etag), Code::InvalidName),
        (
            delete_of(DELETER, &c, &"n".repeat(1025), &etag),
            Code::InvalidName,
        ),
        (
            delete_of(DELETER, "Bad_Name", "h/a", &etag),
            Code::InvalidName,
        ),
        (
            Delete {
                version: PROTOCOL_VERSION + 1,
                ..delete_of(DELETER, &c, "h/a", &etag)
            },
            Code::UnsupportedVersion,
        ),
    ];
    for (d, code) in cases {
        let shown = format!(
            "{:?}/{:?}",
            d.name.chars().take(20).collect::<String>(),
            d.etag.chars().take(20).collect::<String>()
        );
        let answer = ask(&relay, d).await;
        assert_eq!(refused(&answer), Some(code), "{shown}: {answer:?}");
    }
    assert!(blob_exists(&c, "h/a").await);
    assert_eq!(relay.metric("blob_relay_deletes_deleted_total"), Some(0));
    relay.stop().await;
}
