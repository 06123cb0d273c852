//! The upload a user re-runs: skip and sync (`--overwrite` modes, `skipped
//! (identical)` resting on the relay's seal), `--dry-run`, `--include/--exclude`,
//! links and FIFOs, duplicate destinations, `--checksums` manifests, and the
//! forms `--to` takes. Real client binary, real relay on loopback QUIC, real
//! Azurite; every committed blob is downloaded and hashed.

use std::path::Path;
use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{run_client, summary, unique_container};
use serde_json::Value;

const T: Duration = Duration::from_secs(120);

async fn setup(tag: &str) -> (RelayHandle, String) {
    let storage = shared_azurite().storage();
    let container = unique_container(tag);
    storage
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (
        RelayHandle::start(storage, RelayOptions::default()),
        container,
    )
}

fn s(p: &Path) -> String {
    p.to_str().unwrap_or_default().to_string()
}

/// `upload PATHS... --json EXTRA... <relay args>`.
async fn upload(
    relay: &RelayHandle,
    to: &str,
    paths: &[String],
    extra: &[&str],
) -> (Option<i32>, Value, String) {
    let mut a = vec!["upload".to_string()];
    a.extend(paths.iter().cloned());
    a.push("--json".into());
    a.extend(extra.iter().map(|x| x.to_string()));
    a.extend(relay.client_args(to));
    let out = run_client(&a, &[], T).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.code(), summary(&out), stderr)
}

/// blob -> (status, reason) from a JSON summary.
fn statuses(v: &Value) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = v["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let key = if f["blob"].as_str().unwrap_or_default().is_empty() {
                Path::new(f["path"].as_str().unwrap_or_default())
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_string()
            } else {
                f["blob"].as_str().unwrap_or_default().to_string()
            };
            (
                key,
                f["status"].as_str().unwrap_or_default().to_string(),
                f["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn row(blob: &str, status: &str, reason: &str) -> (String, String, String) {
    (blob.into(), status.into(), reason.into())
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap_or_default()).unwrap_or_default();
    // SAFETY: a valid NUL-terminated path; mkfifo does not keep the pointer.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerun_skips_identical_and_if_different_replaces_only_what_changed() {
    let (relay, container) = setup("sync").await;
    let dir = Scratch::new("sync");
    let data = dir.path("data");
    let a = data.join("a.txt");
    let b = data.join("b.csv");
    let c = data.join("sub/c.csv");
    write_random(&a, 1000, 1);
    let sha_b = write_random(&b, 2000, 2);
    let sha_c = write_random(&c, 6 << 20, 3);
    mkfifo(&data.join("pipe"));
    std::os::unix::fs::symlink(&b, data.join("link.csv")).unwrap_or_else(|e| panic!("{e}"));
    let paths = [s(&data)];

    // Filters: only the CSVs (the link is one by name: skipped, not a failure).
    let (code, v, err) = upload(&relay, &container, &paths, &["--include", "*.csv"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        statuses(&v),
        [
            row("data/b.csv", "committed", ""),
            row("data/sub/c.csv", "committed", ""),
            row(
                "link.csv",
                "skipped",
                "symbolic link (add --follow-symlinks to follow it)"
            ),
        ]
    );
    assert!(!blob_exists(&container, "data/a.txt").await);

    // A plain rerun: identical files are skipped (exit 0, no bytes, no
    // throughput), and so are the FIFO and the link.
    let (code, v, err) = upload(&relay, &container, &paths, &[]).await;
    assert_eq!(code, Some(0), "{err}");
    let st = statuses(&v);
    assert!(st.contains(&row("data/a.txt", "committed", "")), "{st:?}");
    assert!(
        st.contains(&row("data/b.csv", "skipped", "identical")),
        "{st:?}"
    );
    assert!(
        st.contains(&row("data/sub/c.csv", "skipped", "identical")),
        "{st:?}"
    );
    assert_eq!(v["totals"]["bytes"], 1000, "{v}");
    assert!(
        st.contains(&row("pipe", "skipped", "not a regular file")),
        "{st:?}"
    );
    assert_eq!(v["totals"]["skipped"], 4, "{v}");

    // a.txt changes. A dry run says what would happen and writes nothing.
    let sha_a2 = write_random(&a, 3000, 4);
    let (code, v, err) = upload(
        &relay,
        &container,
        &paths,
        &["--dry-run", "--overwrite=if-different", "--exclude", "pipe"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let st = statuses(&v);
    assert!(
        st.contains(&row(
            "data/a.txt",
            "planned",
            "would replace (the blob differs)"
        )),
        "{st:?}"
    );
    assert!(
        st.contains(&row("data/b.csv", "planned", "would skip (identical)")),
        "{st:?}"
    );
    assert_eq!(blob_sha(&container, "data/a.txt").await.0, 1000);

    // Without if-different the changed file is refused (exit 1), the others skipped.
    let (code, v, _) = upload(&relay, &container, &paths, &["--exclude", "pipe"]).await;
    assert_eq!(code, Some(1));
    assert!(statuses(&v).contains(&row("data/a.txt", "failed", "")));

    // if-different: the changed file is replaced, the identical ones skipped.
    let (code, v, err) = upload(
        &relay,
        &container,
        &paths,
        &[
            "--overwrite=if-different",
            "--exclude",
            "pipe",
            "--follow-symlinks",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let st = statuses(&v);
    assert!(st.contains(&row("data/a.txt", "committed", "")), "{st:?}");
    assert!(
        st.contains(&row("data/sub/c.csv", "skipped", "identical")),
        "{st:?}"
    );
    // Followed, the link is a file of its own.
    assert!(
        st.contains(&row("data/link.csv", "committed", "")),
        "{st:?}"
    );
    assert_eq!(blob_sha(&container, "data/a.txt").await, (3000, sha_a2));
    assert_eq!(
        blob_sha(&container, "data/b.csv").await,
        (2000, sha_b.clone())
    );
    assert_eq!(blob_sha(&container, "data/link.csv").await, (2000, sha_b));
    assert_eq!(
        blob_sha(&container, "data/sub/c.csv").await,
        (6 << 20, sha_c)
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_rests_on_the_relays_seal_not_on_metadata() {
    let (relay, container) = setup("seal").await;
    let dir = Scratch::new("seal");
    let file = dir.path("x.bin");
    let sha = write_random(&file, 4000, 9);
    // Another writer (anyone with a SAS) puts other bytes under the name, with
    // our file's hash in `sha256` metadata and a seal it had to make up.
    let meta = std::collections::BTreeMap::new();
    let forged = relay_storage::store::Commit {
        sha256_hex: &sha,
        seal: "forged-seal",
        content_type: None,
        content_md5: None,
        metadata: &meta,
        condition: &relay_storage::store::Condition::IfAbsent,
    };
    relay_tests::blobs::writer(&container, "x.bin")
        .put_blob(bytes::Bytes::from(vec![7u8; 4000]), &forged)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, v, _) = upload(&relay, &container, &[s(&file)], &[]).await;
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(statuses(&v), [row("x.bin", "failed", "")]);
    let (code, v, err) = upload(
        &relay,
        &container,
        &[s(&file)],
        &["--overwrite=if-different"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(statuses(&v), [row("x.bin", "committed", "")]);
    assert_eq!(blob_sha(&container, "x.bin").await, (4000, sha));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_and_manifests_are_checked_before_anything_is_sent() {
    let (relay, container) = setup("manifest").await;
    let dir = Scratch::new("manifest");
    let good = dir.path("m/good.bin");
    let bad = dir.path("m/bad.bin");
    let unlisted = dir.path("m/unlisted.bin");
    let sha_good = write_random(&good, 7000, 11);
    write_random(&bad, 7000, 12);
    write_random(&unlisted, 10, 13);
    let wrong = sha256_file(&good);
    std::fs::write(
        dir.path("m/SHA256SUMS"),
        format!("{sha_good}  good.bin\n{wrong}  bad.bin\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, v, err) = upload(
        &relay,
        &container,
        &[s(&good), s(&bad), s(&unlisted)],
        &["--checksums", &s(&dir.path("m/SHA256SUMS"))],
    )
    .await;
    assert_eq!(code, Some(1), "{err}");
    let st = statuses(&v);
    assert!(st.contains(&row("good.bin", "committed", "")), "{st:?}");
    assert!(st.contains(&row("bad.bin", "failed", "")), "{st:?}");
    assert!(st.contains(&row("unlisted.bin", "failed", "")), "{st:?}");
    assert!(err.contains("not listed in"), "{err}");
    assert!(err.contains("bad.bin"), "{err}");
    assert_eq!(blob_sha(&container, "good.bin").await, (7000, sha_good));
    assert!(
        !blob_exists(&container, "bad.bin").await,
        "a file against its manifest line is never committed"
    );
    assert!(!blob_exists(&container, "unlisted.bin").await);

    // Two sources for one blob: the second is refused while walking.
    let other = dir.path("o/good.bin");
    write_random(&other, 5, 14);
    let (code, v, err) = upload(&relay, &container, &[s(&good), s(&other)], &[]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("same destination blob"), "{err}");
    assert_eq!(v["totals"]["failed"], 1);
    assert_eq!(
        v["totals"]["skipped"], 1,
        "the first is the identical blob: {v}"
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_as_users_write_them() {
    let (relay, container) = setup("dest").await;
    let dir = Scratch::new("dest");
    let file = dir.path("f.bin");
    let sha = write_random(&file, 100, 21);
    // A full blob URL: the container and prefix come from its path.
    let url = format!("https://devstoreaccount1.blob.core.windows.net/{container}/pre/fix");
    let (code, v, err) = upload(&relay, &url, &[s(&file)], &[]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["files"][0]["blob"], "pre/fix/f.bin");
    assert_eq!(
        blob_sha(&container, "pre/fix/f.bin").await,
        (100, sha.clone())
    );

    // Direct mode: a --storage-url naming a container is refused, not nested.
    let az = shared_azurite().url();
    let a: Vec<String> = [
        "upload",
        &s(&file),
        "--direct",
        "--storage-url",
        &format!("{az}/{container}"),
        "--account-key",
        relay_tests::DEV_KEY,
        "--to",
        &format!("{container}/x"),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("names a container or path"), "{err}");

    // A missing container: one setup error through the relay (exit 2), and
    // --create-container in direct mode makes it.
    let missing = unique_container("missing");
    let (code, v, _) = upload(&relay, &missing, &[s(&file)], &[]).await;
    assert_eq!(code, Some(2));
    assert_eq!(v["ok"], false);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("does not exist"),
        "{v}"
    );
    let a: Vec<String> = [
        "upload",
        &s(&file),
        "--direct",
        "--storage-url",
        &az,
        "--account-key",
        relay_tests::DEV_KEY,
        "--create-container",
        "--to",
        &missing,
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    let out = run_client(&a, &[], T).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(blob_sha(&missing, "f.bin").await, (100, sha));
    relay.stop().await;
}

fn set_mtime(path: &Path, t: std::time::SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(t))
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
}

/// `--overwrite=if-newer` (AzCopy's ifSourceNewer): a changed file whose mtime
/// is after the blob's Last-Modified replaces it, a changed file with an older
/// mtime is `skipped (not newer)` and its blob kept, an identical one is
/// `skipped (identical)`; the dry run predicts each. Through the relay and in
/// direct mode; every blob hashed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_newer_replaces_only_files_modified_after_their_blob() {
    use std::time::{Duration, SystemTime};
    let (relay, container) = setup("newer").await;
    let dir = Scratch::new("newer");
    let data = dir.path("data");
    let (old, new, same) = (
        data.join("old.bin"),
        data.join("new.bin"),
        data.join("same.bin"),
    );
    let sha_old = write_random(&old, 5000, 11);
    write_random(&new, 6000, 12);
    let sha_same = write_random(&same, 7000, 13);
    let paths = [s(&data)];
    let direct = |extra: &[&str]| {
        let mut a: Vec<String> = ["upload", &s(&data), "--json", "--direct"]
            .iter()
            .chain(extra)
            .map(|x| x.to_string())
            .collect();
        a.extend(
            [
                "--storage-url",
                &shared_azurite().url(),
                "--account-key",
                relay_tests::DEV_KEY,
                "--to",
                &format!("{container}/direct"),
                "--id-key-file",
                &dir.path("direct.key").display().to_string(),
            ]
            .map(str::to_string),
        );
        a
    };
    let (code, _, err) = upload(&relay, &container, &paths, &[]).await;
    assert_eq!(code, Some(0), "{err}");
    let out = run_client(&direct(&[]), &[], T).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // old.bin changes but its mtime is set an hour before the commit; new.bin
    // changes and is modified an hour after it.
    let hour = Duration::from_secs(3600);
    write_random(&old, 5500, 21);
    set_mtime(&old, SystemTime::now() - hour);
    let sha_new2 = write_random(&new, 6500, 22);
    set_mtime(&new, SystemTime::now() + hour);

    let want_dry = [
        row(
            "data/new.bin",
            "planned",
            "would replace (the source is newer)",
        ),
        row("data/old.bin", "planned", "would skip (not newer)"),
        row("data/same.bin", "planned", "would skip (identical)"),
    ];
    let want = [
        row("data/new.bin", "committed", ""),
        row("data/old.bin", "skipped", "not newer"),
        row("data/same.bin", "skipped", "identical"),
    ];
    let (code, v, err) = upload(
        &relay,
        &container,
        &paths,
        &["--overwrite=if-newer", "--dry-run"],
    )
    .await;
    assert_eq!((code, statuses(&v)), (Some(0), want_dry.to_vec()), "{err}");
    let (code, v, err) = upload(&relay, &container, &paths, &["--overwrite=ifSourceNewer"]).await;
    assert_eq!((code, statuses(&v)), (Some(0), want.to_vec()), "{err}");
    assert_eq!(v["totals"]["bytes"], 6500, "only new.bin counts: {v}");

    // Direct mode writes under `direct/`: the same rows once that is cut.
    for (extra, want) in [
        (&["--overwrite=if-newer", "--dry-run"][..], &want_dry),
        (&["--overwrite=if-newer"][..], &want),
    ] {
        let out = run_client(&direct(extra), &[], T).await;
        let rows: Vec<_> = statuses(&summary(&out))
            .into_iter()
            .map(|(b, st, r)| (b.replace("direct/", ""), st, r))
            .collect();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!((out.status.code(), rows), (Some(0), want.to_vec()), "{err}");
    }

    for prefix in ["", "direct/"] {
        let blob = |n: &str| format!("{prefix}data/{n}");
        assert_eq!(
            blob_sha(&container, &blob("old.bin")).await,
            (5000, sha_old.clone())
        );
        assert_eq!(
            blob_sha(&container, &blob("new.bin")).await,
            (6500, sha_new2.clone())
        );
        assert_eq!(
            blob_sha(&container, &blob("same.bin")).await,
            (7000, sha_same.clone())
        );
    }
    relay.stop().await;
}
