//! Hostile compressed downloads: the real `relay-client download` against a
//! relay stand-in on real QUIC (`relay_tests::hostile_relay`) that answers its
//! Fetch with one of `relay_proto::hostile_chunks` (the bytes upload's
//! hostile-peer tests send the relay), after a Source that vouches for the
//! very bytes the chunk declares. Each fails the file with `protocol` and a
//! reason naming what the relay did; nothing is placed, and the partial file
//! holds exactly the whole chunks before the hostile one, never a byte of it.
//! A positive control shows the same stand-in's honest chunks are placed.

use std::time::Duration;

use relay_proto::chunk::Deflater;
use relay_proto::compress::Mode;
use relay_proto::hostile_chunks as hostile;
use relay_proto::protocol::Encoding;
use relay_tests::download_client::{args_via, files_of};
use relay_tests::files::Scratch;
use relay_tests::hostile::hostile_chunks;
use relay_tests::hostile_relay::{HostileRelay, Script};
use relay_tests::{run_client, stderr, summary};
use sha2::Digest;

const T: Duration = Duration::from_secs(120);

/// 3 MiB and a bit of text as honest chunks, two to a section: a partial
/// file grows before the hostile chunk comes.
fn honest_prefix() -> (Vec<u8>, Vec<Vec<u8>>) {
    let file = hostile::text((3 << 20) | 4321);
    let mut d = Deflater::new().unwrap_or_else(|e| panic!("{e}"));
    let chunks: Vec<Vec<u8>> = file
        .chunks(1 << 20)
        .map(|c| d.chunk(c, 3).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    (file, chunks.chunks(2).map(|s| s.concat()).collect())
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Downloads the stand-in's blob into `to`; the file's report.
async fn download(
    relay: &HostileRelay,
    to: &Scratch,
    blob: &str,
    extra: &[&str],
) -> serde_json::Value {
    let args = args_via(&relay.flags(), &[&format!("hostile/{blob}")], &to.0, extra);
    let out = run_client(&args, &[], T).await;
    let v = summary(&out);
    let files = files_of(&v);
    assert_eq!(files.len(), 1, "{v}\n{}", stderr(&out));
    let f = files[0].clone();
    if f["status"] != "downloaded" {
        assert_eq!(out.status.code(), Some(1), "{f}\n{}", stderr(&out));
    }
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hostile_chunk_fails_the_file_and_places_nothing() {
    let (prefix, prefix_sections) = honest_prefix();
    // Beside the chunks either side refuses, two only a reader meets: a frame
    // that ends without its checksum, and a bomb as a file's last chunk.
    let mut cases = hostile_chunks();
    cases.extend([
        (
            "no-checksum",
            hostile::unchecked_end(),
            "end inside its frame",
        ),
        ("last-bomb", hostile::last_bomb(), "decompression bomb"),
    ]);
    for (name, (chunk, declared), reason) in cases {
        for with_prefix in [false, true] {
            let blob = format!("{name}-{with_prefix}.txt");
            let (mut sections, mut size, kept) = match with_prefix {
                true => (prefix_sections.clone(), prefix.len() as u64, prefix.clone()),
                false => (Vec::new(), 0, Vec::new()),
            };
            size += declared;
            sections.push(chunk.clone());
            // The Source vouches for the bytes the chunk declares (zeros for
            // a bomb, text otherwise): only the chunks can give it away.
            let relay = HostileRelay::start(Script {
                blob: blob.clone(),
                size,
                sha256: sha(&[kept.clone(), vec![0; declared as usize]].concat()),
                encoding: Some(Encoding::Zstd),
                sections,
            });
            let to = Scratch::new("hostile-dl");
            let f = download(&relay, &to, &blob, &[]).await;
            assert_eq!(f["status"], "failed", "{blob}: {f}");
            assert_eq!(f["error"]["code"], "protocol", "{blob}: {f}");
            let message = f["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(reason), "{blob}: {message}");
            assert!(message.contains("not placed"), "{blob}: {message}");
            assert_eq!(f["attempts"], 1, "not retried: {f}");
            assert!(!to.path(&blob).exists(), "{blob}: placed");
            // The partial file holds the whole chunks before, never a byte of
            // the hostile one (a rerun resumes from good bytes only).
            let partial = to.path(&relay_client::download::place::partial_name(
                "hostile", &blob,
            ));
            let held = std::fs::read(&partial).unwrap_or_default();
            assert!(
                held == kept,
                "{blob}: {} bytes kept of {}",
                held.len(),
                kept.len()
            );
            let asked = relay.fetches();
            assert_eq!(asked.len(), 1, "{blob}");
            assert_eq!(asked[0].compress, Some(Mode::Auto), "{blob}");
            relay.stop();
        }
    }
}

/// A section that ends inside a chunk, and compressed sections a client
/// with `--compress off` never asked for: both `protocol`, nothing placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sections_that_break_the_format_or_were_not_asked_for_fail_the_file() {
    let file = hostile::text(300_000);
    let whole = Deflater::new()
        .and_then(|mut d| d.chunk(&file, 3))
        .unwrap_or_else(|e| panic!("{e}"));
    let (half, rest) = whole.split_at(whole.len() / 2);
    // (blob, its sections, extra flags, the reason)
    type Case<'a> = (&'a str, Vec<Vec<u8>>, &'a [&'a str], &'a str);
    let cases: [Case; 2] = [
        (
            "split.txt",
            vec![half.to_vec(), rest.to_vec()],
            &[],
            "a section ended inside a chunk",
        ),
        (
            "unasked.txt",
            vec![whole.clone()],
            &["--compress", "off"],
            "did not ask for",
        ),
    ];
    for (blob, sections, extra, reason) in cases {
        let relay = HostileRelay::start(Script {
            blob: blob.into(),
            size: file.len() as u64,
            sha256: sha(&file),
            encoding: Some(Encoding::Zstd),
            sections,
        });
        let to = Scratch::new("hostile-dl");
        let f = download(&relay, &to, blob, extra).await;
        assert_eq!(f["error"]["code"], "protocol", "{blob}: {f}");
        let message = f["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{blob}: {message}");
        assert!(!to.path(blob).exists(), "{blob}: placed");
        relay.stop();
    }
}

/// Positive control: the same stand-in's honest chunks (plain and zstd mixed)
/// are placed, the file hashing to the blob's SHA-256, with fewer bytes on
/// the wire than in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_chunks_from_the_stand_in_are_placed() {
    let (mut file, mut sections) = honest_prefix();
    let noise: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(40503) >> 7) as u8)
        .collect();
    sections.push(Deflater::plain(&noise));
    file.extend_from_slice(&noise);
    let relay = HostileRelay::start(Script {
        blob: "good.txt".into(),
        size: file.len() as u64,
        sha256: sha(&file),
        encoding: Some(Encoding::Zstd),
        sections,
    });
    let to = Scratch::new("hostile-dl");
    let f = download(&relay, &to, "good.txt", &["--compress", "zstd"]).await;
    assert_eq!(f["status"], "downloaded", "{f}");
    assert_eq!(f["check"], "sealed", "{f}");
    assert_eq!(f["sha256"], sha(&file).as_str(), "{f}");
    let placed = std::fs::read(to.path("good.txt")).unwrap_or_default();
    assert!(placed == file, "{} bytes placed", placed.len());
    let wire = f["wire_bytes"].as_u64().unwrap_or(u64::MAX);
    assert!(wire < file.len() as u64 / 2, "{f}");
    assert_eq!(relay.fetches()[0].compress, Some(Mode::Zstd));
    relay.stop();
}
