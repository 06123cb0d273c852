//! The relay's listings over real QUIC, frame by frame: a listing taken up at
//! the continuation marker its last page handed on (never by comparing
//! names), the marker held to its bounds; listing memory taken from the
//! budget and the caller's share while many List streams that read nothing
//! hold their pages, others served meanwhile; and a page held at most the
//! write timeout in all by a reader that takes one frame now and then.

use std::time::{Duration, Instant};

use relay_proto::id_key::Owner;
use relay_proto::protocol::{Code, MAX_LIST_MARKER_BYTES, Message};
use relay_server::state::DownloadLimits;
use relay_tests::blobs::{new_container, put_sealed};
use relay_tests::download::{fetch, fetch_of, list_frames, list_of, start_list};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use relay_transport::frames::read_frame;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const READER: &str = "reader-token-0123456789abcdef";

/// A relay whose limited token reads and writes a fresh container, with
/// `configure` applied to its limits.
async fn relay(
    tag: &str,
    budget: u64,
    configure: impl FnOnce(&mut relay_server::Config) + Send + 'static,
) -> (RelayHandle, String) {
    let container = new_container(tag).await;
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            memory_budget: budget,
            limited_to: format!("{container}:rw"),
            configure: Some(Box::new(configure)),
            ..Default::default()
        },
    );
    (relay, container)
}

/// Puts `n` blobs `l/NNNN` + `pad` straight into Azurite, 16 at a time.
async fn put_names(container: &str, n: usize, pad: &str) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("l/{i:04}{pad}")).collect();
    for chunk in names.chunks(16) {
        let mut puts = tokio::task::JoinSet::new();
        for name in chunk {
            let (c, name) = (container.to_string(), name.clone());
            puts.spawn(async move { put_sealed(&c, &name, b"x", "00", "none").await });
        }
        while puts.join_next().await.is_some() {}
    }
    names
}

/// Waits (at most a minute) for the relay to reach a state.
async fn until(relay: &RelayHandle, what: &str, done: impl Fn(&RelayHandle) -> bool) {
    let t0 = Instant::now();
    while !done(relay) {
        assert!(t0.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each page's last frame hands on storage's marker; a List that brings one
/// back gets the names after that page, each once, in storage's order, with
/// `resumed` set. Names whose UTF-8 and UTF-16 orders differ sit on both
/// sides of a page boundary: a resume that compared names would skip one.
#[tokio::test]
async fn a_listing_is_taken_up_at_the_marker_its_page_handed_on() {
    let (relay, c) = relay("lsmark", 256 * MIB, |cfg| {
        cfg.storage.download = DownloadLimits {
            list_page: 2,
            ..DownloadLimits::default()
        }
    })
    .await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    for name in ["p/a", "p/\u{1F600}", "p/\u{FF01}", "p/\u{FF5A}", "q/x"] {
        put_sealed(&c, name, name.as_bytes(), "00", "none").await;
    }
    let whole = list_frames(&conn, list_of(LIMITED_TOKEN, &c, "p/", None)).await;
    assert_eq!(whole.refused, None);
    // Azurite's order: UTF-16 code units (the emoji's D83D, then FF01, FF5A).
    assert_eq!(
        whole.names(),
        ["p/a", "p/\u{1F600}", "p/\u{FF01}", "p/\u{FF5A}"]
    );
    // A fresh listing opens with a frame of no names (the relay answers
    // for it before storage's first page), then two pages of two.
    let (opening, pages) = whole
        .frames
        .split_first()
        .unwrap_or_else(|| panic!("no frames"));
    assert!(
        opening.blobs.is_empty() && opening.marker.is_none(),
        "{opening:?}"
    );
    let markers: Vec<Option<&str>> = pages.iter().map(|f| f.marker.as_deref()).collect();
    assert_eq!(markers.len(), 2, "two pages of two, one frame each");
    assert!(markers[0].is_some(), "{markers:?}");
    assert_eq!(markers[1], None, "the last page has no marker");
    assert!(whole.frames.iter().all(|f| !f.resumed));
    assert!(
        whole
            .end
            .as_ref()
            .is_some_and(|e| e.blobs == 4 && !e.resumed)
    );

    // Taken up after page one: the emoji was handed on, the full-width
    // mark (before it in UTF-8) was not, and comes now.
    let marker = markers[0].map(str::to_string);
    let rest = list_frames(&conn, list_of(LIMITED_TOKEN, &c, "p/", marker)).await;
    assert_eq!(rest.names(), ["p/\u{FF01}", "p/\u{FF5A}"]);
    // Taken up: no opening frame, every frame says so.
    assert!(rest.frames.iter().all(|f| f.resumed && !f.blobs.is_empty()));
    assert!(rest.end.as_ref().is_some_and(|e| e.blobs == 2 && e.resumed));

    // A marker is the caller's input: its prefix still holds, its length is
    // bounded.
    let forged = list_frames(&conn, list_of(LIMITED_TOKEN, &c, "p/", Some("a".into()))).await;
    assert!(forged.names().iter().all(|n| n.starts_with("p/")));
    let long = Some("m".repeat(MAX_LIST_MARKER_BYTES + 1));
    let refused = list_frames(&conn, list_of(LIMITED_TOKEN, &c, "p/", long)).await;
    match refused.refused {
        Some(Message::Reject(f)) => assert_eq!(f.code, Code::InvalidOffer),
        other => panic!("{other:?}"),
    }
    relay.stop().await;
}

/// Many List streams on one connection that never read: each page the relay
/// holds for them is taken from the budget and their token's share first, so
/// what they hold stays within the share; those that get no memory are told
/// `busy`; every stream is dropped after the write timeout and all of it
/// comes back. Meanwhile another token lists the container and downloads a
/// blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_streams_that_read_nothing_hold_only_their_share_and_others_are_served() {
    let (relay, c) = relay("lshostile", 32 * MIB, |cfg| {
        cfg.storage.download = DownloadLimits {
            list_page: 100,
            write_timeout: Duration::from_secs(10),
            ..DownloadLimits::default()
        };
        cfg.limits.budget_wait = Duration::from_secs(2);
    })
    .await;
    // A page of 100 of these names is over 100 KiB of frames: more than the
    // hostile connection's windows take, so every page stays held.
    let names = put_names(&c, 400, &"n".repeat(1000)).await;
    put_sealed(&c, "small.bin", b"a blob to fetch", "00", "none").await;
    relay.rewrite_tokens(&format!(
        "{TOKEN}\n{LIMITED_TOKEN} {c}:rw\n{READER} {c}:r\n"
    ));
    relay.shared.sign_in.tokens.reload();
    let page = relay.shared.list_page();
    assert_eq!(page.names, 100);
    let share = relay.shared.share_of(&Owner::of_token(LIMITED_TOKEN));
    assert_eq!(share.total_bytes(), 16 * MIB);

    let (_ep, hostile) = Dial::to(&relay).window(64 * KIB).connect().await;
    let mut held = Vec::new();
    for _ in 0..32 {
        held.push(start_list(&hostile, list_of(LIMITED_TOKEN, &c, "l/", None)).await);
    }
    until(&relay, "the hostile streams hold pages", |_| {
        share.in_use_bytes() >= 4 * page.bytes()
    })
    .await;
    let budget = &relay.shared.limits.budget;
    assert!(share.in_use_bytes() <= share.total_bytes());
    assert!(budget.in_use_bytes() > 0, "pages come from the budget too");
    assert!(budget.in_use_bytes() <= budget.total_bytes());

    // Another caller, meanwhile: its whole listing and a blob.
    let (_ep2, other) = Dial::to(&relay).connect().await;
    let listed = list_frames(&other, list_of(READER, &c, "l/", None)).await;
    assert_eq!(listed.refused, None);
    assert!(listed.names() == names, "{} names", listed.names().len());
    let got = fetch(&other, fetch_of(READER, &c, "small.bin")).await;
    assert_eq!(got.data, b"a blob to fetch");
    assert!(share.in_use_bytes() > 0, "the hostile pages are still held");

    until(
        &relay,
        "every hostile stream is dropped, its memory back",
        |r| r.shared.limits.budget.in_use_bytes() == 0,
    )
    .await;
    assert_eq!(share.in_use_bytes(), 0);
    let stalled = relay
        .metric("blob_relay_listings_stalled_total")
        .unwrap_or(0);
    assert!(stalled >= 1, "{stalled}");
    assert_eq!(relay.metric("blob_relay_listings_completed_total"), Some(1));
    drop(held);
    drop(share);
    relay.stop().await;
}

/// A reader that takes one frame a second holds each write a second, well
/// within the write timeout; it still gets no more than the write timeout for
/// a whole page, and then the stream is reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_takes_a_frame_now_and_then_holds_a_page_only_the_write_timeout() {
    let (relay, c) = relay("lsslow", 256 * MIB, |cfg| {
        cfg.storage.download = DownloadLimits {
            list_page: 400,
            write_timeout: Duration::from_secs(3),
            ..DownloadLimits::default()
        };
    })
    .await;
    // One page of some 440 KiB: seven frames.
    put_names(&c, 400, &"n".repeat(1000)).await;
    let (_ep, conn) = Dial::to(&relay).window(64 * KIB).connect().await;
    let (_send, mut recv) = start_list(&conn, list_of(LIMITED_TOKEN, &c, "l/", None)).await;
    let mut frames = 0;
    let mut names = 0;
    let ended = loop {
        match read_frame(&mut recv).await {
            Ok(Message::Listing(l)) => {
                frames += 1;
                names += l.blobs.len();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(other) => break Some(other),
            Err(_) => break None,
        }
    };
    assert!(ended.is_none(), "reset, not {ended:?}");
    assert!(
        names < 400,
        "{frames} frames, {names} names before the reset"
    );
    until(&relay, "the listing counted as stalled", |r| {
        r.metric("blob_relay_listings_stalled_total") == Some(1)
    })
    .await;
    until(&relay, "its page's memory back", |r| {
        r.shared.limits.budget.in_use_bytes() == 0
    })
    .await;
    relay.stop().await;
}
