//! End-to-end `relay-client download`: the real client binary, a real relay on
//! loopback QUIC, a real Azurite, real files. Every downloaded file is hashed
//! and compared with what was uploaded; hostile names are put straight into
//! Azurite (bypassing the relay's upload rules) and must be refused per file
//! with nothing written outside the destination.

use std::path::PathBuf;
use std::time::Duration;

use relay_client::download::place::{partial_name, sidecar_name};
use relay_tests::blobs::new_container;
use relay_tests::download_client::*;
use relay_tests::download_local::kill_when_grown;
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::relay::LIMITED_TOKEN;
use relay_tests::{client_command, run_client, spawn_client, stderr, summary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_comes_back_byte_exact_and_a_rerun_skips_it() {
    let (relay, c) = setup("dl-round", None).await;
    let src = Scratch::new("dl-src");
    let want = make_data(&src.path("run1"));
    upload(&relay, &src.path("run1"), &format!("{c}/2026")).await;

    let out_dir = Scratch::new("dl-out");
    let restore = out_dir.path("restore");
    let (out, v) = download(&relay, &[&format!("{c}/2026/run1")], &restore, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // restore/run1/... : the source's last segment keeps its name.
    let got = tree(&restore.join("run1"));
    assert_eq!(got, want);
    assert_eq!(tree(&restore).len(), want.len(), "nothing else in DIR");
    let files = files_of(&v);
    assert_eq!(files.len(), want.len());
    for f in &files {
        assert_eq!(f["status"], "downloaded", "{f}");
        assert_eq!(f["check"], "sealed", "{f}");
        let path = PathBuf::from(f["path"].as_str().unwrap_or_default());
        assert_eq!(f["sha256"].as_str(), Some(sha256_file(&path).as_str()));
    }
    assert_eq!(v["totals"]["downloaded"], want.len());

    // A rerun: every file is identical, none fetched again (the relay sends
    // no byte of any of them).
    let sent_before = relay.metric("blob_relay_bytes_sent_total");
    assert!(sent_before.is_some_and(|n| n > 0), "{sent_before:?}");
    let (out, v) = download(&relay, &[&format!("{c}/2026/run1")], &restore, &[]).await;
    assert_eq!(relay.metric("blob_relay_bytes_sent_total"), sent_before);
    assert!(out.status.success(), "{}", stderr(&out));
    for f in files_of(&v) {
        assert_eq!(f["status"], "skipped", "{f}");
        assert_eq!(f["reason"], "identical", "{f}");
        assert_eq!(f["bytes_sent"], 0, "{f}");
    }

    // A local file that differs (same size) is not overwritten without --overwrite.
    let victim = restore.join("run1/d0/s0/f0.bin");
    let mine = write_random(&victim, 1000, 12345);
    let (out, v) = download(&relay, &[&format!("{c}/2026/run1")], &restore, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failed: Vec<_> = files_of(&v)
        .into_iter()
        .filter(|f| f["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["error"]["code"], "exists");
    assert!(stderr(&out).contains("--overwrite"), "{}", stderr(&out));
    assert_eq!(sha256_file(&victim), mine, "the local file was kept");
    // --overwrite=if-different replaces it with the blob's bytes.
    let (out, _) = download(
        &relay,
        &[&format!("{c}/2026/run1")],
        &restore,
        &["--overwrite=if-different"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tree(&restore.join("run1")), want);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_blob_a_prefix_and_filters() {
    let (relay, c) = setup("dl-prefix", None).await;
    let src = Scratch::new("dl-psrc");
    for (rel, seed) in [
        ("run1/a.txt", 1),
        ("run1/b.log", 2),
        ("run10/c.txt", 3),
        ("big.bin", 4),
    ] {
        write_random(&src.path(&format!("data/{rel}")), 3000 + seed, seed);
    }
    upload(&relay, &src.path("data"), &format!("{c}/2026")).await;
    let out_dir = Scratch::new("dl-pout");
    // One blob: DIR/big.bin.
    let (out, _) = download(
        &relay,
        &[&format!("{c}/2026/data/big.bin")],
        &out_dir.0,
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sha256_file(&out_dir.path("big.bin")),
        sha256_file(&src.path("data/big.bin"))
    );
    // A prefix takes whole segments: run1 is not run10; --exclude below the source.
    let (out, v) = download(
        &relay,
        &[&format!("{c}/2026/data/run1")],
        &out_dir.0,
        &["--exclude", "*.log"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(files_of(&v).len(), 1, "{v}");
    assert!(out_dir.path("run1/a.txt").exists());
    assert!(!out_dir.path("run1/b.log").exists());
    assert!(!out_dir.path("run10").exists());
    // Two sources naming one local file: the first keeps it, the second is
    // refused (never two writers on one partial file).
    let dup = Scratch::new("dl-dup");
    let big = format!("{c}/2026/data/big.bin");
    let (out, v) = download(&relay, &[&big, &big], &dup.0, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let codes: Vec<_> = files_of(&v)
        .iter()
        .map(|f| (f["status"].clone(), f["error"]["code"].clone()))
        .collect();
    assert!(
        codes.contains(&("failed".into(), "duplicate".into())),
        "{v}"
    );
    assert!(
        codes.contains(&("downloaded".into(), serde_json::Value::Null)),
        "{v}"
    );
    assert_eq!(
        sha256_file(&dup.path("big.bin")),
        sha256_file(&src.path("data/big.bin"))
    );
    // --dry-run writes nothing.
    let dry = Scratch::new("dl-dry");
    let target = dry.path("never");
    let (out, v) = download(
        &relay,
        &[&format!("{c}/2026/data")],
        &target,
        &["--dry-run"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(files_of(&v).iter().all(|f| f["status"] == "planned"), "{v}");
    assert!(!target.exists());
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_download_resumes_without_fetching_again_what_is_on_disk() {
    // The relay holds the fetch after its first range: the client is killed
    // mid-file, whatever the machine's speed.
    let (relay, c, gate) = setup_gated("dl-resume").await;
    let src = Scratch::new("dl-rsrc");
    let size: u64 = 24 << 20;
    let sha = write_random(&src.path("huge.bin"), size, 7);
    upload(&relay, &src.path("huge.bin"), &c).await;
    let out_dir = Scratch::new("dl-rout");
    let partial = out_dir.path(&partial_name(&c, "huge.bin"));
    let args = download_args(&relay, &[&format!("{c}/huge.bin")], &out_dir.0, &[]);
    let mut child = spawn_client(&args, &[]);
    // Wait until the partial file exists and has grown past 2 MiB, then kill -9.
    gate.wait_holding(T).await;
    let held = kill_when_grown(&partial, 2 << 20, &mut child).await;
    gate.release();
    assert!(
        !out_dir.path("huge.bin").exists(),
        "no half file under the final name"
    );
    let kept = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
    assert!(kept >= held && kept < size, "{kept}");

    let (out, v) = download(&relay, &[&format!("{c}/huge.bin")], &out_dir.0, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let f = &files_of(&v)[0];
    assert_eq!(f["status"], "downloaded", "{f}");
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    let received = f["bytes_sent"].as_u64().unwrap_or(u64::MAX);
    assert_eq!(resumed, kept, "{f}");
    assert_eq!(
        resumed + received,
        size,
        "nothing on disk fetched again: {f}"
    );
    assert_eq!(sha256_file(&out_dir.path("huge.bin")), sha);
    assert!(!partial.exists());
    assert!(!out_dir.path(&sidecar_name(&c, "huge.bin")).exists());
    relay.stop().await;
}

/// A sealed blob whose bytes storage no longer holds as sealed (one bit
/// flipped, same length, the seal still valid): the relay reads its ranges
/// without per-range checks, so the client's SHA-256 against the seal is what
/// stands between those bytes and the destination. Nothing is placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_blob_with_changed_bytes_is_never_placed() {
    let (relay, c) = setup("dl-rot", None).await;
    let src = Scratch::new("dl-rotsrc");
    let size: u64 = (6 << 20) + 5;
    let sha = write_random(&src.path("rot.bin"), size, 9);
    let mut bytes = std::fs::read(src.path("rot.bin")).unwrap_or_else(|e| panic!("{e}"));
    bytes[(5 << 20) + 1] ^= 0x01;
    let seal = relay.id_key().seal(&c, "rot.bin", size, &sha);
    relay_tests::blobs::put_sealed(&c, "rot.bin", &bytes, &sha, &seal).await;
    let out_dir = Scratch::new("dl-rotout");
    let (out, v) = download(
        &relay,
        &[&format!("{c}/rot.bin")],
        &out_dir.0,
        &["--attempts", "3"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = &files_of(&v)[0];
    assert_eq!(f["status"], "failed", "{f}");
    assert_eq!(f["error"]["code"], "verify", "{f}");
    // A mismatch is tried again like any retryable failure (storage may have
    // handed over a flipped bit once), each time from 0, then fails clearly.
    assert_eq!(f["attempts"], 3, "{f}");
    assert!(
        !out_dir.path("rot.bin").exists(),
        "nothing under the final name"
    );
    assert_eq!(
        tree(&out_dir.0),
        vec![],
        "the failed partial file is removed"
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_blob_names_are_refused_per_file_and_nothing_leaves_dir() {
    hostile_names(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_blob_names_are_refused_per_file_direct() {
    hostile_names(true).await;
}

async fn hostile_names(direct: bool) {
    let (relay, c) = setup("dl-hostile", None).await;
    let way = if direct {
        direct_flags()
    } else {
        relay_flags(&relay)
    };
    let hostile = [
        "h/a/../../x",
        "h/../escape",
        "h/./dot",
        "h/back\\slash",
        // (An ESC byte would be refused the same way; Azurite's listing
        // cannot carry one in its XML.)
        "h/tab\tname",
        "h/new\nline",
        "h/empty//seg",
        // Shown reversed (`invoiceexe.pdf`): refused through the relay and
        // with --direct alike, by the one rule of relay_proto::blob_name.
        "h/invoice\u{202E}fdp.exe",
        // The client's own temporary names, in any segment and any case.
        "h/d/.x.relay-partial/z",
        "h/UP.RELAY-PARTIAL",
    ];
    for name in hostile {
        put_raw(&c, name, b"evil").await;
    }
    put_raw(&c, "h/x", b"file x").await;
    put_raw(&c, "h/x/y", b"file x/y").await;
    put_raw(&c, "h/ok.txt", b"fine").await;
    let base = Scratch::new("dl-hout");
    let dest = base.path("dest");
    let out = run_client(&args_via(&way, &[&format!("{c}/h")], &dest, &[]), &[], T).await;
    let v = summary(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let files = files_of(&v);
    let status = |blob: &str| {
        files
            .iter()
            .find(|f| f["blob"] == blob)
            .map(|f| (f["status"].clone(), f["error"]["code"].clone()))
    };
    // Azurite resolves `.`/`..` segments and turns `\` into `/` itself, so
    // those names reach the listing as plain ones (or not at all); the
    // client's refusal of each is in place.rs's unit tests. Those that reach
    // it as they are must be refused.
    for blob in [
        "h/tab\\tname",
        "h/new\\nline",
        "h/empty//seg",
        "h/invoice\\u{202e}fdp.exe",
        "h/d/.x.relay-partial/z",
        "h/UP.RELAY-PARTIAL",
    ] {
        assert_eq!(
            status(blob),
            Some(("failed".into(), "invalid_name".into())),
            "{blob}: {v}"
        );
    }
    for f in &files {
        let msg = f["error"]["message"].as_str().unwrap_or_default();
        assert!(!msg.contains('\t') && !msg.contains('\n'), "{msg:?}");
        if f["status"] == "downloaded" {
            let p = PathBuf::from(f["path"].as_str().unwrap_or_default());
            assert!(p.starts_with(&dest), "{f}");
        }
    }
    // One of x and x/y is placed, the other refused as in the way.
    let xs = [status("h/x"), status("h/x/y")];
    let placed = xs
        .iter()
        .filter(|s| s.as_ref().is_some_and(|(st, _)| st == "downloaded"))
        .count();
    assert_eq!(placed, 1, "{v}");
    assert!(
        xs.contains(&Some(("failed".into(), "in_the_way".into()))),
        "{v}"
    );
    assert_eq!(
        std::fs::read(dest.join("h/ok.txt")).unwrap_or_default(),
        b"fine"
    );
    let x = dest.join("h/x");
    assert!(
        std::fs::read(&x).ok() == Some(b"file x".to_vec())
            || std::fs::read(x.join("y")).ok() == Some(b"file x/y".to_vec())
    );
    // Nothing outside DIR: the scratch folder holds only dest.
    let outside: Vec<_> = std::fs::read_dir(&base.0)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("dest")]);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_inside_dir_pointing_out_is_not_followed() {
    symlink_inside(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_inside_dir_pointing_out_is_not_followed_direct() {
    symlink_inside(true).await;
}

async fn symlink_inside(direct: bool) {
    let (relay, c) = setup("dl-link", None).await;
    let src = Scratch::new("dl-lsrc");
    write_random(&src.path("data/sub/a.bin"), 5000, 1);
    write_random(&src.path("data/top.bin"), 5000, 2);
    upload(&relay, &src.path("data"), &c).await;
    let base = Scratch::new("dl-lout");
    let outside = base.path("outside");
    std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
    let dest = base.path("dest");
    std::fs::create_dir_all(dest.join("data")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&outside, dest.join("data/sub")).unwrap_or_else(|e| panic!("{e}"));
    // And a link at a file's own name.
    std::os::unix::fs::symlink(outside.join("t"), dest.join("data/top.bin"))
        .unwrap_or_else(|e| panic!("{e}"));
    let way = if direct {
        direct_flags()
    } else {
        relay_flags(&relay)
    };
    let out = run_client(&args_via(&way, &[&format!("{c}/data")], &dest, &[]), &[], T).await;
    let v = summary(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(files_of(&v).len(), 2, "{v}");
    for f in files_of(&v) {
        assert_eq!(f["status"], "failed", "{f}");
        assert_eq!(f["error"]["code"], "symlink", "{f}");
    }
    assert_eq!(
        std::fs::read_dir(&outside).map(|d| d.count()).unwrap_or(0),
        0
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_and_an_unwritable_destination_fail_each_file_clearly() {
    full_disk(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_and_an_unwritable_destination_fail_each_file_clearly_direct() {
    full_disk(true).await;
}

async fn full_disk(direct: bool) {
    let (relay, c) = setup("dl-full", None).await;
    let src = Scratch::new("dl-fsrc");
    write_random(&src.path("data/small.bin"), 1000, 1);
    write_random(&src.path("data/large.bin"), 2 << 20, 2);
    upload(&relay, &src.path("data"), &c).await;
    let base = Scratch::new("dl-fout");
    let dest = base.path("dest");
    std::fs::create_dir_all(&dest).unwrap_or_else(|e| panic!("{e}"));
    let way = if direct {
        direct_flags()
    } else {
        relay_flags(&relay)
    };
    let args = args_via(&way, &[&format!("{c}/data")], &dest, &["--parallel", "1"]);
    let Some(out) = in_tmpfs(&args, &dest, "size=512k").await else {
        eprintln!("skipped: needs root and unshare -m to mount a small tmpfs");
        relay.stop().await;
        return;
    };
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = summary(&out);
    let large = files_of(&v)
        .into_iter()
        .find(|f| f["blob"] == "data/large.bin")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(large["status"], "failed", "{large}");
    assert_eq!(large["error"]["code"], "disk_full", "{large}");
    assert!(stderr(&out).contains("no space left"), "{}", stderr(&out));

    let out = in_tmpfs(&args, &dest, "ro")
        .await
        .unwrap_or_else(|| panic!("tmpfs"));
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not writable") || stderr(&out).contains("Read-only"),
        "{}",
        stderr(&out)
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_download_reads_storage_itself_and_resumes_nothing_twice() {
    let (relay, c) = setup("dl-direct", None).await;
    let src = Scratch::new("dl-dsrc");
    let want = make_data(&src.path("run1"));
    upload(&relay, &src.path("run1"), &c).await;
    relay.stop().await;
    let out_dir = Scratch::new("dl-dout");
    let mut a = s(&["download", &format!("{c}/run1"), "--to"]);
    a.push(out_dir.0.display().to_string());
    a.push("--json".into());
    a.extend(direct_flags());
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tree(&out_dir.path("run1")), want);
    let v = summary(&out);
    assert_eq!(v["mode"], "direct");
    for f in files_of(&v) {
        assert_eq!(f["status"], "downloaded", "{f}");
        // Not sealed by this user's direct key: Content-MD5 (one Put Blob) or ranges.
        assert!(
            ["content_md5", "ranges"].contains(&f["check"].as_str().unwrap_or("")),
            "{f}"
        );
    }
    // A rerun: files with a Content-MD5 are compared by it; those without,
    // by what this machine's index recorded when it placed them. Exit 0.
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let v = summary(&out);
    for f in files_of(&v) {
        assert_eq!(
            (f["status"].as_str(), f["reason"].as_str()),
            (Some("skipped"), Some("identical")),
            "{f}"
        );
        assert!(
            ["md5", "index"].contains(&f["compared"].as_str().unwrap_or("")),
            "{f}"
        );
    }
    assert_eq!(tree(&out_dir.path("run1")), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_with_130_and_the_command_that_resumes() {
    let (relay, c, gate) = setup_gated("dl-int").await;
    let src = Scratch::new("dl-isrc");
    let size: u64 = 16 << 20;
    let sha = write_random(&src.path("f.bin"), size, 3);
    upload(&relay, &src.path("f.bin"), &c).await;
    let out_dir = Scratch::new("dl-iout");
    let partial = out_dir.path(&partial_name(&c, "f.bin"));
    let mut a = download_args(&relay, &[&format!("{c}/f.bin")], &out_dir.0, &[]);
    a.retain(|x| x != "--json");
    let child = client_command(&a, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    // The relay holds the fetch after its first range: Ctrl-C comes mid-file.
    gate.wait_holding(T).await;
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0) < 1 << 20 {
        assert!(t0.elapsed() < T, "the partial file never grew");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().unwrap_or_else(|| panic!("no pid")) as libc::pid_t;
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("no exit after Ctrl-C"))
        .unwrap_or_else(|e| panic!("{e}"));
    gate.release();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("to resume, run the same command"), "{err}");
    assert!(
        err.contains("--token \"$RELAY_TOKEN\""),
        "the token is not printed: {err}"
    );
    assert!(!err.contains(LIMITED_TOKEN), "{err}");
    assert!(!out_dir.path("f.bin").exists());
    // The rerun (with the token in the environment, as the message says) finishes it.
    let rerun: Vec<String> = a
        .iter()
        .map(|x| {
            if x == LIMITED_TOKEN {
                "ignored".to_string()
            } else {
                x.clone()
            }
        })
        .filter(|x| x != "--token" && x != "ignored")
        .collect();
    let out = run_client(&rerun, &[("RELAY_TOKEN", LIMITED_TOKEN)], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("resumed at"));
    assert_eq!(sha256_file(&out_dir.path("f.bin")), sha);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_download_of_a_direct_upload_is_checked_by_its_seal() {
    let c = new_container("dl-dseal").await;
    let src = Scratch::new("dl-dssrc");
    let sha = write_random(&src.path("sealed.bin"), (6 << 20) + 5, 11);
    let mut up = s(&[
        "upload",
        src.path("sealed.bin").to_str().unwrap_or_default(),
        "--to",
        &c,
    ]);
    up.extend(direct_flags());
    let out = run_client(&up, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out_dir = Scratch::new("dl-dsout");
    let a = args_via(
        &direct_flags(),
        &[&format!("{c}/sealed.bin")],
        &out_dir.0,
        &[],
    );
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let f = &files_of(&summary(&out))[0];
    assert_eq!(f["check"], "sealed", "{f}");
    assert_eq!(f["sha256"].as_str(), Some(sha.as_str()));
    assert_eq!(sha256_file(&out_dir.path("sealed.bin")), sha);
    // A rerun compares by the seal: identical.
    let out = run_client(&a, &[], T).await;
    let f = &files_of(&summary(&out))[0];
    assert_eq!(
        (f["status"].as_str(), f["reason"].as_str()),
        (Some("skipped"), Some("identical")),
        "{f}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_restarted_mid_download_is_waited_for_and_the_file_resumes() {
    let c = new_container("dl-restart").await;
    let mut revivable =
        relay_tests::relay::Revivable::new(relay_tests::azurite::shared_azurite().storage());
    revivable.send_rate_mbit = Some(40.0);
    let grant = |h: &relay_tests::relay::RelayHandle| {
        h.rewrite_tokens(&format!(
            "{}\n{LIMITED_TOKEN} {c}:rw\n",
            relay_tests::relay::TOKEN
        ));
        h.shared.sign_in.tokens.reload();
    };
    let relay = revivable.start().await;
    grant(&relay);
    let src = Scratch::new("dl-rssrc");
    let size: u64 = 24 << 20;
    let sha = write_random(&src.path("r.bin"), size, 5);
    upload(&relay, &src.path("r.bin"), &c).await;
    let out_dir = Scratch::new("dl-rsout");
    let partial = out_dir.path(&partial_name(&c, "r.bin"));
    let a = download_args(
        &relay,
        &[&format!("{c}/r.bin")],
        &out_dir.0,
        &["--patience", "2m"],
    );
    let child = client_command(&a, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0) < 2 << 20 {
        assert!(t0.elapsed() < T, "the partial file never grew");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The relay goes away mid-file and comes back as itself.
    relay.abandon();
    let relay = revivable.start().await;
    grant(&relay);
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the client never finished"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", stderr(&out));
    let f = &files_of(&summary(&out))[0];
    assert_eq!(f["status"], "downloaded", "{f}");
    assert_eq!(sha256_file(&out_dir.path("r.bin")), sha);
    // The second stream started from what was on disk, not from 0: the
    // file's bytes received over both streams are the file's size once
    // (the first stream's bytes are counted as they arrived).
    let resumed = f["bytes_resumed"].as_u64().unwrap_or(0);
    assert!(resumed > 0, "{f}");
    assert_eq!(f["bytes_sent"].as_u64(), Some(size), "{f}");
    relay.stop().await;
}
