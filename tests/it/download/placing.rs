//! Placing a downloaded file: never over a file that appeared meanwhile (nor,
//! with `--overwrite`, over another version than the one compared); reruns
//! that end 0 and say how each file was compared; the files' modes; and
//! partial files that `upload` leaves out. The real client, a real relay on
//! loopback QUIC, Azurite, real files.

use std::os::unix::fs::PermissionsExt;

use relay_tests::download_client::*;
use relay_tests::download_local::*;
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::gate::Gate;
use relay_tests::{client_command, run_client, stderr, summary};

fn mode_of(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Starts a download of `c/f.bin` into `dest`, and while the relay holds it
/// at `gate` (its partial file holding a MiB), lets `meanwhile` act on the
/// folder; the run's output.
async fn with_a_change_meanwhile(
    relay: &relay_tests::relay::RelayHandle,
    gate: &Gate,
    c: &str,
    dest: &std::path::Path,
    extra: &[&str],
    meanwhile: impl FnOnce(),
) -> std::process::Output {
    gate.rearm();
    let a = download_args(relay, &[&format!("{c}/f.bin")], dest, extra);
    let mut child = client_command(&a, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    gate.wait_holding(T).await;
    partial_grown(dest, 1 << 20, &mut child).await;
    meanwhile();
    gate.release();
    tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the download never ended"))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_appears_at_the_name_while_downloading_is_not_replaced() {
    // The relay holds the fetch after its first range: the file appears
    // mid-download.
    let (relay, c, gate) = setup_gated("dl-appear").await;
    let src = Scratch::new("dl-asrc");
    write_random(&src.path("f.bin"), 16 << 20, 51);
    upload(&relay, &src.path("f.bin"), &c).await;

    // Nothing there when the download was decided: a file that appears is
    // never replaced without --overwrite.
    let dest = Scratch::new("dl-aout");
    let mine = dest.path("f.bin");
    let out = with_a_change_meanwhile(&relay, &gate, &c, &dest.0, &[], || {
        std::fs::write(&mine, b"mine").unwrap_or_else(|e| panic!("{e}"));
    })
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = &files_of(&summary(&out))[0];
    assert_eq!(
        (f["status"].as_str(), f["error"]["code"].as_str()),
        (Some("failed"), Some("exists")),
        "{f}"
    );
    assert_eq!(std::fs::read(&mine).unwrap_or_default(), b"mine");
    // The refused download's partial file is removed.
    assert_eq!(tree(&dest.0).len(), 1, "{:?}", tree(&dest.0));

    // --overwrite replaces only the version it compared: a new version put
    // there meanwhile (another inode, as editors save) is kept.
    let dest = Scratch::new("dl-aout2");
    let local = dest.path("f.bin");
    std::fs::write(&local, b"old version").unwrap_or_else(|e| panic!("{e}"));
    let out = with_a_change_meanwhile(
        &relay,
        &gate,
        &c,
        &dest.0,
        &["--overwrite=if-different"],
        || {
            let tmp = dest.path("f.bin.tmp");
            std::fs::write(&tmp, b"saved meanwhile").unwrap_or_else(|e| panic!("{e}"));
            std::fs::rename(&tmp, &local).unwrap_or_else(|e| panic!("{e}"));
        },
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = &files_of(&summary(&out))[0];
    assert_eq!(f["error"]["code"], "exists", "{f}");
    assert_eq!(
        std::fs::read(&local).unwrap_or_default(),
        b"saved meanwhile"
    );
    assert_eq!(tree(&dest.0).len(), 1, "{:?}", tree(&dest.0));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_of_a_finished_download_ends_0_and_says_how_each_file_was_compared() {
    let (relay, c) = setup("dl-rerun", None).await;
    let src = Scratch::new("dl-rrsrc");
    let sealed = write_random(&src.path("r/sealed.bin"), (5 << 20) + 1, 61);
    upload(&relay, &src.path("r"), &c).await;
    let md5_data = pattern(3000, 62);
    put_raw(&c, "r/md5.bin", &md5_data).await;
    let ranges = put_ranges(&c, "r/ranges.bin", &pattern((2 << 20) + 5, 63)).await;
    for (way, flags) in [("relay", relay_flags(&relay)), ("direct", direct_flags())] {
        let dest = Scratch::new("dl-rrout");
        let a = args_via(&flags, &[&format!("{c}/r")], &dest.0, &[]);
        let out = run_client(&a, &[], T).await;
        assert!(out.status.success(), "{way}: {}", stderr(&out));
        let want = vec![
            ("r/md5.bin".to_string(), sha_hex(&md5_data)),
            ("r/ranges.bin".to_string(), ranges.clone()),
            ("r/sealed.bin".to_string(), sealed.clone()),
        ];
        assert_eq!(tree(&dest.0), want, "{way}");

        // The rerun: nothing fetched, exit 0, each file says how it was compared.
        let out = run_client(&a, &[], T).await;
        assert!(out.status.success(), "{way}: {}", stderr(&out));
        let compared: Vec<(String, String)> = files_of(&summary(&out))
            .iter()
            .map(|f| {
                assert_eq!(
                    (
                        f["status"].as_str(),
                        f["reason"].as_str(),
                        f["bytes_sent"].as_u64()
                    ),
                    (Some("skipped"), Some("identical"), Some(0)),
                    "{way}: {f}"
                );
                (
                    f["blob"].as_str().unwrap_or_default().to_string(),
                    f["compared"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        // Direct mode knows no relay's seal: that file has storage's Content-MD5.
        let sealed_by = if way == "relay" { "sha256" } else { "md5" };
        let mut want_compared = vec![
            ("r/md5.bin".to_string(), "md5".to_string()),
            ("r/ranges.bin".to_string(), "index".to_string()),
            ("r/sealed.bin".to_string(), sealed_by.to_string()),
        ];
        want_compared.sort();
        let mut compared = compared;
        compared.sort();
        assert_eq!(compared, want_compared, "{way}");
        // And in words, as a person reads it.
        let mut text = a.clone();
        text.retain(|x| x != "--json");
        let out = run_client(&text, &[], T).await;
        assert!(out.status.success(), "{way}: {}", stderr(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("compared by index"), "{way}: {said}");

        // A file changed since this machine placed it can no longer be
        // compared: refused, kept.
        let edited = dest.path("r/ranges.bin");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&edited)
            .unwrap_or_else(|e| panic!("{e}"));
        f.set_modified(std::time::SystemTime::now())
            .unwrap_or_else(|e| panic!("{e}"));
        drop(f);
        let out = run_client(&a, &[], T).await;
        assert_eq!(out.status.code(), Some(1), "{way}: {}", stderr(&out));
        let v = summary(&out);
        let f = files_of(&v)
            .into_iter()
            .find(|f| f["blob"] == "r/ranges.bin")
            .unwrap_or_else(|| panic!("{v}"));
        assert_eq!(f["error"]["code"], "exists", "{way}: {f}");
        assert!(
            f["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot be compared")),
            "{way}: {f}"
        );
        assert_eq!(sha256_file(&edited), ranges, "{way}: kept");
    }
    relay.stop().await;
}

/// A rerun over a folder that cannot be written (a read-only mount of a
/// restore, checked against storage): identical files are skipped as
/// before, and only a file that would have to be fetched fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_into_a_read_only_folder_still_compares() {
    let (relay, c) = setup("dl-ro", None).await;
    let src = Scratch::new("dl-rosrc");
    write_random(&src.path("o/a.bin"), 3000, 91);
    write_random(&src.path("o/b.bin"), 4000, 92);
    upload(&relay, &src.path("o"), &c).await;
    let dest = Scratch::new("dl-roout");
    let (out, _) = download(&relay, &[&format!("{c}/o")], &dest.0, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let before = tree(&dest.0);
    let a = download_args(&relay, &[&format!("{c}/o")], &dest.0, &[]);
    let Some(out) = in_read_only(&a, &dest.0).await else {
        eprintln!("SKIPPED: needs root and unshare -m for a read-only bind mount");
        relay.stop().await;
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    for f in files_of(&summary(&out)) {
        assert_eq!(f["status"], "skipped", "{f}");
    }
    // One file gone: that one fails (the folder is read-only), the other is
    // still skipped.
    std::fs::remove_file(dest.path("o/b.bin")).unwrap_or_else(|e| panic!("{e}"));
    let out = in_read_only(&a, &dest.0)
        .await
        .unwrap_or_else(|| panic!("mount"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = summary(&out);
    let status = |blob: &str| {
        files_of(&v)
            .into_iter()
            .find(|f| f["blob"] == blob)
            .map(|f| (f["status"].clone(), f["error"]["code"].clone()))
    };
    assert_eq!(
        status("o/a.bin"),
        Some(("skipped".into(), serde_json::Value::Null))
    );
    assert_eq!(
        status("o/b.bin"),
        Some(("failed".into(), "permission".into()))
    );
    assert_eq!(tree(&dest.0).len(), before.len() - 1);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_folders_take_the_umask_asked_for() {
    let (relay, c) = setup("dl-mode", None).await;
    let src = Scratch::new("dl-msrc");
    write_random(&src.path("m/sub/a.bin"), 5000, 71);
    upload(&relay, &src.path("m"), &c).await;
    for (umask, file, folder) in [("077", 0o600, 0o700), ("002", 0o664, 0o775)] {
        let dest = Scratch::new("dl-mout");
        let (out, _) = download(&relay, &[&format!("{c}/m")], &dest.0, &["--umask", umask]).await;
        assert!(out.status.success(), "{umask}: {}", stderr(&out));
        assert_eq!(mode_of(&dest.path("m/sub/a.bin")), file, "{umask}");
        assert_eq!(mode_of(&dest.path("m/sub")), folder, "{umask}");
        assert_eq!(mode_of(&dest.path("m")), folder, "{umask}");
    }
    // A file replaced keeps its own mode (made private, it stays private).
    let dest = Scratch::new("dl-mkeep");
    let mine = dest.path("m/sub/a.bin");
    write_random(&mine, 10, 93);
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("{e}"));
    let (out, _) = download(
        &relay,
        &[&format!("{c}/m")],
        &dest.0,
        &["--overwrite", "--umask", "002"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sha256_file(&mine), sha256_file(&src.path("m/sub/a.bin")));
    assert_eq!(mode_of(&mine), 0o600);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_leaves_out_the_partial_files_of_downloads() {
    let (relay, c) = setup("dl-upskip", None).await;
    let src = Scratch::new("dl-usrc");
    write_random(&src.path("u/a.txt"), 100, 81);
    for junk in [
        ".relay-0123456789abcdef0123456789abcdef.relay-partial",
        ".relay-0123456789abcdef0123456789abcdef.meta.relay-partial",
        "sub/.b.txt.relay-partial",
        "sub/.b.txt.relay-partial.json",
    ] {
        write_random(&src.path(&format!("u/{junk}")), 10, 82);
    }
    let mut a = s(&[
        "upload",
        src.path("u").to_str().unwrap_or_default(),
        "--to",
        &c,
        "--json",
    ]);
    a.extend(relay_flags(&relay));
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let blobs: Vec<String> = files_of(&summary(&out))
        .iter()
        .map(|f| f["blob"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(blobs, vec!["u/a.txt".to_string()]);
    relay.stop().await;
}
