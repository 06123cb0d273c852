//! One writer per partial file: two downloads of one prefix at once, two
//! blobs whose partial files once shared a name, two names that differ only
//! by case on a case-insensitive file system (exFAT), and a partial file of a
//! blob nothing checks whole. The real client, a real relay on loopback QUIC,
//! Azurite, real files; every placed file is hashed and compared with its
//! blob's SHA-256, every round.

use std::collections::BTreeMap;

use relay_tests::download_client::*;
use relay_tests::download_local::*;
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::{run_client, spawn_client, stderr, summary};
use sha2::{Digest, Sha256};

/// Rounds of each race that is not made deterministic.
const ROUNDS: usize = 30;

fn sorted(want: &BTreeMap<String, String>) -> Vec<(String, String)> {
    want.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_one_download_at_once_both_end_well() {
    // 200 Mbit/s: each file takes a few hundred milliseconds, so the two runs
    // overlap on every file.
    let (relay, c) = setup("dl-twice", Some(200.0)).await;
    let src = Scratch::new("dl-tsrc");
    let mut want = BTreeMap::new();
    for i in 0..2u64 {
        let rel = format!("p/sealed-{i}.bin");
        want.insert(rel.clone(), write_random(&src.path(&rel), (6 << 20) + i, i));
    }
    upload(&relay, &src.path("p"), &c).await;
    let data = pattern(6 << 20, 9);
    want.insert(
        "p/ranges.bin".into(),
        put_ranges(&c, "p/ranges.bin", &data).await,
    );
    for round in 0..ROUNDS {
        let dest = Scratch::new("dl-tout");
        let a = download_args(&relay, &[&format!("{c}/p")], &dest.0, &[]);
        let (x, y) = tokio::join!(run_client(&a, &[], T), run_client(&a, &[], T));
        for out in [&x, &y] {
            assert!(out.status.success(), "round {round}: {}", stderr(out));
            for f in files_of(&summary(out)) {
                assert!(
                    ["downloaded", "skipped"].contains(&f["status"].as_str().unwrap_or("")),
                    "round {round}: {f}"
                );
            }
        }
        // Every file its blob's bytes, and nothing else left (no partial file).
        assert_eq!(tree(&dest.0), sorted(&want), "round {round}");
    }
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_whose_partial_files_once_shared_a_name_are_both_placed() {
    // An earlier client named the partial of a leaf of 236 bytes or more
    // `.relay-HASH.relay-partial`: exactly the partial of a blob named
    // `relay-HASH`. Both in one folder, in one run.
    let (relay, c) = setup("dl-clash", None).await;
    let src = Scratch::new("dl-csrc");
    let long = "L".repeat(240);
    let short = format!(
        "relay-{}",
        hex::encode(&Sha256::digest(long.as_bytes())[..12])
    );
    let mut want = BTreeMap::new();
    for (i, leaf) in [&long, &short].into_iter().enumerate() {
        let rel = format!("q/{leaf}");
        want.insert(
            rel.clone(),
            write_random(&src.path(&rel), 4 << 20, 20 + i as u64),
        );
    }
    upload(&relay, &src.path("q"), &c).await;
    for round in 0..ROUNDS {
        let dest = Scratch::new("dl-cout");
        let (out, v) = download(&relay, &[&format!("{c}/q")], &dest.0, &[]).await;
        assert!(out.status.success(), "round {round}: {}", stderr(&out));
        assert_eq!(files_of(&v).len(), 2, "round {round}: {v}");
        assert_eq!(tree(&dest.0), sorted(&want), "round {round}");
    }
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_differ_only_by_case_on_a_case_insensitive_file_system() {
    if let Some(why) = exfat_missing() {
        eprintln!("SKIPPED: no case-insensitive file system here: {why}");
        return;
    }
    let (relay, c) = setup("dl-fold", None).await;
    let src = Scratch::new("dl-fsrc");
    let mut sha = BTreeMap::new();
    for (i, leaf) in ["Data.csv", "data.csv", "other.bin"]
        .into_iter()
        .enumerate()
    {
        let rel = format!("cf/{leaf}");
        sha.insert(
            leaf.to_string(),
            write_random(&src.path(&rel), 1 << 20, 30 + i as u64),
        );
    }
    upload(&relay, &src.path("cf"), &c).await;
    let mut a = s(&["download", &format!("{c}/cf"), "--json"]);
    a.extend(relay_flags(&relay));
    let runs = match in_exfat(&a, ROUNDS).await {
        Ok(r) => r,
        Err(why) => panic!("exFAT through FUSE is installed but failed: {why}"),
    };
    for (round, run) in runs.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("round {round}: {e}: {}", run.stderr));
        let status = |leaf: &str| {
            files_of(&v)
                .into_iter()
                .find(|f| f["blob"] == format!("cf/{leaf}"))
                .map(|f| (f["status"].clone(), f["error"]["code"].clone()))
                .unwrap_or_else(|| panic!("round {round}: no {leaf}: {v}"))
        };
        // One of the two is placed; the other finds a file of its name (the
        // same name, to this file system) and is refused, never mixed in.
        let placed: Vec<&str> = ["Data.csv", "data.csv"]
            .into_iter()
            .filter(|l| status(l).0 == "downloaded")
            .collect();
        assert_eq!(placed.len(), 1, "round {round}: {v}\n{}", run.stderr);
        let other = if placed[0] == "Data.csv" {
            "data.csv"
        } else {
            "Data.csv"
        };
        assert_eq!(
            status(other),
            ("failed".into(), "exists".into()),
            "round {round}: {v}"
        );
        assert_eq!(status("other.bin").0, "downloaded", "round {round}: {v}");
        assert_eq!(run.code, Some(1), "round {round}: {}", run.stderr);
        // On disk: the placed one under its own name with its own bytes, and
        // nothing else (no partial file).
        let mut want = vec![
            (format!("cf/{}", placed[0]), sha[placed[0]].clone()),
            ("cf/other.bin".to_string(), sha["other.bin"].clone()),
        ];
        want.sort();
        let mut got = run.sums.clone();
        got.sort();
        assert_eq!(got, want, "round {round}: {v}");
    }
    relay.stop().await;
}

/// A blob nothing checks whole (no seal, no Content-MD5), its partial file
/// filled with garbage up to its full size, as a power loss can leave zeroed
/// extents: the rerun starts from 0 and places the blob's bytes, through the
/// relay and with `--direct`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_prefix_of_a_blob_nothing_checks_whole_is_not_resumed() {
    let (relay, c, gate) = setup_gated("dl-junk").await;
    let size = (6 << 20) + 3;
    let data = pattern(size, 41);
    let sha = put_ranges(&c, "g.bin", &data).await;
    for (way, flags) in [("relay", relay_flags(&relay)), ("direct", direct_flags())] {
        gate.rearm();
        let dest = Scratch::new("dl-jout");
        let first = download_args(&relay, &[&format!("{c}/g.bin")], &dest.0, &[]);
        let mut child = spawn_client(&first, &[]);
        gate.wait_holding(T).await;
        let (partial, _) = partial_grown(&dest.0, 1 << 20, &mut child).await;
        kill9(&mut child).await;
        gate.release();
        // Private while it is written: nobody else reads a download in progress.
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&partial)
                .unwrap_or_else(|e| panic!("{e}"))
                .permissions(),
        );
        assert_eq!(mode & 0o077, 0, "{way}: partial file mode {mode:o}");
        std::fs::write(&partial, pattern(size, 666)).unwrap_or_else(|e| panic!("{e}"));
        let out = run_client(
            &args_via(&flags, &[&format!("{c}/g.bin")], &dest.0, &[]),
            &[],
            T,
        )
        .await;
        assert!(out.status.success(), "{way}: {}", stderr(&out));
        let v = summary(&out);
        let f = &files_of(&v)[0];
        assert_eq!(
            (
                f["status"].as_str(),
                f["check"].as_str(),
                f["bytes_resumed"].as_u64()
            ),
            (Some("downloaded"), Some("ranges"), Some(0)),
            "{way}: {f}"
        );
        assert_eq!(sha256_file(&dest.path("g.bin")), sha, "{way}");
        assert_eq!(
            tree(&dest.0),
            vec![("g.bin".to_string(), sha.clone())],
            "{way}"
        );
    }
    relay.stop().await;
}

/// A blob under `RESUME_MIN` gets no sidecar, so a download of it cut short
/// leaves nothing behind (nothing would resume it); one of `RESUME_MIN` or
/// more keeps its partial file, every byte that came, and the sidecar that
/// names it, for a resume. The relay is a stand-in on real QUIC that sends
/// half of the blob's bytes, then `Sent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_download_keeps_a_partial_file_only_where_a_sidecar_names_it() {
    use relay_client::download::partial::RESUME_MIN;
    use relay_client::download::place::{partial_name, sidecar_name};
    use relay_tests::hostile_relay::{HostileRelay, Script};
    let min = usize::try_from(RESUME_MIN).unwrap_or(usize::MAX);
    for (size, kept) in [(64 << 10, false), (min - 1, false), (min, true)] {
        let data = pattern(size, 58);
        let half = data[..size / 2].to_vec();
        let relay = HostileRelay::start(Script {
            blob: "cut.bin".into(),
            size: size as u64,
            sha256: hex::encode(Sha256::digest(&data)),
            encoding: None,
            sections: vec![half.clone()],
        });
        let to = Scratch::new("dl-cut");
        let args = args_via(
            &relay.flags(),
            &["hostile/cut.bin"],
            &to.0,
            &["--attempts", "1"],
        );
        let out = run_client(&args, &[], T).await;
        assert_eq!(out.status.code(), Some(1), "{size}: {}", stderr(&out));
        let v = summary(&out);
        let f = &files_of(&v)[0];
        assert_eq!(f["error"]["code"], "truncated", "{size}: {f}");
        let partial = to.path(&partial_name("hostile", "cut.bin"));
        let sidecar = to.path(&sidecar_name("hostile", "cut.bin"));
        assert_eq!(partial.exists(), kept, "{size}");
        assert_eq!(sidecar.exists(), kept, "{size}");
        if kept {
            assert_eq!(std::fs::read(&partial).unwrap_or_default(), half, "{size}");
        }
        assert!(!to.path("cut.bin").exists(), "{size}: nothing placed");
        relay.stop();
    }
}
