//! Compression on the way back: the real client and relay on loopback QUIC,
//! Azurite behind. Whatever travelled, every file placed hashes to its
//! blob's bytes; sections go compressed only when the client asked on a
//! connection that agreed and the blob is worth it, and a compressed download
//! resumes in the blob's own offsets, with compression or without. (Hostile
//! chunks from a relay: `hostile/compressed_download.rs`.)

use std::sync::atomic::Ordering;
use std::time::Duration;

use relay_proto::compress::Mode;
use relay_proto::protocol::{Encoding, Message};
use relay_tests::datasets::DataSet;
use relay_tests::download::{fetch, fetch_of};
use relay_tests::download_client::{download, download_args, files_of, setup, setup_gated, upload};
use relay_tests::download_local::kill_when_grown;
use relay_tests::files::{Scratch, sha256_file};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use relay_tests::{spawn_client, stderr};

const MIB: u64 = 1 << 20;
const T: Duration = Duration::from_secs(180);

/// Files of each data set (blocks and a short last one), a small log (one
/// Put Blob) and an empty file, under `dir/set/`; (name, size, SHA-256).
fn make_sets(dir: &Scratch) -> Vec<(String, u64, String)> {
    let mut sets: Vec<(String, u64, String)> = DataSet::ALL
        .iter()
        .map(|d| {
            let name = format!("{}.dat", d.name());
            let size = 6 * MIB + 12_345;
            (
                name.clone(),
                size,
                d.write(&dir.path(&format!("set/{name}")), size, 50),
            )
        })
        .collect();
    let sha = DataSet::Logs.write(&dir.path("set/small.log"), 300_000, 7);
    sets.push(("small.log".into(), 300_000, sha));
    std::fs::write(dir.path("set/empty.txt"), b"").unwrap_or_else(|e| panic!("{e}"));
    sets.push((
        "empty.txt".into(),
        0,
        sha256_file(&dir.path("set/empty.txt")),
    ));
    sets
}

fn file_named<'a>(files: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    files
        .iter()
        .find(|f| f["blob"].as_str().is_some_and(|b| b.ends_with(name)))
        .unwrap_or_else(|| panic!("{name} not in {files:?}"))
}

/// `auto` (the relay capped at 80 Mbit/s, which its compressor outpaces at
/// any level) and `zstd`: text-like sets come back in a fraction of their
/// bytes, random data as it is (a 9-byte header per MiB), and every file is
/// its blob; the relay counts both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_downloads_place_exactly_the_blobs_bytes() {
    let (relay, c) = setup("dlz", Some(80.0)).await;
    let src = Scratch::new("dlz-src");
    let sets = make_sets(&src);
    upload(&relay, &src.path("set"), &c).await;
    for mode in ["auto", "zstd"] {
        let to = Scratch::new("dlz-to");
        let m = &relay.shared.metrics;
        let (sent0, wire0) = (
            m.bytes_sent.load(Ordering::SeqCst),
            m.wire_bytes_sent.load(Ordering::SeqCst),
        );
        let (out, v) = download(&relay, &[&format!("{c}/set")], &to.0, &["--compress", mode]).await;
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let files = files_of(&v);
        for (name, size, sha) in &sets {
            let f = file_named(&files, name);
            assert_eq!(f["status"], "downloaded", "{mode}: {f}");
            assert_eq!(
                sha256_file(&to.path(&format!("set/{name}"))),
                *sha,
                "{mode} {name}"
            );
            let got = f["bytes_sent"].as_u64().unwrap_or_default();
            assert_eq!(got, *size, "{mode}: {f}");
            let wire = f["wire_bytes"].as_u64();
            // For the record (`-- --nocapture`): what each set cost on the wire.
            eprintln!("{mode} {name}: {size} bytes, {wire:?} on the wire");
            match name.as_str() {
                "empty.txt" => assert_eq!(wire, None, "{f}"),
                "random.dat" => {
                    let wire = wire.unwrap_or_else(|| panic!("compressed sections: {f}"));
                    assert!(wire >= got && wire <= got + 9 * (got / MIB + 1), "{f}");
                }
                _ => {
                    let wire = wire.unwrap_or_else(|| panic!("compressed sections: {f}"));
                    assert!(wire < got / 2, "{name} did not shrink: {f}");
                }
            }
        }
        let sent = m.bytes_sent.load(Ordering::SeqCst) - sent0;
        let wire = m.wire_bytes_sent.load(Ordering::SeqCst) - wire0;
        assert_eq!(sent, sets.iter().map(|s| s.1).sum::<u64>(), "{mode}");
        assert!(
            wire < sent * 3 / 4,
            "{mode}: the relay sent {wire} for {sent}"
        );
    }
    relay.stop().await;
}

/// Plain, with no error, wherever compression is not for this download: a
/// relay from before compression (announces only the plain protocol), a
/// client with `--compress off`, and a blob whose name says it is already
/// compressed (text all the same, so only the rule can have kept it plain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_where_either_end_or_the_blob_says_so() {
    let (new_relay, c) = setup("dlzskew", None).await;
    let old_relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: format!("{c}:rw"),
            hooks: relay_server::TestHooks {
                before_compression: true,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let src = Scratch::new("dlzskew-src");
    let sha = DataSet::Logs.write(&src.path("skew/app.log"), 3 * MIB, 9);
    let gz_sha = DataSet::Logs.write(&src.path("skew/app.log.gz"), 3 * MIB, 10);
    upload(&new_relay, &src.path("skew"), &c).await;
    for (relay, mode, why) in [
        (&old_relay, "zstd", "an old relay"),
        (&new_relay, "off", "--compress off"),
        (&new_relay, "zstd", "a .gz name"),
    ] {
        let to = Scratch::new("dlzskew-to");
        let (out, v) = download(relay, &[&format!("{c}/skew")], &to.0, &["--compress", mode]).await;
        assert!(out.status.success(), "{why}: {}", stderr(&out));
        let files = files_of(&v);
        let gz = file_named(&files, "app.log.gz");
        assert_eq!(gz["status"], "downloaded", "{why}: {gz}");
        assert!(gz.get("wire_bytes").is_none(), "{why}: {gz}");
        assert_eq!(sha256_file(&to.path("skew/app.log.gz")), gz_sha);
        let log = file_named(&files, "app.log");
        assert_eq!(sha256_file(&to.path("skew/app.log")), sha);
        let compressed = log.get("wire_bytes").is_some();
        assert_eq!(compressed, why == "a .gz name", "{why}: {log}");
    }
    old_relay.stop().await;
    new_relay.stop().await;
}

/// A compressed download killed midway resumes from the partial file's
/// length, counted in the blob's bytes, whether the rerun compresses or not;
/// the file is the blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_download_resumes_with_or_without_compression() {
    // The relay holds each fetch after its first range: the client is
    // killed mid-file, whatever the machine's speed.
    let (relay, c, gate) = setup_gated("dlzresume").await;
    let src = Scratch::new("dlzresume-src");
    let size = 32 * MIB + 999;
    for rerun in ["auto", "off"] {
        let name = format!("{rerun}.log");
        let sha = DataSet::Logs.write(&src.path(&name), size, 11);
        upload(&relay, &src.path(&name), &c).await;
        gate.rearm();
        let to = Scratch::new("dlzresume-to");
        let partial = to.path(&relay_client::download::place::partial_name(&c, &name));
        let args = download_args(&relay, &[&format!("{c}/{name}")], &to.0, &[]);
        let mut child = spawn_client(&args, &[]);
        gate.wait_holding(T).await;
        kill_when_grown(&partial, 2 * MIB, &mut child).await;
        gate.release();
        let kept = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        assert!(kept > 2 * MIB && kept < size, "{kept}");

        let (out, v) = download(
            &relay,
            &[&format!("{c}/{name}")],
            &to.0,
            &["--compress", rerun],
        )
        .await;
        assert!(out.status.success(), "{rerun}: {}", stderr(&out));
        let f = &files_of(&v)[0];
        assert_eq!(f["status"], "downloaded", "{f}");
        assert_eq!(f["bytes_resumed"], kept, "{rerun}: {f}");
        assert_eq!(f["bytes_sent"], size - kept, "{rerun}: {f}");
        assert_eq!(f.get("wire_bytes").is_some(), rerun == "auto", "{f}");
        assert_eq!(sha256_file(&to.path(&name)), sha, "{rerun}");
        assert!(!partial.exists());
    }
    relay.stop().await;
}

/// The relay's side, frame by frame: a Fetch that asks on a connection that
/// agreed gets `encoding: zstd` and sections of whole chunks; the same Fetch
/// on a connection that did not agree, or to a relay whose budget cannot
/// hold a compressor beside a range, gets plain sections of the blob's
/// bytes, and the budget comes back either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_compresses_only_where_agreed_and_within_its_budget() {
    let (relay, c) = setup("dlzraw", None).await;
    let small = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: format!("{c}:rw"),
            // Two ranges, not a compressor and its range besides.
            memory_budget: 8 * MIB,
            configure: Some(Box::new(|cfg| cfg.limits.token_share_percent = 100)),
            ..Default::default()
        },
    );
    let src = Scratch::new("dlzraw-src");
    let size = 9 * MIB + 77;
    DataSet::Csv.write(&src.path("t.csv"), size, 3);
    upload(&relay, &src.path("t.csv"), &c).await;
    let file = std::fs::read(src.path("t.csv")).unwrap_or_else(|e| panic!("{e}"));
    for (r, zstd, compressed) in [
        (&relay, true, true),
        (&relay, false, false),
        (&small, true, false),
    ] {
        let (_c, conn) = Dial::to(r).zstd(zstd).connect().await;
        let mut f = fetch_of(LIMITED_TOKEN, &c, "t.csv");
        f.compress = Some(Mode::Zstd);
        let got = fetch(&conn, f).await;
        let Message::Source(source) = &got.first else {
            panic!("expected a Source, got {:?}", got.first)
        };
        assert!(matches!(got.end, Some(Message::Sent(_))), "{:?}", got.end);
        let body = if compressed {
            assert_eq!(source.encoding, Some(Encoding::Zstd));
            assert!(got.data.len() < file.len() / 2, "{} bytes", got.data.len());
            inflate(&got.data, size)
        } else {
            assert_eq!(source.encoding, None, "zstd {zstd}");
            got.data.clone()
        };
        assert!(body == file, "zstd {zstd}, compressed {compressed}");
        let deadline = std::time::Instant::now() + T;
        while r.shared.limits.budget.in_use_bytes() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "budget never returned"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    small.stop().await;
    relay.stop().await;
}

/// Chunks back to the blob's bytes with the decoder both ends use.
fn inflate(wire: &[u8], size: u64) -> Vec<u8> {
    let mut inf = relay_proto::inflate::Inflater::new(size);
    let mut out = vec![0u8; size as usize];
    let (mut pos, mut got) = (0, 0);
    while !inf.is_done() {
        let step = inf
            .step(&wire[pos..], &mut out[got..])
            .unwrap_or_else(|e| panic!("at {pos}: {e}"));
        assert!(step.consumed + step.produced > 0, "stuck at {pos}");
        pos += step.consumed;
        got += step.produced;
    }
    assert_eq!(pos, wire.len());
    out
}
