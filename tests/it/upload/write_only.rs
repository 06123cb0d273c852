//! Writing never implies reading, end to end against Azurite: a token that
//! may only write a container cannot learn whether a guessed content equals a
//! blob it did not write (the relay's answers to the same and to another
//! content are the same, and name no version), while the blob's own writer's
//! re-run, and a token that may read the container, still skip identical files.

use std::time::Duration;

use relay_proto::protocol::{Message, Overwrite};
use relay_tests::blobs::{blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::hostile::{offer, open_with_offer, upload_args};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions, TOKEN};
use relay_tests::{run_client, stderr, summary};

const T: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;
/// May read and write the test's container (and wrote nothing in it).
const READER_TOKEN: &str = "reader-token-0123456789abcdef";

/// The relay's first answer to an Offer of a file of `size` bytes hashing to
/// `sha256` (as the client's second Offer after "exists" carries it).
async fn answer(
    conn: &quinn::Connection,
    token: &str,
    container: &str,
    blob: &str,
    size: u64,
    sha256: &str,
    overwrite: Overwrite,
) -> Message {
    let mut o = offer(token, container, blob, size);
    o.sha256 = Some(sha256.into());
    o.overwrite = overwrite;
    let (mut send, _recv, answer) = open_with_offer(conn, o).await;
    let _ = send.reset(relay_proto::protocol::app_error::CLIENT_ABORT.into());
    answer
}

/// A `--json` upload's one file report, with what depends on the local file
/// alone (its hash, timings) left out.
fn file_report(out: &std::process::Output) -> serde_json::Value {
    let mut f = summary(out)["files"][0].clone();
    if let Some(o) = f.as_object_mut() {
        for key in [
            "path",
            "sha256",
            "client_ms",
            "relay_ms",
            "clocks_ms",
            "bytes_sent",
            "wire_bytes",
        ] {
            o.remove(key);
        }
    }
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_only_token_learns_nothing_by_guessing_a_blobs_content() {
    let container = new_container("writeonly").await;
    // LIMITED_TOKEN may only write the container; TOKEN (the writer) may
    // write any container and read none; READER_TOKEN reads and writes it.
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: container.clone(),
            ..Default::default()
        },
    );
    relay.rewrite_tokens(&format!(
        "{TOKEN}\n{LIMITED_TOKEN} {container}\n{READER_TOKEN} {container}:rw\n"
    ));
    relay.shared.sign_in.tokens.reload();
    // The blobs' files, and the guesses: files of the same names and sizes.
    let (dir, guesses) = (Scratch::new("writeonly"), Scratch::new("guesses"));
    // A one-block file (an eager stream, one Put Blob) and a block list.
    let names = ["small.txt", "big.bin"];
    let sizes = [1000, 11 * MIB];
    let mut held = Vec::new();
    let mut guessed = Vec::new();
    for (name, size) in names.iter().zip(sizes) {
        let path = dir.path(name);
        held.push((path.clone(), write_random(&path, size, 1)));
        let guess = guesses.path(name);
        guessed.push((guess.clone(), write_random(&guess, size, 2)));
    }
    for (path, _) in &held {
        let out = run_client(&upload_args(&relay, path, &container, TOKEN), &[], T).await;
        assert!(out.status.success(), "{}", stderr(&out));
    }

    // The raw protocol: the same content and another, with the SHA-256.
    let (_c, conn) = Dial::to(&relay).connect().await;
    for (i, (name, size)) in names.iter().zip(sizes).enumerate() {
        for overwrite in [
            Overwrite::Never,
            Overwrite::IfMatch {
                etag: "\"0x8D0000000000000\"".into(),
            },
        ] {
            let ask = |token: &'static str, sha: String| {
                let (conn, container, overwrite) =
                    (conn.clone(), container.clone(), overwrite.clone());
                async move { answer(&conn, token, &container, name, size, &sha, overwrite).await }
            };
            let same = ask(LIMITED_TOKEN, held[i].1.clone()).await;
            let other = ask(LIMITED_TOKEN, guessed[i].1.clone()).await;
            assert_eq!(format!("{same:?}"), format!("{other:?}"), "{name}");
            match &same {
                Message::Reject(f) => assert_eq!(f.existing, None, "{name}: {f:?}"),
                m => panic!("{name}: expected a Reject, got {m:?}"),
            }
            // The writer and a reader are told: a Receipt for the same bytes.
            for token in [TOKEN, READER_TOKEN] {
                let told = ask(token, held[i].1.clone()).await;
                assert!(
                    matches!(told, Message::Receipt(_)),
                    "{name} {token}: {told:?}"
                );
                let refused = ask(token, guessed[i].1.clone()).await;
                let Message::Reject(f) = refused else {
                    panic!("{name} {token}: {refused:?}")
                };
                if matches!(overwrite, Overwrite::Never) {
                    assert!(f.existing.is_some(), "{name} {token}: {f:?}");
                } else {
                    assert!(f.message.contains("etag is"), "{name} {token}: {f:?}");
                }
            }
        }
    }

    // The real client, as a user would: the same file and another, through
    // its every path (eager Put Blob refused and explained, then the Offer
    // with the SHA-256; the probed block list).
    for (i, name) in names.iter().enumerate() {
        let run = |path: std::path::PathBuf| {
            let a = upload_args(&relay, &path, &container, LIMITED_TOKEN);
            async move { run_client(&a, &[], T).await }
        };
        let same = run(held[i].0.clone()).await;
        let other = run(guessed[i].0.clone()).await;
        assert_eq!(same.status.code(), Some(1), "{}", stderr(&same));
        assert_eq!(other.status.code(), Some(1), "{}", stderr(&other));
        let (same, other) = (file_report(&same), file_report(&other));
        assert_eq!(same, other, "{name}");
        assert_eq!(same["error"]["code"], "exists", "{same}");
        assert!(same.get("etag").is_none_or(|e| e.is_null()), "{same}");
    }

    // The writer's re-run and a reader's skip both identical files.
    for token in [TOKEN, READER_TOKEN] {
        for (path, _) in &held {
            let out = run_client(&upload_args(&relay, path, &container, token), &[], T).await;
            assert!(out.status.success(), "{token}: {}", stderr(&out));
            let f = &summary(&out)["files"][0];
            assert_eq!(
                (f["status"].as_str(), f["reason"].as_str()),
                (Some("skipped"), Some("identical")),
                "{token}: {f}"
            );
        }
    }
    // Nothing was replaced.
    for ((_, sha), (name, size)) in held.iter().zip(names.iter().zip(sizes)) {
        assert_eq!(blob_sha(&container, name).await, (size, sha.clone()));
    }
    relay.stop().await;
}
