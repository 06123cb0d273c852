//! A local folder to `container/prefix`: sent once, then an unchanged re-run
//! reads no byte and writes no blob; a changed file is sent again;
//! `--checksum` and a deleted index only cost reads; a part of the folder
//! that cannot be read is a gap.

use std::path::Path;

use relay_tests::blobs::blob_sha;
use relay_tests::download_client::{direct_flags, relay_flags, setup};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::stderr;

use super::{etags, forget_index, ok, sync, sync_args};

/// The test's files: (name below the folder, size, seed).
const FILES: &[(&str, u64, u64)] = &[
    ("a.txt", 1000, 1),
    ("a.b", 10, 2),
    ("a/x.bin", 70_000, 3),
    ("a/y/z.bin", 5, 4),
    ("a0", 0, 5),
];

fn make(root: &Path) -> u64 {
    for (name, size, seed) in FILES {
        write_random(&root.join(name), *size, *seed);
    }
    FILES.iter().map(|f| f.1).sum()
}

fn blobs(prefix: &str) -> Vec<String> {
    FILES.iter().map(|f| format!("{prefix}/{}", f.0)).collect()
}

/// Every file of `root` is its blob under `prefix`, byte for byte.
async fn same(container: &str, prefix: &str, root: &Path) {
    for (name, ..) in FILES {
        let (_, sha) = blob_sha(container, &format!("{prefix}/{name}")).await;
        assert_eq!(sha, sha256_file(&root.join(name)), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_rerun_reads_and_sends_nothing_and_a_changed_file_is_sent() {
    let (relay, c) = setup("sync-up", None).await;
    let dir = Scratch::new("sync-up");
    let root = dir.path("src");
    let total = make(&root);
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/p"));
    let way = relay_flags(&relay);

    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(y["direction"], "upload");
    assert_eq!(y["sent"], FILES.len(), "{v}");
    assert_eq!(y["bytes_read"], total);
    same(&c, "p", &root).await;
    let before = etags(&c, &blobs("p")).await;
    let staged = relay.metric("blob_relay_bytes_staged_total");

    // Unchanged: not one byte read, no blob written, nothing staged.
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(y["skipped_unchanged"], FILES.len(), "{v}");
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["files"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(etags(&c, &blobs("p")).await, before);
    assert_eq!(relay.metric("blob_relay_bytes_staged_total"), staged);

    // A file changed (content and modification time) is sent again, alone.
    write_random(&root.join("a/x.bin"), 70_001, 99);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(1), Some(70_001)),
        "{v}"
    );
    assert_eq!(y["skipped_unchanged"], FILES.len() - 1);
    same(&c, "p", &root).await;
    let before = etags(&c, &blobs("p")).await;

    // --checksum reads everything and finds it identical: nothing written.
    let (out, v) = sync(&way, &src, &dest, &index, &["--checksum"]).await;
    let y = ok(&out, &v);
    let total = total + 1;
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(total)),
        "{v}"
    );
    assert_eq!(y["identical"], FILES.len());
    assert_eq!(etags(&c, &blobs("p")).await, before);

    // Without the index the next run only reads more, and records again.
    forget_index(&index);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(total)),
        "{v}"
    );
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    assert_eq!(ok(&out, &v)["bytes_read"], 0, "{v}");
    assert_eq!(etags(&c, &blobs("p")).await, before);
    same(&c, "p", &root).await;
    relay.stop().await;
}

/// A file edited in place (same size) crosses the link once: the send asks
/// for the listed version at once (`If-Match`), not "never" first and then
/// again after the relay's `exists`. A file touched but not changed does
/// not cross at all: the relay's seal vouches for the listed blob's SHA-256,
/// and the file's own hash, read here, matches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_file_crosses_once_and_a_touched_file_not_at_all() {
    let (relay, c) = setup("sync-up-once", None).await;
    let dir = Scratch::new("sync-up-once");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/p"));
    let way = relay_flags(&relay);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    let received = || relay.metric("blob_relay_bytes_received_total").unwrap_or(0);

    // Same size, other bytes: sent, and its bytes reach the relay once.
    write_random(&root.join("a/x.bin"), 70_000, 77);
    let before = received();
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(y["sent"], 1, "{v}");
    assert_eq!(received() - before, 70_000, "{v}");
    same(&c, "p", &root).await;

    // Touched: a new modification time, the same bytes. Read, not sent; the
    // blob is the same version, and the next run reads nothing.
    let etag_before = etags(&c, &blobs("p")).await;
    let path = root.join("a.txt");
    let later = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{e}"))
        + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(later))
        .unwrap_or_else(|e| panic!("touch: {e}"));
    let before = received();
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["identical"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    assert_eq!(y["bytes_read"], 1000, "{v}");
    assert_eq!(received(), before, "{v}");
    assert_eq!(etags(&c, &blobs("p")).await, etag_before);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    assert_eq!(ok(&out, &v)["bytes_read"], 0, "{v}");
    same(&c, "p", &root).await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_an_unchanged_rerun_reads_nothing() {
    let (relay, c) = setup("sync-up-direct", None).await;
    let dir = Scratch::new("sync-up-direct");
    let root = dir.path("src");
    let total = make(&root);
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/d"));
    let way = direct_flags();
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(5), Some(total)),
        "{v}"
    );
    assert_eq!(v["mode"], "direct");
    same(&c, "d", &root).await;
    let before = etags(&c, &blobs("d")).await;
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(etags(&c, &blobs("d")).await, before);
    // The text summary says the same.
    let args: Vec<String> = sync_args(&way, &src, &dest, &index, &[])
        .into_iter()
        .filter(|a| a != "--json")
        .collect();
    let out = relay_tests::run_client(&args, &[], relay_tests::download_client::T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "sync (upload): 0 sent, 5 unchanged (not read), 0 identical, 0 adopted; 0 B read"
        ),
        "{text}"
    );
    relay.stop().await;
}

/// A folder this user cannot read, and a name that is not UTF-8: each a
/// gap, reported; the rest is sent, the run fails, and a `--delete` run
/// deletes nothing (the blob no file matches stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_folder_is_a_gap_and_nothing_is_deleted() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let (relay, c) = setup("sync-up-gap", None).await;
    let dir = Scratch::new("sync-up-gap");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/g"));
    let way = relay_flags(&relay);
    // A blob only the destination has: a delete candidate.
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    write_random(&root.join("locked/secret"), 10, 7);
    std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"x")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(root.join("a.b")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o000))
        .unwrap_or_else(|e| panic!("{e}"));
    let args = sync_args(&way, &src, &dest, &index, &["--delete", "--dry-run"]);
    let out = as_unprivileged(&args).await;
    let _ = std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o755));
    let v = relay_tests::summary(&out);
    assert_eq!(out.status.code(), Some(1), "{}\n{v}", stderr(&out));
    let y = &v["sync"];
    assert_eq!(y["gaps"], 2, "{v}");
    assert_eq!(y["source_complete"], false);
    assert_eq!(y["planned_deletes"], 1);
    assert!(
        stderr(&out).contains("the source was not read whole"),
        "{}",
        stderr(&out)
    );
    let codes: Vec<_> = v["files"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f["status"] == "failed")
        .map(|f| f["error"]["code"].clone())
        .collect();
    assert_eq!(codes, ["incomplete", "incomplete"], "{v}");
    // The candidate is listed, and nothing was removed.
    assert!(v["files"].to_string().contains("would delete"), "{v}");
    let (_, sha) = blob_sha(&c, "g/a.b").await;
    assert_eq!(
        sha,
        relay_tests::files::write_random(&dir.path("again"), 10, 2)
    );
    relay.stop().await;
}

/// The client without the powers that let root read any folder (as an
/// ordinary user it has none of them anyway).
pub(super) async fn as_unprivileged(args: &[String]) -> std::process::Output {
    let mut cmd = relay_tests::client_command(args, &[]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return tokio::time::timeout(relay_tests::download_client::T, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("sync did not finish"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let std = cmd.as_std();
    let mut wrapped = tokio::process::Command::new("setpriv");
    wrapped
        .arg("--bounding-set=-dac_override,-dac_read_search")
        .arg("--")
        .arg(std.get_program())
        .args(std.get_args())
        .env_remove("RELAY_TOKEN");
    for (k, v) in std.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    tokio::time::timeout(relay_tests::download_client::T, wrapped.output())
        .await
        .unwrap_or_else(|_| panic!("sync did not finish"))
        .unwrap_or_else(|e| panic!("setpriv: {e}"))
}

/// `--dry-run` lists every delete candidate and the verdict, and moves and
/// deletes nothing; a batch over `--max-delete` is refused whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_lists_every_delete_and_the_verdict() {
    let (relay, c) = setup("sync-up-dry", None).await;
    let dir = Scratch::new("sync-up-dry");
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/r"));
    let way = relay_flags(&relay);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    let before = etags(&c, &blobs("r")).await;
    std::fs::remove_file(root.join("a.b")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(root.join("a/y/z.bin")).unwrap_or_else(|e| panic!("{e}"));
    write_random(&root.join("new.bin"), 50, 8);

    let (out, v) = sync(&way, &src, &dest, &index, &["--delete", "--dry-run"]).await;
    let y = ok(&out, &v);
    assert_eq!(y["planned_deletes"], 2, "{v}");
    assert_eq!(y["deleted"], 0);
    let lines: Vec<(String, String)> = v["files"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|f| {
            (
                f["blob"].as_str().unwrap_or_default().to_string(),
                f["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        lines.contains(&("r/a.b".into(), "would delete (not on the source)".into())),
        "{v}"
    );
    assert!(
        lines.contains(&(
            "r/a/y/z.bin".into(),
            "would delete (not on the source)".into()
        )),
        "{v}"
    );
    assert!(
        lines
            .iter()
            .any(|(b, r)| b == "r/new.bin" && r.starts_with("would send 50 bytes")),
        "{v}"
    );
    assert!(
        stderr(&out).contains("deletes: 2 would be made"),
        "{}",
        stderr(&out)
    );
    assert!(
        !relay_tests::blobs::blob_exists(&c, "r/new.bin").await,
        "nothing sent"
    );

    // Over the limit: the whole batch is refused, the run fails.
    let (out, v) = sync(
        &way,
        &src,
        &dest,
        &index,
        &["--delete", "--dry-run", "--max-delete", "1"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}\n{v}", stderr(&out));
    assert!(
        stderr(&out).contains("2 deletes exceed --max-delete (1): none made"),
        "{}",
        stderr(&out)
    );
    assert_eq!(etags(&c, &blobs("r")).await, before, "every blob stays");
    relay.stop().await;
}

/// Names where the file system's, UTF-8's and the service's orders differ
/// (`/` against `-` and `.`; an emoji against a fullwidth sign): the walk
/// and the listing merge without an order error, and a re-run finds every
/// one unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_in_the_service_s_order_merge_both_ways() {
    let (relay, c) = setup("sync-order", None).await;
    let dir = Scratch::new("sync-order");
    let root = dir.path("src");
    let names = ["a b", "a-b/c", "a.b", "a/b", "a0", "p/😀", "p/！", "Z"];
    for (i, n) in names.iter().enumerate() {
        write_random(&root.join(n), 10 + i as u64, i as u64);
    }
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/o"));
    let way = relay_flags(&relay);
    for moved in ["sent", "skipped_unchanged"] {
        let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
        let y = ok(&out, &v);
        assert_eq!(y["gaps"], 0, "{v}");
        assert_eq!(y[moved], names.len(), "{v}");
    }
    for n in names {
        let (_, sha) = blob_sha(&c, &format!("o/{n}")).await;
        assert_eq!(sha, sha256_file(&root.join(n)), "{n}");
    }
    // And back: the listing against a folder holding the same names.
    let back = dir.path("back");
    let index = dir.path("back.sqlite");
    for moved in ["fetched", "skipped_unchanged"] {
        let (out, v) = sync(&way, &dest, &back.display().to_string(), &index, &[]).await;
        let y = ok(&out, &v);
        assert_eq!(y["gaps"], 0, "{v}");
        assert_eq!(y[moved], names.len(), "{v}");
    }
    for n in names {
        assert_eq!(
            sha256_file(&back.join(n)),
            sha256_file(&root.join(n)),
            "{n}"
        );
    }
    relay.stop().await;
}
