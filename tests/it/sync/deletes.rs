//! `sync --delete` end to end, one test per guard: what the source no longer
//! has is removed, last; a token without the delete grant deletes nothing;
//! a batch over `--max-delete` deletes nothing; a source not read whole
//! deletes nothing; a blob written after the listing is kept (held at the
//! relay's Delete by a gate, so the race is made, not hoped for); a download's
//! DEST with a symbolic link to a folder outside it loses nothing outside.
//! Every blob and file left is checked by its SHA-256.

use std::path::Path;
use std::time::Duration;

use relay_server::TestHooks;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, put_sealed};
use relay_tests::download_client::{direct_flags, relay_flags};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::gate::Gate;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use relay_tests::stderr;
use sha2::{Digest, Sha256};

use super::upload::as_unprivileged;
use super::{ok, sync, sync_args};

/// A token that may read, write and delete the test's container.
const DELETER: &str = "sync-deleter-token-0123456789ab";
/// A token that may only write it.
const WRITER: &str = "sync-writer-token-0123456789abc";

/// (name below the folder, size, seed)
const FILES: &[(&str, u64, u64)] = &[
    ("keep.txt", 1000, 1),
    ("gone.txt", 20, 2),
    ("sub/gone.bin", 3000, 3),
    ("sub/keep.bin", 70_000, 4),
];

fn make(root: &Path) {
    for (name, size, seed) in FILES {
        write_random(&root.join(name), *size, *seed);
    }
}

/// A relay on the shared Azurite whose `DELETER` token may delete in a fresh
/// container (`LIMITED_TOKEN` may read and write it, not delete).
async fn relay_with_deleter(tag: &str, hooks: TestHooks) -> (RelayHandle, String) {
    let c = new_container(tag).await;
    let relay = RelayHandle::start(
        shared_azurite().storage(),
        RelayOptions {
            hooks,
            limited_to: format!("{c}:rw"),
            ..Default::default()
        },
    );
    relay.rewrite_tokens(&format!(
        "{LIMITED_TOKEN} {c}:rw\n{DELETER} {c}:rwd\n{WRITER} {c}:w\n"
    ));
    relay.shared.sign_in.tokens.reload();
    (relay, c)
}

fn with_token(relay: &RelayHandle, token: &str) -> Vec<String> {
    let mut f = relay_flags(relay);
    let at = f
        .iter()
        .position(|a| a == "--token")
        .map_or(f.len(), |i| i + 1);
    if at < f.len() {
        f[at] = token.to_string();
    }
    f
}

/// Each named file of `root` is its blob under `prefix`, byte for byte.
async fn blobs_hold(c: &str, prefix: &str, root: &Path, names: &[&str]) {
    for name in names {
        let (_, sha) = blob_sha(c, &format!("{prefix}/{name}")).await;
        assert_eq!(sha, sha256_file(&root.join(name)), "{name}");
    }
}

/// Synced once, two files removed at the source: the re-sync with `--delete`
/// removes exactly their blobs, through the relay and `--direct`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_what_the_source_no_longer_has_both_ways_of_connecting() {
    let (relay, c) = relay_with_deleter("sync-del", TestHooks::default()).await;
    let dir = Scratch::new("sync-del");
    for (prefix, way) in [
        ("relay", with_token(&relay, DELETER)),
        ("direct", direct_flags()),
    ] {
        let root = dir.path(prefix);
        make(&root);
        let index = dir.path(&format!("{prefix}.sqlite"));
        let (src, dest) = (format!("{}/", root.display()), format!("{c}/{prefix}"));
        let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
        ok(&out, &v);
        std::fs::remove_file(root.join("gone.txt")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_file(root.join("sub/gone.bin")).unwrap_or_else(|e| panic!("{e}"));

        let (out, v) = sync(&way, &src, &dest, &index, &["--delete"]).await;
        let y = ok(&out, &v);
        assert_eq!(
            (y["deleted"].as_u64(), y["sent"].as_u64()),
            (Some(2), Some(0)),
            "{prefix}: {v}"
        );
        for gone in ["gone.txt", "sub/gone.bin"] {
            assert!(
                !blob_exists(&c, &format!("{prefix}/{gone}")).await,
                "{prefix}: {gone}"
            );
        }
        blobs_hold(&c, prefix, &root, &["keep.txt", "sub/keep.bin"]).await;
        // Nothing left to delete: a third run deletes nothing more.
        let (out, v) = sync(&way, &src, &dest, &index, &["--delete"]).await;
        assert_eq!(ok(&out, &v)["deleted"], 0, "{prefix}: {v}");
    }
    relay.stop().await;
}

/// A token that may write but not delete: the run fails with one refusal
/// and every blob is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_grant_asking_to_delete_is_refused_and_nothing_is_deleted() {
    let (relay, c) = relay_with_deleter("sync-del-w", TestHooks::default()).await;
    let dir = Scratch::new("sync-del-w");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let way = with_token(&relay, LIMITED_TOKEN);
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/w"));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    let gone = dir.path("gone.txt");
    std::fs::rename(root.join("gone.txt"), &gone).unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(root.join("sub/gone.bin")).unwrap_or_else(|e| panic!("{e}"));

    let (out, v) = sync(&way, &src, &dest, &index, &["--delete"]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{v}", stderr(&out));
    assert_eq!(v["sync"]["deleted"], 0, "{v}");
    let err = stderr(&out);
    assert!(err.contains("refused to delete"), "{err}");
    let (_, sha) = blob_sha(&c, "w/gone.txt").await;
    assert_eq!(sha, sha256_file(&gone));
    assert!(blob_exists(&c, "w/sub/gone.bin").await);
    relay.stop().await;
}

/// A token that may write but not read: the sync cannot list its
/// destination, so it stops at once (a setup refusal, exit 2) before it
/// reads or offers a file, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_the_token_may_not_list_stops_the_sync_before_any_read() {
    let (relay, c) = relay_with_deleter("sync-no-read", TestHooks::default()).await;
    let dir = Scratch::new("sync-no-read");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let way = with_token(&relay, WRITER);
    let src = format!("{}/", root.display());
    let (out, v) = sync(&way, &src, &format!("{c}/n"), &index, &["--delete"]).await;
    assert_eq!(out.status.code(), Some(2), "{}\n{v}", stderr(&out));
    assert_eq!(v["error"]["kind"], "setup", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("may not read"), "{v}");
    for (name, ..) in FILES {
        assert!(!blob_exists(&c, &format!("n/{name}")).await, "{name}");
    }
    relay.stop().await;
}

/// Three deletes against `--max-delete 2`, then `--max-delete 50%` of four
/// blobs: each batch is refused whole; with room for it, all three go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_max_delete_deletes_nothing() {
    let (relay, c) = relay_with_deleter("sync-del-max", TestHooks::default()).await;
    let dir = Scratch::new("sync-del-max");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let way = with_token(&relay, DELETER);
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/m"));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    for name in ["gone.txt", "sub/gone.bin", "keep.txt"] {
        std::fs::remove_file(root.join(name)).unwrap_or_else(|e| panic!("{e}"));
    }
    for limit in ["2", "50%"] {
        let (out, v) = sync(
            &way,
            &src,
            &dest,
            &index,
            &["--delete", "--max-delete", limit],
        )
        .await;
        assert_eq!(out.status.code(), Some(1), "{limit}: {}\n{v}", stderr(&out));
        assert_eq!(v["sync"]["deleted"], 0, "{limit}: {v}");
        for (name, ..) in FILES {
            assert!(
                blob_exists(&c, &format!("m/{name}")).await,
                "{limit}: {name}"
            );
        }
    }
    let (out, v) = sync(
        &way,
        &src,
        &dest,
        &index,
        &["--delete", "--max-delete", "75%"],
    )
    .await;
    assert_eq!(ok(&out, &v)["deleted"], 3, "{v}");
    blobs_hold(&c, "m", &root, &["sub/keep.bin"]).await;
    relay.stop().await;
}

/// A folder of the source that cannot be read: the source is incomplete, so
/// no delete at all, though another removed file's blob is a candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_source_folder_means_no_delete_at_all() {
    use std::os::unix::fs::PermissionsExt;
    let (relay, c) = relay_with_deleter("sync-del-gap", TestHooks::default()).await;
    let dir = Scratch::new("sync-del-gap");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let way = with_token(&relay, DELETER);
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/g"));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    let gone = dir.path("gone.txt");
    std::fs::rename(root.join("gone.txt"), &gone).unwrap_or_else(|e| panic!("{e}"));
    let locked = root.join("sub");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000))
        .unwrap_or_else(|e| panic!("{e}"));
    let out = as_unprivileged(&sync_args(&way, &src, &dest, &index, &["--delete"])).await;
    let _ = std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755));
    let v = relay_tests::summary(&out);
    assert_eq!(out.status.code(), Some(1), "{}\n{v}", stderr(&out));
    assert_eq!(v["sync"]["source_complete"], false, "{v}");
    assert_eq!(v["sync"]["deleted"], 0, "{v}");
    let (_, sha) = blob_sha(&c, "g/gone.txt").await;
    assert_eq!(sha, sha256_file(&gone));
    blobs_hold(&c, "g", &root, &["sub/gone.bin", "sub/keep.bin"]).await;
    relay.stop().await;
}

/// The relay's Delete is held until the test has written a new version of
/// the blob the client listed: the delete (`If-Match` the listed ETag) finds
/// it changed and keeps it. Deterministic: the gate holds the Delete itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_written_after_the_listing_is_kept() {
    let gate = Gate::new(0);
    let hooks = TestHooks {
        delete_pace: Some(gate.pace()),
        ..TestHooks::default()
    };
    let (relay, c) = relay_with_deleter("sync-del-race", hooks).await;
    let dir = Scratch::new("sync-del-race");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let way = with_token(&relay, DELETER);
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/r"));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    std::fs::remove_file(root.join("gone.txt")).unwrap_or_else(|e| panic!("{e}"));

    let run = tokio::spawn({
        let (way, src, dest, index) = (way.clone(), src.clone(), dest.clone(), index.clone());
        async move { sync(&way, &src, &dest, &index, &["--delete"]).await }
    });
    gate.wait_holding(Duration::from_secs(60)).await;
    // Another writer's version, committed between the listing and the delete.
    let newer = b"another writer's version, written after the listing";
    put_sealed(&c, "r/gone.txt", newer, "00", "none").await;
    gate.release();
    let (out, v) = run.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}\n{v}", stderr(&out));
    assert_eq!(v["sync"]["deleted"], 0, "{v}");
    assert!(v["files"].to_string().contains("kept, not deleted"), "{v}");
    let want = (newer.len() as u64, hex::encode(Sha256::digest(newer)));
    assert_eq!(
        blob_sha(&c, "r/gone.txt").await,
        want,
        "the later version is kept whole"
    );
    relay.stop().await;
}

/// A download sync whose DEST holds a symbolic link to a folder outside it:
/// `--delete --delete-unknown` removes the local files the source does not
/// have, and nothing behind the link (the link itself is not a file of the
/// tree, so it is neither walked nor deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symbolic_link_in_dest_is_never_followed_by_a_delete() {
    let (relay, c) = relay_with_deleter("sync-del-link", TestHooks::default()).await;
    let dir = Scratch::new("sync-del-link");
    let root = dir.path("src");
    make(&root);
    let way = with_token(&relay, DELETER);
    let up_index = dir.path("up.sqlite");
    let (out, v) = sync(
        &way,
        &format!("{}/", root.display()),
        &format!("{c}/l"),
        &up_index,
        &[],
    )
    .await;
    ok(&out, &v);

    let dest = dir.path("dest");
    let outside = dir.path("outside");
    write_random(&outside.join("precious.bin"), 5000, 9);
    write_random(&outside.join("sub/gone.bin"), 10, 10);
    let sentinel = (
        sha256_file(&outside.join("precious.bin")),
        sha256_file(&outside.join("sub/gone.bin")),
    );
    std::fs::create_dir_all(&dest).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&outside, dest.join("linked")).unwrap_or_else(|e| panic!("{e}"));
    write_random(&dest.join("stray.txt"), 7, 11);
    let index = dir.path("down.sqlite");
    let down = format!("{}/", dest.display());
    let (out, v) = sync(
        &way,
        &format!("{c}/l"),
        &down,
        &index,
        &["--delete", "--delete-unknown"],
    )
    .await;
    let y = ok(&out, &v);
    assert_eq!(y["deleted"], 1, "{v}");
    assert!(!dest.join("stray.txt").exists());
    assert!(
        std::fs::symlink_metadata(dest.join("linked")).is_ok_and(|m| m.file_type().is_symlink())
    );
    assert_eq!(
        sentinel,
        (
            sha256_file(&outside.join("precious.bin")),
            sha256_file(&outside.join("sub/gone.bin")),
        )
    );
    for (name, ..) in FILES {
        assert_eq!(
            sha256_file(&dest.join(name)),
            sha256_file(&root.join(name)),
            "{name}"
        );
    }
    relay.stop().await;
}
