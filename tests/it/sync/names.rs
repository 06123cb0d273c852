//! Names a file system changes or keeps apart: blobs whose names differ only
//! in case synced down into a case-insensitive folder (exFAT through FUSE),
//! and names in NFC and NFD, which the sync keeps byte for byte both ways.

use std::collections::BTreeMap;

use relay_tests::blobs::blob_sha;
use relay_tests::download_client::{relay_flags, s, setup, tree, upload};
use relay_tests::download_local::{FoldedRun, exfat_missing};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::sync_folded::sync_in_exfat;

use super::{ok, sync};

/// Fresh folders (the race: which blob makes the folder first), each
/// synced `RERUNS` times.
const RACES: usize = 30;
const RERUNS: usize = 2;

/// Blob names: pairs that differ only in case (ASCII, a folder, Latin-1 and
/// Greek, which exFAT's upcase table folds too), and one with no twin.
const NAMES: &[&str] = &[
    "A.txt",
    "a.txt",
    "Dir/x",
    "dir/x",
    "dir/z",
    "É.bin",
    "é.bin",
    "Σ.dat",
    "σ.dat",
    "other.bin",
];

/// The pairs of which exactly one is placed.
const TWINS: &[[&str; 2]] = &[["A.txt", "a.txt"], ["É.bin", "é.bin"], ["Σ.dat", "σ.dat"]];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_differing_only_in_case_never_share_a_file_nor_flip_flop() {
    if let Some(why) = exfat_missing() {
        eprintln!("SKIPPED: no case-insensitive file system here: {why}");
        return;
    }
    let (relay, c) = setup("sync-fold", None).await;
    let src = Scratch::new("sync-fold");
    let mut sha = BTreeMap::new();
    for (i, name) in NAMES.iter().enumerate() {
        let digest = write_random(
            &src.path(&format!("cf/{name}")),
            1000 + i as u64,
            40 + i as u64,
        );
        sha.insert(name.to_string(), digest);
    }
    upload(&relay, &src.path("cf"), &c).await;
    let index = src.path("index.sqlite");
    let from = format!("{c}/cf");
    let runs = sync_in_exfat(
        |mnt| {
            let dest = mnt.join("dest").display().to_string();
            let mut a = s(&[
                "sync",
                &from,
                &dest,
                "--json",
                "--delete",
                "--delete-unknown",
            ]);
            a.extend(["--index".into(), index.display().to_string()]);
            a.extend(relay_flags(&relay));
            a
        },
        RACES * RERUNS,
        RERUNS,
        &index,
    )
    .await
    .unwrap_or_else(|why| panic!("exFAT through FUSE is installed but failed: {why}"));
    assert_eq!(runs.len(), RACES * RERUNS);
    for (round, run) in runs.iter().enumerate() {
        check_round(round, run, &runs[round - round % RERUNS], &sha);
    }
    // Nothing of the source's removed either.
    for name in sha.keys() {
        let (_, digest) = blob_sha(&c, &format!("cf/{name}")).await;
        assert_eq!(Some(&digest), sha.get(name), "{name}");
    }
    relay.stop().await;
}

/// One run of the case-folding races: what it placed and what it said.
fn check_round(round: usize, run: &FoldedRun, first: &FoldedRun, sha: &BTreeMap<String, String>) {
    let ctx = format!(
        "round {round}: rc {:?}\n{}\n{}",
        run.code, run.stdout, run.stderr
    );
    // Each file holds the bytes of the blob of its own name, exactly:
    // never another blob's, never under a folder spelled otherwise.
    for (path, digest) in &run.sums {
        assert_eq!(sha.get(path), Some(digest), "{path}: {ctx}");
    }
    // One of each pair (`A.txt`/`a.txt`, `É.bin`/`é.bin`, `Σ.dat`/`σ.dat`);
    // the folder one spelling, whichever blob made it first (`Dir/x` alone,
    // or `dir/x` and `dir/z`); the same files every round.
    let placed: Vec<&str> = run.sums.iter().map(|(p, _)| p.as_str()).collect();
    for twins in TWINS {
        let n = twins.iter().filter(|t| placed.contains(t)).count();
        assert_eq!(n, 1, "{twins:?}: {ctx}");
    }
    let dirs: std::collections::BTreeSet<&str> = placed
        .iter()
        .filter_map(|p| p.split_once('/').map(|d| d.0))
        .collect();
    assert_eq!(dirs.len(), 1, "{ctx}");
    assert!(placed.contains(&"other.bin"), "{ctx}");
    assert_eq!(run.sums, first.sums, "{ctx}");
    let v: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {ctx}"));
    let y = &v["sync"];
    // Never reported synced unless placed: the rest are conflicts.
    let synced = y["fetched"].as_u64().unwrap_or(0) + y["skipped_unchanged"].as_u64().unwrap_or(0);
    // Fetched the first time, found unchanged on each re-run.
    let (fetched, skipped) = (y["fetched"].as_u64(), y["skipped_unchanged"].as_u64());
    let n = Some(placed.len() as u64);
    let want = if round.is_multiple_of(RERUNS) {
        (n, Some(0))
    } else {
        (Some(0), n)
    };
    assert_eq!((fetched, skipped), want, "{ctx}");
    assert_eq!(synced, placed.len() as u64, "{ctx}");
    assert_eq!(
        y["conflicts"].as_u64(),
        Some((sha.len() - placed.len()) as u64),
        "{ctx}"
    );
    assert_eq!(y["deleted"].as_u64().unwrap_or(0), 0, "{ctx}");
    assert_eq!(run.code, Some(1), "{ctx}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfc_and_nfd_names_round_trip_byte_exact_and_rerun_unchanged() {
    let (relay, c) = setup("sync-nf", None).await;
    let dir = Scratch::new("sync-nf");
    let root = dir.path("src");
    // "café" precomposed (NFC) and decomposed (NFD, as macOS names it), side
    // by side: two names, two files, two blobs.
    let names = [
        "caf\u{e9}.txt",
        "cafe\u{301}.txt",
        "d\u{e9}/x",
        "de\u{301}/x",
    ];
    for (i, n) in names.iter().enumerate() {
        write_random(&root.join(n), 500 + i as u64, 60 + i as u64);
    }
    let way = relay_flags(&relay);
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/n"));
    let index = dir.path("up.sqlite");
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    assert_eq!(ok(&out, &v)["sent"], names.len(), "{v}");
    for n in names {
        let (_, digest) = blob_sha(&c, &format!("n/{n}")).await;
        assert_eq!(digest, sha256_file(&root.join(n)), "{n:?}");
    }
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["sent"].as_u64(), y["bytes_read"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );

    let out_dir = dir.path("out");
    let (from, to, down) = (
        format!("{c}/n"),
        out_dir.display().to_string(),
        dir.path("down.sqlite"),
    );
    let (out, v) = sync(&way, &from, &to, &down, &["--delete"]).await;
    assert_eq!(ok(&out, &v)["fetched"], names.len(), "{v}");
    // The same bytes under the same bytes of name.
    assert_eq!(tree(&out_dir), tree(&root));
    let (out, v) = sync(&way, &from, &to, &down, &["--delete"]).await;
    let y = ok(&out, &v);
    assert_eq!(
        (y["fetched"].as_u64(), y["skipped_unchanged"].as_u64()),
        (Some(0), Some(4)),
        "{v}"
    );
    relay.stop().await;
}
