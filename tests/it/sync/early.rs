//! A file changed here since this machine placed its blob is sent as soon as
//! the walk meets it, before the listing reaches its name, and replaces only
//! the version placed (`If-Match` the index's ETag). A blob changed or
//! removed by anyone since refuses that send, and the name falls back to the
//! merge's decision with the listing's view, as if nothing had been tried.
//!
//! Deterministic where it claims an order: the storage proxy holds the
//! listing's second page (pages of two names), or its first, so the early
//! send provably commits while the merge cannot have reached the name (the
//! relay answers for a listing before storage's first page, once the
//! container is known to be there). The fallbacks run
//! 30 rounds of other writers and local edits, and every blob is checked by
//! SHA-256 against its file after every round.

use std::net::SocketAddr;
use std::path::Path;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, put_sealed, writer};
use relay_tests::download_client::{T, setup};
use relay_tests::files::{sha256_file, write_random};
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{client_command, stderr, summary};

use super::{Synced, etags, ok, sync, sync_args, synced_once};

/// (name below the folder, size, seed): in the listing's order.
const FILES: &[(&str, u64, u64)] = &[
    ("a", 1000, 1),
    ("b", 2000, 2),
    ("c", 3000, 3),
    ("d", 4000, 4),
    ("e", 5000, 5),
    ("f", 6000, 6),
];

fn make(root: &Path) {
    for (name, size, seed) in FILES {
        write_random(&root.join(name), *size, *seed);
    }
}

/// Every file of `root` is its blob under `p/`, byte for byte.
async fn same(container: &str, root: &Path, names: &[&str]) {
    for name in names {
        let (_, sha) = blob_sha(container, &format!("p/{name}")).await;
        assert_eq!(sha, sha256_file(&root.join(name)), "{name}");
    }
}

/// The re-sync of `t` started, to be held and released at the proxy.
fn start(t: &Synced) -> tokio::process::Child {
    let args = sync_args(&t.way, &t.src, &t.dest, &t.index, &[]);
    client_command(&args, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A started sync's output and summary, once it ends (`T`: a hang guard).
async fn finish(child: tokio::process::Child) -> (std::process::Output, serde_json::Value) {
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("sync did not finish"))
        .unwrap_or_else(|e| panic!("{e}"));
    let v = summary(&out);
    (out, v)
}

/// A relay listing two names a page, its storage behind a proxy.
async fn paged_relay(tag: &str) -> (String, FaultProxy, RelayHandle) {
    let container = new_container(tag).await;
    let az = shared_azurite();
    let azurite = SocketAddr::from(([127, 0, 0, 1], az.port));
    let proxy = FaultProxy::start(azurite, Schedule::seeded(1)).await;
    let storage = az.storage_at(&proxy.url(), Default::default());
    let opts = RelayOptions {
        limited_to: format!("{container}:rw"),
        configure: Some(Box::new(|cfg| cfg.storage.download.list_page = 2)),
        ..RelayOptions::default()
    };
    (container, proxy, RelayHandle::start(storage, opts))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_here_commits_while_the_listing_is_held_and_crosses_once() {
    // The re-run's first page ([a, b]) goes on; the second waits, so the
    // merge cannot get past `b`.
    commits_while_pages_are_held("sync-early", 1).await;
}

/// The relay answers for the listing (the container is there, the caller
/// may list it) before storage's first page: with that page held, no name
/// has reached the merge, and the edited file commits all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_here_commits_before_the_listings_first_page() {
    commits_while_pages_are_held("sync-early-first", 0).await;
}

/// `e`, edited in place, commits while every listing page after the
/// re-run's first `pages` is held at storage, and crosses the link once.
async fn commits_while_pages_are_held(tag: &str, pages: u64) {
    let (c, proxy, relay) = paged_relay(tag).await;
    let (t, first) = synced_once(&relay, &c, tag, make).await;
    assert_eq!(first["sent"], FILES.len(), "{first}");
    let (root, index, way) = (&t.root, &t.index, &t.way);
    let (src, dest) = (&t.src, &t.dest);

    // Same size: its bytes are read to tell an edit from a touch.
    write_random(&root.join("e"), 5000, 55);
    let edited = sha256_file(&root.join("e"));
    let listed_before = proxy.stats.requests_of(Op::ListBlobs);
    proxy.hold_after(Op::ListBlobs, listed_before + pages);
    let received = relay.metric("blob_relay_bytes_received_total");
    let child = start(&t);
    proxy.wait_held(1, T).await;
    // Read straight from Azurite (not through the proxy), until the blob
    // holds the edit; `T` only guards against a hang.
    let deadline = tokio::time::Instant::now() + T;
    while blob_sha(&c, "p/e").await.1 != edited {
        assert!(
            tokio::time::Instant::now() < deadline,
            "e was not committed while the listing was held"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let committed = etags(&c, &["p/e".to_string()]).await;
    let (asked, answered) = (
        proxy.stats.requests_of(Op::ListBlobs),
        proxy.stats.answered_of(Op::ListBlobs),
    );
    assert_eq!(asked - answered, 1, "a page is still held");
    assert_eq!(asked, listed_before + pages + 1, "pages asked for");

    proxy.release();
    let (out, v) = finish(child).await;
    let y = ok(&out, &v);
    assert_eq!(y["sent"], 1, "{v}");
    assert_eq!(y["skipped_unchanged"], FILES.len() - 1, "{v}");
    // Once: the merge, on reaching `e`, sent nothing more; its bytes reached
    // the relay once, and the blob is the version committed early.
    let now = relay.metric("blob_relay_bytes_received_total");
    assert_eq!(now.zip(received).map(|(n, r)| n - r), Some(5000));
    assert_eq!(etags(&c, &["p/e".to_string()]).await, committed);
    let names: Vec<&str> = FILES.iter().map(|f| f.0).collect();
    same(&c, root, &names).await;
    // And the index took it: the next run reads nothing.
    let (out, v) = sync(way, src, dest, index, &[]).await;
    assert_eq!(ok(&out, &v)["bytes_read"], 0, "{v}");
    relay.stop().await;
}

/// The relay answers for a listing only once storage said the container is
/// there: a container gone since the last run (storage answers its check
/// `404 ContainerNotFound`, as for a deleted one) stops the re-run as a
/// setup refusal before any file is read or sent, edited files and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_gone_since_stops_the_sync_before_any_send() {
    let (c, proxy, relay) = paged_relay("sync-early-gone").await;
    let (t, _) = synced_once(&relay, &c, "sync-early-gone", make).await;
    let (root, index, way) = (&t.root, &t.index, &t.way);
    write_random(&root.join("b"), 2000, 66);
    write_random(&root.join("e"), 5001, 67);
    let mut gone = Schedule::seeded(2);
    gone.chances = vec![(
        Op::ContainerProperties,
        1.0,
        Fault::Status(404, "ContainerNotFound"),
    )];
    proxy.set_schedule(gone);
    let received = relay.metric("blob_relay_bytes_received_total");
    let (out, v) = sync(way, &t.src, &t.dest, index, &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}\n{v}", stderr(&out));
    assert_eq!(v["error"]["kind"], "setup", "{v}");
    assert_eq!(
        relay.metric("blob_relay_bytes_received_total"),
        received,
        "nothing sent"
    );
    assert_eq!(proxy.stats.requests_of(Op::ListBlobs), 1, "never listed");
    // Storage still holds what the first run placed.
    for (name, ..) in FILES {
        assert!(blob_exists(&c, &format!("p/{name}")).await, "{name}");
    }
    relay.stop().await;
}

/// Round `r`'s plan: files edited here, blobs replaced by another writer,
/// blobs removed by another; names from [`FILES`], by the round.
fn round(r: usize) -> (Vec<&'static str>, Vec<&'static str>, Vec<&'static str>) {
    let name = |k: usize| FILES[(r + k) % FILES.len()].0;
    // Edited here and replaced there; edited here and removed there; edited
    // here only; replaced there only (the merge restores the source).
    (
        vec![name(0), name(1), name(2)],
        vec![name(0), name(3)],
        vec![name(1)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_changed_or_removed_since_fall_back_to_the_listing_every_round() {
    let (relay, c) = setup("sync-early-back", None).await;
    let (t, _) = synced_once(&relay, &c, "sync-early-back", make).await;
    let (root, index, way) = (&t.root, &t.index, &t.way);
    let (src, dest) = (&t.src, &t.dest);
    let names: Vec<&str> = FILES.iter().map(|f| f.0).collect();
    for r in 0..30 {
        let (edited, replaced, removed) = round(r);
        for (k, name) in edited.iter().enumerate() {
            let size = FILES.iter().find(|f| f.0 == *name).map_or(1, |f| f.1);
            // Every other round keeps the size (read to tell from a touch).
            let size = if (r + k) % 2 == 0 {
                size
            } else {
                size + r as u64 + 1
            };
            write_random(&root.join(name), size, 1000 + (r * 10 + k) as u64);
        }
        for name in &replaced {
            let data = format!("another writer, round {r}").into_bytes();
            put_sealed(&c, &format!("p/{name}"), &data, "00", "forged").await;
        }
        for name in &removed {
            writer(&c, &format!("p/{name}"))
                .delete()
                .await
                .unwrap_or_else(|e| panic!("delete {name}: {e}"));
        }
        let (out, v) = sync(way, src, dest, index, &[]).await;
        let y = ok(&out, &v);
        // Three edited, one replaced there only: four sends, each once.
        assert_eq!(y["sent"], 4, "round {r}: {v}");
        same(&c, root, &names).await;
        let (out, v) = sync(way, src, dest, index, &[]).await;
        let y = ok(&out, &v);
        assert_eq!(
            (y["sent"].as_u64(), y["bytes_read"].as_u64()),
            (Some(0), Some(0)),
            "round {r}, again: {v}"
        );
    }
    relay.stop().await;
}

/// Another writer commits while the sync's sends are held at storage (after
/// the listing): an edited file (sent early, then by the merge's view) and a
/// new one (not listed) fail, `conflict` and `exists`, and both blobs stay
/// the other writer's. The next run compares again: the source wins, over
/// the version it has now seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_written_while_the_send_is_held_is_never_replaced_unseen() {
    let (c, proxy, relay) = paged_relay("sync-early-held").await;
    let (t, _) = synced_once(&relay, &c, "sync-early-held", make).await;
    let (root, index, way) = (&t.root, &t.index, &t.way);
    let (src, dest) = (&t.src, &t.dest);
    write_random(&root.join("b"), 2001, 77);
    write_random(&root.join("g"), 700, 78);
    // Every Put Blob from now on waits (the files are small: one Put Blob
    // each); the listing, gets and heads go on.
    proxy.hold(Op::Other);
    let child = start(&t);
    proxy.wait_held(2, T).await;
    let theirs = b"written by someone else meanwhile".to_vec();
    for name in ["p/b", "p/g"] {
        put_sealed(&c, name, &theirs, "00", "forged").await;
    }
    let (_, their_sha) = blob_sha(&c, "p/b").await;
    proxy.release();
    let (out, v) = finish(child).await;
    assert!(!out.status.success(), "{v}");
    let code = |blob: &str| {
        v["files"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["blob"] == blob))
            .map(|f| f["error"]["code"].clone())
    };
    assert_eq!(code("p/b"), Some("conflict".into()), "{v}");
    assert_eq!(code("p/g"), Some("exists".into()), "{v}");
    for name in ["p/b", "p/g"] {
        assert_eq!(blob_sha(&c, name).await.1, their_sha, "{name}");
    }

    let (out, v) = sync(way, src, dest, index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(y["sent"], 2, "{v}");
    let mut names: Vec<&str> = FILES.iter().map(|f| f.0).collect();
    names.push("g");
    same(&c, root, &names).await;
    relay.stop().await;
}
