//! `container/prefix` to a local folder: fetched once, then an unchanged
//! re-run reads no local byte and fetches nothing; a blob changed remotely
//! is fetched; a local file changed since it was placed is a conflict and
//! is kept unless `--overwrite`; a deleted index only costs reads.

use relay_tests::download_client::{direct_flags, relay_flags, setup, tree, upload};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::stderr;

use super::{forget_index, ok, sync};

/// The blobs' files: (name below the folder, size, seed).
const FILES: &[(&str, u64, u64)] = &[
    ("a.txt", 1000, 11),
    ("a/x.bin", 70_000, 12),
    ("a/y/z.bin", 5, 13),
    ("b0", 300, 14),
];

/// The files under `root/data`, uploaded to `to` (as `to/data/...`).
async fn blobs_of(
    relay: &relay_tests::relay::RelayHandle,
    root: &std::path::Path,
    to: &str,
) -> u64 {
    for (name, size, seed) in FILES {
        write_random(&root.join("data").join(name), *size, *seed);
    }
    upload(relay, &root.join("data"), to).await;
    FILES.iter().map(|f| f.1).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_once_then_unchanged_costs_nothing_and_a_local_edit_is_a_conflict() {
    let (relay, c) = setup("sync-down", None).await;
    let dir = Scratch::new("sync-down");
    let total = blobs_of(&relay, &dir.path("src"), &format!("{c}/p")).await;
    let (want, out_dir) = (tree(&dir.path("src/data")), dir.path("out"));
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{c}/p/data"), out_dir.display().to_string());
    let way = relay_flags(&relay);

    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["direction"].as_str(), y["fetched"].as_u64()),
        (Some("download"), Some(4)),
        "{v}"
    );
    assert_eq!(tree(&out_dir), want);

    // Unchanged: no local byte read, no byte fetched.
    let sent = relay.metric("blob_relay_bytes_sent_total");
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(y["skipped_unchanged"], 4, "{v}");
    assert_eq!(
        (y["fetched"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(relay.metric("blob_relay_bytes_sent_total"), sent);

    // Without the index: every local file read and compared, none fetched
    // (read twice while the listing vouches for no blob: the driver's
    // comparison, then the hash for the row).
    forget_index(&index);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(y["fetched"], 0, "{v}");
    let read = y["bytes_read"].as_u64().unwrap_or_default();
    assert!((total..=2 * total).contains(&read), "{v}");
    assert_eq!(y["identical"], 4);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    assert_eq!(ok(&out, &v)["bytes_read"], 0, "{v}");
    assert_eq!(tree(&out_dir), want);

    // A local file removed is fetched again, alone.
    std::fs::remove_file(out_dir.join("a/y/z.bin")).unwrap_or_else(|e| panic!("{e}"));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["fetched"].as_u64(), y["bytes_read"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    assert_eq!(tree(&out_dir), want);

    // A blob changed remotely is fetched, alone.
    let fresh = write_random(&dir.path("src/data/b0"), 301, 15);
    let mut a = relay_tests::download_client::s(&[
        "upload",
        &dir.path("src/data/b0").display().to_string(),
        "--to",
        &format!("{c}/p/data"),
        "--overwrite",
        "--json",
    ]);
    a.extend(relay_flags(&relay));
    let up = relay_tests::run_client(&a, &[], relay_tests::download_client::T).await;
    assert!(up.status.success(), "{}", stderr(&up));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["fetched"].as_u64(), y["skipped_unchanged"].as_u64()),
        (Some(1), Some(3)),
        "{v}"
    );
    assert_eq!(sha256_file(&out_dir.join("b0")), fresh);
    assert_eq!(tree(&out_dir), tree(&dir.path("src/data")));

    conflict_until_overwrite(&way, &src, &dest, &index, &out_dir, &dir.path("src/data")).await;
    relay.stop().await;
}

/// A local file changed since it was placed: a conflict, kept as it is,
/// until `--overwrite` puts the blob's bytes back.
async fn conflict_until_overwrite(
    way: &[String],
    src: &str,
    dest: &str,
    index: &std::path::Path,
    out_dir: &std::path::Path,
    want_dir: &std::path::Path,
) {
    // A local file changed since it was placed: a conflict, kept as it is.
    let mine = write_random(&out_dir.join("a/x.bin"), 70_000, 77);
    let (out, v) = sync(way, src, dest, index, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{v}", stderr(&out));
    assert_eq!(v["sync"]["conflicts"], 1, "{v}");
    let failed: Vec<_> = v["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["error"]["code"], "sync_conflict");
    assert_eq!(sha256_file(&out_dir.join("a/x.bin")), mine, "kept");
    // --overwrite puts the blob's bytes back.
    let (out, v) = sync(way, src, dest, index, &["--overwrite"]).await;
    assert_eq!(ok(&out, &v)["fetched"], 1, "{v}");
    assert_eq!(tree(out_dir), tree(want_dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_fetched_once_then_nothing() {
    let (relay, c) = setup("sync-down-direct", None).await;
    let dir = Scratch::new("sync-down-direct");
    blobs_of(&relay, &dir.path("src"), &format!("{c}/q")).await;
    let out_dir = dir.path("out");
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{c}/q/data"), out_dir.display().to_string());
    let way = direct_flags();
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    assert_eq!(ok(&out, &v)["fetched"], 4, "{v}");
    assert_eq!(v["mode"], "direct");
    assert_eq!(tree(&out_dir), tree(&dir.path("src/data")));
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["fetched"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(y["skipped_unchanged"], 4);
    relay.stop().await;
}

/// `--dry-run` into a folder that does not exist yet: every blob would be
/// fetched, and the folder is not made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_into_a_new_folder_makes_nothing() {
    let (relay, c) = setup("sync-down-dry", None).await;
    let dir = Scratch::new("sync-down-dry");
    blobs_of(&relay, &dir.path("src"), &format!("{c}/n")).await;
    let out_dir = dir.path("out");
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{c}/n/data"), out_dir.display().to_string());
    let (out, v) = sync(&relay_flags(&relay), &src, &dest, &index, &["--dry-run"]).await;
    ok(&out, &v);
    let files = v["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(files.len(), 4, "{v}");
    assert!(
        files.iter().all(|f| f["status"] == "planned"
            && f["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("would fetch"))),
        "{v}"
    );
    assert!(!out_dir.exists());
    assert!(!index.exists(), "a dry run writes no index");
    relay.stop().await;
}

/// Ctrl-C while a blob is held mid-fetch (the relay's gate: whatever the
/// machine's speed): exit 130, nothing placed under the final name; the same
/// command then resumes the partial file and finishes, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_and_the_same_command_resumes() {
    use relay_tests::download_client::{T, setup_gated};
    let (relay, c, gate) = setup_gated("sync-down-int").await;
    let dir = Scratch::new("sync-down-int");
    let size: u64 = 12 << 20;
    write_random(&dir.path("src/data/huge.bin"), size, 21);
    blobs_of(&relay, &dir.path("src"), &format!("{c}/i")).await;
    let out_dir = dir.path("out");
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{c}/i/data"), out_dir.display().to_string());
    let way = relay_flags(&relay);
    // Only the large blob on the first run, so the one the gate holds is it.
    let first = ["--delete", "--include", "huge.bin"];
    let args = super::sync_args(&way, &src, &dest, &index, &first);
    let mut child = relay_tests::spawn_client(&args, &[]);
    gate.wait_holding(T).await;
    let partial = out_dir.join(relay_client::download::place::partial_name(
        &c,
        "i/data/huge.bin",
    ));
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&partial).map_or(0, |m| m.len()) < 1 << 20 {
        assert!(t0.elapsed() < T, "the partial file never grew");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pid = child.id().unwrap_or_else(|| panic!("no pid")) as libc::pid_t;
    // SAFETY: a signal to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(T, child.wait())
        .await
        .unwrap_or_else(|_| panic!("sync did not stop"))
        .unwrap_or_else(|e| panic!("{e}"));
    gate.release();
    assert_eq!(status.code(), Some(130));
    assert!(
        !out_dir.join("huge.bin").exists(),
        "no half file under the final name"
    );

    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    ok(&out, &v);
    let huge = v["files"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|f| f["blob"] == "i/data/huge.bin")
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        huge["bytes_resumed"].as_u64().is_some_and(|n| n > 0),
        "{huge}"
    );
    assert_eq!(tree(&out_dir), tree(&dir.path("src/data")));
    // The fetch the gate held belonged to the interrupted client: the relay
    // is not made to wait it out (its write timeout) before the test ends.
    relay.abandon();
}
