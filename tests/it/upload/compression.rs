//! Compression on the wire end to end: the real client and relay on
//! loopback QUIC, Azurite behind. Whatever travelled, every committed blob is
//! downloaded and hashed against its file, carries the file's SHA-256 as its
//! `sha256` metadata and no Content-Encoding; compression is used only when
//! both ends announced it, and a compressed upload resumes in the file's own
//! offsets, also with `--compress off`. (Hostile chunks: `hostile/compressed_upload.rs`.)

use std::time::Duration;

use relay_tests::blobs::{blob_sha, new_container, writer};
use relay_tests::datasets::DataSet;
use relay_tests::files::Scratch;
use relay_tests::paced::{TestRelay, run_and_kill, wait_uncommitted};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::upload::Upload;
use relay_tests::{run_client, stderr, summary};

const MIB: u64 = 1 << 20;
/// A bound against hangs only.
const T: Duration = Duration::from_secs(180);

/// The blob is the file: its bytes hash to the file's SHA-256, its `sha256`
/// metadata is that hash, and nothing says how it travelled.
async fn assert_blob_is_file(container: &str, blob: &str, size: u64, sha: &str) {
    assert_eq!(
        blob_sha(container, blob).await,
        (size, sha.to_string()),
        "{blob}"
    );
    let w = writer(container, blob);
    let props = w
        .properties()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("{blob} was not committed"));
    assert_eq!(props.sha256.as_deref(), Some(sha), "{blob}");
    let encoding = w.content_encoding().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(encoding, None, "{blob} has a Content-Encoding");
}

/// Runs the client; returns its report's files by blob name.
async fn upload(args: &[String]) -> Vec<serde_json::Value> {
    let out = run_client(args, &[], T).await;
    assert!(out.status.success(), "client failed: {}", stderr(&out));
    let s = summary(&out);
    s["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files in {s}"))
        .clone()
}

fn file_named<'a>(files: &'a [serde_json::Value], blob: &str) -> &'a serde_json::Value {
    files
        .iter()
        .find(|f| f["blob"].as_str().is_some_and(|b| b.ends_with(blob)))
        .unwrap_or_else(|| panic!("{blob} not in the report"))
}

struct Set {
    name: String,
    size: u64,
    sha: String,
}

/// One file of each data set, plus a small text file (one block: Put Blob)
/// and an empty one.
fn make_sets(dir: &Scratch) -> Vec<Set> {
    let mut sets: Vec<Set> = DataSet::ALL
        .iter()
        .map(|d| {
            let name = format!("{}.dat", d.name());
            let size = 11 * MIB + 12_345;
            let sha = d.write(&dir.path(&name), size, 34);
            Set { name, size, sha }
        })
        .collect();
    let small = "small.log".to_string();
    let sha = DataSet::Logs.write(&dir.path(&small), 300_000, 7);
    sets.push(Set {
        name: small,
        size: 300_000,
        sha,
    });
    let empty = "empty.txt".to_string();
    std::fs::write(dir.path(&empty), b"").unwrap_or_else(|e| panic!("{e}"));
    sets.push(Set {
        name: empty,
        size: 0,
        sha: relay_tests::files::sha256_file(&dir.path("empty.txt")),
    });
    sets
}

fn args_for(dir: &Scratch, sets: &[Set], relay: &RelayHandle, to: &str, mode: &str) -> Vec<String> {
    let mut up = Upload::file(&dir.path(&sets[0].name));
    for s in &sets[1..] {
        up = up.and(&dir.path(&s.name));
    }
    up.to(to)
        .json()
        .block_size("5MiB")
        .flag("--compress", mode)
        .via(relay)
        .args()
}

/// `auto` and `zstd`: text-like sets travel in a fraction of their bytes,
/// random data as it is (plain chunks: 9 bytes of header a MiB), and every
/// blob is its file. `auto` compresses only where the link is slower than the
/// compressor: loopback is not, so its run is capped at 80 Mbit/s
/// (`--max-rate`), which no compressor level here fails to keep up with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_uploads_commit_exactly_the_files_bytes() {
    let (relay, container) = RelayHandle::with_container("zstd", RelayOptions::default()).await;
    let dir = Scratch::new("zstd");
    let sets = make_sets(&dir);
    for mode in ["auto", "zstd"] {
        let to = format!("{container}/{mode}");
        let mut args = args_for(&dir, &sets, &relay, &to, mode);
        if mode == "auto" {
            args.extend(["--max-rate".to_string(), "80".to_string()]);
        }
        let files = upload(&args).await;
        for s in &sets {
            let f = file_named(&files, &s.name);
            assert_eq!(f["status"], "committed", "{f}");
            assert_eq!(f["sha256"], s.sha.as_str(), "{f}");
            assert_blob_is_file(&container, &format!("{mode}/{}", s.name), s.size, &s.sha).await;
            if s.size == 0 {
                continue;
            }
            let wire = f["wire_bytes"]
                .as_u64()
                .unwrap_or_else(|| panic!("no wire_bytes: {f}"));
            let sent = f["bytes_sent"].as_u64().unwrap_or_default();
            assert_eq!(sent, s.size, "{f}");
            // For the record (`-- --nocapture`): what each set cost on the wire.
            eprintln!("{mode} {}: {sent} bytes, {wire} on the wire", s.name);
            if s.name.starts_with("random") {
                // Plain chunks: at most a header per MiB more.
                assert!(wire >= sent && wire <= sent + 9 * (sent / MIB + 1), "{f}");
            } else {
                assert!(wire < sent / 2, "{} did not shrink: {f}", s.name);
            }
        }
    }
    relay.stop().await;
}

/// Version skew both ways falls back to plain, with no error: a relay from
/// before compression (announces only the plain protocol) with today's client,
/// and today's relay with a client that does not announce it (`--compress off`
/// sends exactly what an older client sends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_skew_either_way_goes_plain() {
    let container = new_container("skew").await;
    let dir = Scratch::new("skew");
    let sets = make_sets(&dir);
    let old_relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            hooks: relay_server::TestHooks {
                before_compression: true,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let new_relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions::default(),
    );
    for (relay, mode, to) in [
        (&old_relay, "auto", "old-relay"),
        (&old_relay, "zstd", "old-relay-zstd"),
        (&new_relay, "off", "old-client"),
    ] {
        let files = upload(&args_for(
            &dir,
            &sets,
            relay,
            &format!("{container}/{to}"),
            mode,
        ))
        .await;
        for s in &sets {
            let f = file_named(&files, &s.name);
            assert_eq!(f["status"], "committed", "{to}: {f}");
            assert!(f.get("wire_bytes").is_none(), "{to}: compressed: {f}");
            assert_blob_is_file(&container, &format!("{to}/{}", s.name), s.size, &s.sha).await;
        }
    }
    old_relay.stop().await;
    new_relay.stop().await;
}

/// A compressed upload killed after two blocks resumes at 10 MiB, counted in
/// the file's bytes, whether the rerun compresses or not; the blob is the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_upload_resumes_with_or_without_compression() {
    let container = new_container("zresume").await;
    let dir = Scratch::new("zresume");
    let size = 22 * MIB + 999;
    for rerun in ["auto", "off"] {
        let relay = TestRelay::start();
        let name = format!("{rerun}.log");
        let file = dir.path(&name);
        let sha = DataSet::Logs.write(&file, size, 5);
        // Held on the chunk that reaches 11 MiB: blocks 0 and 1 are staged,
        // block 2 is not (the relay is held inside it until the test ends).
        relay.control.gate_at(11 * MIB);
        let with = |mode: &str| {
            let mut a = relay.upload(&file, &container);
            a.extend(["--compress".to_string(), mode.to_string()]);
            a
        };
        run_and_kill(&with("auto"), || relay.control.holding()).await;
        let staged = wait_uncommitted(&container, &name, 2).await;
        assert_eq!(staged.len(), 2, "{rerun}: blocks staged before the rerun");
        assert!(staged.iter().all(|(_, len)| *len == 5 * MIB), "{staged:?}");
        let files = upload(&with(rerun)).await;
        let f = &files[0];
        assert_eq!(f["status"], "committed", "{f}");
        assert_eq!(f["bytes_resumed"], 10 * MIB, "{rerun}: {f}");
        assert_eq!(f["bytes_sent"], size - 10 * MIB, "{rerun}: {f}");
        assert_eq!(f.get("wire_bytes").is_some(), rerun == "auto", "{f}");
        assert_blob_is_file(&container, &name, size, &sha).await;
        relay.stop().await;
    }
}

/// Data sets are what they say: deterministic, of the asked size.
#[test]
fn data_sets_are_deterministic() {
    let dir = Scratch::new("sets");
    for d in DataSet::ALL {
        let a = d.write(&dir.path("a"), 3 * MIB + 7, 1);
        let b = d.write(&dir.path("b"), 3 * MIB + 7, 1);
        assert_eq!(a, b, "{}", d.name());
        assert_eq!(
            std::fs::metadata(dir.path("a")).map(|m| m.len()).ok(),
            Some(3 * MIB + 7)
        );
        assert_ne!(a, d.write(&dir.path("c"), 3 * MIB + 7, 2), "{}", d.name());
    }
}
