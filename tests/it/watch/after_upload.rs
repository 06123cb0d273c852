//! `--after-upload move DIR` and `delete` act only on a file whose blob was
//! committed with its SHA-256 verified, and only on the content that blob
//! holds: never on a file whose commit was refused (a wrong listed hash, a
//! blob of that name already there), nor on a file that changed while it was
//! sent (it is sent again, and moved or deleted once its final content is the
//! blob). Every blob is downloaded and hashed.

use std::net::SocketAddr;
use std::path::Path;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::watch::{BOUND, Watch};

/// The two ways a source leaves the folder; `None` for delete.
const MODES: [Option<&str>; 2] = [Some("move"), None];

fn after_args(mode: Option<&str>, done: &Path) -> Vec<String> {
    match mode {
        Some(m) => vec![
            "--after-upload".into(),
            m.into(),
            done.display().to_string(),
        ],
        None => vec!["--after-upload".into(), "delete".into()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_whose_blob_did_not_verify_are_neither_moved_nor_deleted() {
    for mode in MODES {
        let (relay, container) =
            RelayHandle::with_container("watchafter", RelayOptions::default()).await;
        let scratch = Scratch::new("watchafter");
        let inbox = scratch.path("inbox");
        let done = scratch.path("done");
        let good = inbox.join("good.bin");
        let bad = inbox.join("bad.bin");
        let taken = inbox.join("taken.bin");
        let good_sha = write_random(&good, 20_000, 1);
        let bad_sha = write_random(&bad, 20_000, 2);
        let taken_sha = write_random(&taken, 30_000, 3);
        // taken.bin's blob name already holds other bytes: without
        // --overwrite the relay refuses its commit.
        let other = scratch.path("earlier/taken.bin");
        let other_sha = write_random(&other, 1000, 4);
        let out = relay_tests::run_client(
            &[
                vec!["upload".into(), other.display().to_string()],
                relay.client_args(&format!("{container}/m/inbox")),
                vec!["--json".into()],
            ]
            .concat(),
            &[],
            BOUND,
        )
        .await;
        assert!(out.status.success(), "{}", relay_tests::stderr(&out));
        assert_eq!(blob_sha(&container, "m/inbox/taken.bin").await.1, other_sha);
        // bad.bin's listed hash is not its content: the relay refuses it.
        let sums = scratch.path("SHA256SUMS");
        std::fs::write(
            &sums,
            format!(
                "{good_sha}  inbox/good.bin\n{}  inbox/bad.bin\n{taken_sha}  inbox/taken.bin\n",
                "0".repeat(64)
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut extra = vec![
            "--no-journal".to_string(),
            "--checksums".into(),
            sums.display().to_string(),
        ];
        extra.extend(after_args(mode, &done));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let w = Watch::start(&relay, &format!("{container}/m"), &[&inbox], &extra);
        for (blob, status) in [
            ("m/inbox/bad.bin", "failed"),
            ("m/inbox/taken.bin", "failed"),
            ("m/inbox/good.bin", "committed"),
        ] {
            w.wait_event(&format!("{blob} {status}"), |v| {
                v["event"] == "file" && v["file"]["status"] == status && v["file"]["blob"] == blob
            })
            .await;
        }
        let s = w.stop().await;
        assert_eq!(s["totals"]["committed"], 1, "{mode:?}: {s}");
        assert_eq!(s["totals"]["failed"], 2, "{mode:?}: {s}");
        assert!(!good.exists(), "{mode:?}: good.bin was verified: it goes");
        if mode.is_some() {
            assert_eq!(sha256_file(&done.join("inbox/good.bin")), good_sha);
        }
        // The refused files stay where they are, as they were.
        assert_eq!(sha256_file(&bad), bad_sha, "{mode:?}");
        assert_eq!(sha256_file(&taken), taken_sha, "{mode:?}");
        assert!(!done.join("inbox/bad.bin").exists());
        assert!(!done.join("inbox/taken.bin").exists());
        assert!(!blob_exists(&container, "m/inbox/bad.bin").await);
        assert_eq!(blob_sha(&container, "m/inbox/good.bin").await.1, good_sha);
        assert_eq!(
            blob_sha(&container, "m/inbox/taken.bin").await.1,
            other_sha,
            "the existing blob is untouched"
        );
        relay.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_during_its_upload_goes_only_once_its_final_content_is_the_blob() {
    for mode in MODES {
        let container = new_container("watchchanged").await;
        // Storage behind a proxy that holds the first Put Block: the upload
        // is known to be under way (its first bytes read and sent) while the
        // file is rewritten.
        let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
        let proxy = FaultProxy::start(azurite, Schedule::default()).await;
        proxy.hold(Op::PutBlock);
        let storage = shared_azurite().storage_at(&proxy.url(), Default::default());
        let relay = RelayHandle::start(storage, RelayOptions::default());
        let scratch = Scratch::new("watchchanged");
        let inbox = scratch.path("inbox");
        let done = scratch.path("done");
        let file = inbox.join("run.dat");
        std::fs::create_dir_all(&inbox).unwrap_or_else(|e| panic!("{e}"));
        let mut extra = vec![
            "--no-journal".to_string(),
            "--overwrite=if-different".into(),
        ];
        extra.extend(after_args(mode, &done));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let w = Watch::start(&relay, &format!("{container}/c"), &[&inbox], &extra);
        w.wait_event("the start", |v| v["event"] == "watch_status")
            .await;
        let size = 40 << 20;
        write_random(&file, size, 1);
        proxy.wait_held(1, BOUND).await;
        // Same size, other bytes, a new time: the version being sent is gone.
        let final_sha = write_random(&file, size, 2);
        proxy.release();
        w.wait_status("the first try not counted", |v| {
            v["changed"].as_u64().unwrap_or(0) >= 1
        })
        .await;
        w.wait_event("a commit", |v| {
            v["event"] == "file"
                && v["file"]["status"] == "committed"
                && v["file"]["sha256"] == final_sha.as_str()
        })
        .await;
        let s = w.stop().await;
        assert_eq!(s["totals"]["failed"], 0, "{mode:?}: {s}");
        assert_eq!(
            blob_sha(&container, "c/inbox/run.dat").await,
            (size, final_sha.clone()),
            "{mode:?}"
        );
        assert!(!file.exists(), "{mode:?}: its final content was verified");
        if mode.is_some() {
            assert_eq!(sha256_file(&done.join("inbox/run.dat")), final_sha);
        }
        relay.stop().await;
    }
}
