//! Who owns a blob and its transfer, against hostile peers: two users racing one blob
//! name, one token continuing another's transfer, peers that never authenticate,
//! and a token holder trying to hold all of the relay's memory (that last and the
//! unauthenticated peers in `budget.rs`). Real relay, real
//! QUIC on loopback, Azurite; a raw-protocol client where the real one cannot
//! misbehave. Every committed blob is downloaded and hashed.

use std::time::Duration;

use relay_proto::block_id::{BlockId, BlockState, IdSigner, TransferTag};
use relay_proto::checkpoint::Checkpoint;
use relay_proto::id_key::Owner;
use relay_proto::protocol::{Code, Message, Offer, Overwrite, Start};
use relay_storage::store::{Commit, Condition};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, new_container, writer};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::hostile::{offer, open_with_offer, relay_with, upload_args};
use relay_tests::raw_quic::Dial;
use relay_tests::relay::{LIMITED_TOKEN, TOKEN};
use relay_tests::{run_client, stderr, summary};
use relay_transport::frames::{read_frame, write_frame};
use sha2::Digest;

const MIB: u64 = 1 << 20;
const T: Duration = Duration::from_secs(120);

/// Two ordinary users upload different bytes of the same size to the
/// same name at the same moment. Whatever the interleaving (30 rounds each, with
/// and without --overwrite), the blob's bytes hash to its `sha256` metadata and to
/// one of the two files, and a client reports committed only for its own bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_uploads_to_one_name_never_publish_unverified_bytes() {
    let container = new_container("race1").await;
    let relay = relay_with(&container, |_| {});
    let dir = Scratch::new("race1");
    for round in 0..30u64 {
        let blob = format!("r{round}.bin");
        // Small files (one block: the case the review broke) and, every third
        // round, two blocks whose last block differs.
        let size = if round % 3 == 2 { 5 * MIB + 1000 } else { 1000 };
        // Both sources under the same name: the same blob.
        let (da, db) = (
            dir.path(&format!("a{round}")),
            dir.path(&format!("b{round}")),
        );
        std::fs::create_dir_all(&da).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(&db).unwrap_or_else(|e| panic!("{e}"));
        let sha_a = write_random(&da.join(&blob), size, 1000 + round);
        let sha_b = write_random(&db.join(&blob), size, 2000 + round);
        let overwrite = round % 2 == 1;
        let args = |file: std::path::PathBuf, token: &str| {
            let mut a = upload_args(&relay, &file, &container, token);
            if overwrite {
                a.push("--overwrite".into());
            }
            a
        };
        // Same token on even rounds (same owner: only content tells them
        // apart), two tokens on odd ones.
        let token_b = if round % 2 == 0 { TOKEN } else { LIMITED_TOKEN };
        let (args_a, args_b) = (args(da.join(&blob), TOKEN), args(db.join(&blob), token_b));
        let (out_a, out_b) =
            tokio::join!(run_client(&args_a, &[], T), run_client(&args_b, &[], T),);
        let props = writer(&container, &blob)
            .properties()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("round {round}: nothing committed"));
        let (n, got) = blob_sha(&container, &blob).await;
        assert_eq!(n, size);
        assert_eq!(
            props.sha256.as_deref(),
            Some(got.as_str()),
            "round {round}: the blob's bytes do not hash to its sha256 metadata"
        );
        assert!(got == sha_a || got == sha_b, "round {round}: foreign bytes");
        for (out, sha) in [(&out_a, &sha_a), (&out_b, &sha_b)] {
            let f = &summary(out)["files"][0];
            if f["status"] == "committed" {
                assert_eq!(f["sha256"], sha.as_str(), "round {round}: {f}");
            }
        }
        if !overwrite {
            let committed = [&out_a, &out_b]
                .iter()
                .filter(|o| summary(o)["files"][0]["status"] == "committed")
                .count();
            assert_eq!(
                committed, 1,
                "round {round}: exactly one wins without --overwrite"
            );
        }
    }
    relay.stop().await;
}

/// The Plan must not hand another token the resume offset and hash
/// midstate of a transfer it did not start, nor let it continue that transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_is_private_to_the_token_that_started_it() {
    let container = new_container("private").await;
    let relay = relay_with(&container, |_| {});
    let dir = Scratch::new("private");
    let size = 3 * 5 * MIB + 100;
    let file = dir.path("f.bin");
    let sha = write_random(&file, size, 31);
    let content = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));

    // TOKEN's interrupted transfer: its first two blocks staged as its relay
    // would have staged them (the relay's key, TOKEN as owner).
    let key = relay.shared.storage.id_key.clone();
    let tag = TransferTag::derive(
        &key,
        &Owner::of_token(TOKEN),
        &container,
        "f.bin",
        size,
        5 * MIB,
    );
    let signer = IdSigner::new(key, tag);
    let w = writer(&container, "f.bin");
    let mut h = sha2::Sha256::new();
    for index in 0..2u32 {
        let block =
            &content[(index as usize) * 5 * MIB as usize..(index as usize + 1) * 5 * MIB as usize];
        let follows = Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"));
        h.update(block);
        let id = signer.encode(&BlockId {
            index,
            follows,
            state: BlockState::After(Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"))),
        });
        w.stage_block(&id, bytes::Bytes::copy_from_slice(block))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    let (_c, conn) = Dial::to(&relay).connect().await;
    let plan_for = |token: &'static str| {
        let conn = conn.clone();
        let container = container.clone();
        async move {
            let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
            write_frame(
                &mut send,
                &Message::Offer(offer(token, &container, "f.bin", size)),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            let plan = match read_frame(&mut recv)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
            {
                Message::Plan(p) => p,
                other => panic!("expected a Plan, got {other:?}"),
            };
            (plan, send, recv)
        }
    };
    // The owner is offered its staged prefix (positive control).
    let (own, mut send, _recv) = plan_for(TOKEN).await;
    assert_eq!(own.resume_offset, 10 * MIB);
    let _ = send.reset(0u32.into());
    // Another token learns nothing: offset 0, the empty hash state.
    let (other, mut send, mut recv) = plan_for(LIMITED_TOKEN).await;
    assert_eq!(other.resume_offset, 0);
    assert_eq!(other.checkpoint, Checkpoint::start().to_hex());
    assert_ne!(other.tag, own.tag);
    // ... and cannot start at the owner's offset.
    write_frame(&mut send, &Message::Start(Start::plain(10 * MIB)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        Message::Error(f) => assert_eq!(f.code, Code::InvalidOffer, "{f:?}"),
        other => panic!("expected an Error, got {other:?}"),
    }
    // The other token's own upload of other bytes starts from zero and publishes
    // exactly its bytes; the owner's upload afterwards is refused (exists).
    let other_file = dir.path("other/f.bin");
    std::fs::create_dir_all(dir.path("other")).unwrap_or_else(|e| panic!("{e}"));
    let other_sha = write_random(&other_file, size, 32);
    let out = run_client(
        &upload_args(&relay, &other_file, &container, LIMITED_TOKEN),
        &[],
        T,
    )
    .await;
    let f = &summary(&out)["files"][0];
    assert_eq!(f["status"], "committed", "{f}");
    assert_eq!(f["bytes_resumed"], 0, "{f}");
    assert_eq!(blob_sha(&container, "f.bin").await, (size, other_sha));
    assert_ne!(sha, sha256_file(&other_file));
    relay.stop().await;
}

/// A storage co-writer publishes other bytes under the file's name with the
/// file's SHA-256 in metadata (anyone with a SAS can). "Already committed" must not
/// rest on that: the relay and direct mode both refuse (exists), unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_sha256_metadata_is_not_already_committed() {
    let container = new_container("forgedmeta").await;
    let relay = relay_with(&container, |_| {});
    let dir = Scratch::new("forgedmeta");
    let file = dir.path("f.bin");
    let size = 2 * MIB + 5;
    let sha = write_random(&file, size, 61);
    let junk = bytes::Bytes::from(vec![0x33u8; size as usize]);
    let w = writer(&container, "f.bin");
    w.stage_block(&[9u8; 64], junk.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w.commit(
        vec![vec![9u8; 64]],
        &Commit {
            sha256_hex: &sha,
            seal: "00000000000000000000000000000000",
            content_type: None,
            content_md5: None,
            metadata: &Default::default(),
            condition: &Condition::Always,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let forged = blob_sha(&container, "f.bin").await;

    let out = run_client(&upload_args(&relay, &file, &container, TOKEN), &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(summary(&out)["files"][0]["error"]["code"], "exists");
    let direct = [
        "upload",
        &file.display().to_string(),
        "--json",
        "--direct",
        "--storage-url",
        &shared_azurite().url(),
        "--account-key",
        relay_tests::DEV_KEY,
        "--to",
        &container,
    ]
    .map(str::to_string);
    let out = run_client(&direct, &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(summary(&out)["files"][0]["error"]["code"], "exists");
    assert_eq!(
        blob_sha(&container, "f.bin").await,
        forged,
        "left as it was"
    );
    assert_ne!(forged.1, sha);
    relay.stop().await;
}

/// Direct mode's rule: it resumes, and calls already committed, only what its own
/// key (one per user, `--id-key-file`) signed. Genuine staged blocks are resumed;
/// blocks with the true prefix hashes under another key are not; a re-run of a
/// committed file is recognised by its seal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_resumes_only_its_own_blocks() {
    let container = new_container("directkey").await;
    let dir = Scratch::new("directkey");
    let key_file = dir.path("direct.key");
    let key =
        relay_proto::id_key::IdKey::load_or_create(&key_file).unwrap_or_else(|e| panic!("{e}"));
    let args = |file: &std::path::Path| {
        [
            "upload",
            &file.display().to_string(),
            "--json",
            "--direct",
            "--block-size",
            "5MiB",
            "--storage-url",
            &shared_azurite().url(),
            "--account-key",
            relay_tests::DEV_KEY,
            "--to",
            &container,
            "--id-key-file",
            &key_file.display().to_string(),
        ]
        .map(str::to_string)
    };
    for (name, signer_key, resumed) in [
        ("own.bin", key.clone(), 10 * MIB),
        ("other.bin", relay_proto::id_key::IdKey::random(), 0),
    ] {
        let file = dir.path(name);
        let size = 3 * 5 * MIB + 7;
        let sha = write_random(&file, size, 71);
        let content = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
        let tag = TransferTag::derive(
            &signer_key,
            &Owner::direct(),
            &container,
            name,
            size,
            5 * MIB,
        );
        let signer = IdSigner::new(signer_key, tag);
        let w = writer(&container, name);
        let mut h = sha2::Sha256::new();
        for index in 0..2usize {
            let block = &content[index * 5 * MIB as usize..(index + 1) * 5 * MIB as usize];
            let follows = Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"));
            h.update(block);
            let id = signer.encode(&BlockId {
                index: index as u32,
                follows,
                state: BlockState::After(Checkpoint::of(&h).unwrap_or_else(|| panic!("boundary"))),
            });
            // Own key: the genuine bytes. Another key: junk under the true hashes.
            let data = if resumed > 0 {
                bytes::Bytes::copy_from_slice(block)
            } else {
                bytes::Bytes::from(vec![0xEEu8; block.len()])
            };
            w.stage_block(&id, data)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let out = run_client(&args(&file), &[], T).await;
        let f = &summary(&out)["files"][0];
        assert_eq!(f["status"], "committed", "{f}");
        assert_eq!(f["bytes_resumed"], resumed, "{name}: {f}");
        assert_eq!(blob_sha(&container, name).await, (size, sha.clone()));
        // A re-run finds it committed (sealed with the same key): skipped as
        // identical, nothing sent.
        let out = run_client(&args(&file), &[], T).await;
        let f = &summary(&out)["files"][0];
        assert_eq!(f["status"], "skipped", "{f}");
        assert_eq!(f["reason"], "identical", "{f}");
        assert_eq!(f["bytes_sent"], 0, "{f}");
    }
}

/// The answer to a plain Offer (no bytes follow: the stream is reset after it).
async fn answer_to(conn: &quinn::Connection, o: Offer) -> Message {
    let (mut send, _recv, answer) = open_with_offer(conn, o).await;
    let _ = send.reset(0u32.into());
    answer
}

/// `--overwrite=if-different|if-newer` replace only the version they compared
/// (If-Match its etag). Two users: A compared version 1; B commits version 3;
/// A's replacement is refused (`conflict`) and B's blob stays. A replacement
/// whose own commit moved the etag (its Receipt lost) is recognised by its
/// SHA-256 and the relay's seal, never by another upload's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_one_version_never_replaces_another_writers_commit() {
    let container = new_container("oneversion").await;
    let relay = relay_with(&container, |_| {});
    let dir = Scratch::new("oneversion");
    // Three versions of one file, b.bin.
    let (v1, v2, v3) = (
        dir.path("v1/b.bin"),
        dir.path("v2/b.bin"),
        dir.path("v3/b.bin"),
    );
    let size = 100_000;
    write_random(&v1, size, 71);
    let sha2 = write_random(&v2, size, 72);
    let sha3 = write_random(&v3, size, 73);
    let put = |file: &std::path::Path, token: &str, extra: &[&str]| {
        let mut a = upload_args(&relay, file, &container, token);
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let out = run_client(&put(&v1, TOKEN, &[]), &[], T).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let etag1 = summary(&out)["files"][0]["etag"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // B replaces it, unconditionally.
    let out = run_client(&put(&v3, LIMITED_TOKEN, &["--overwrite"]), &[], T).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let etag3 = summary(&out)["files"][0]["etag"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let (_c, conn) = Dial::to(&relay).connect().await;
    let offer_as = |token: &str, etag: &str, sha: &str| Offer {
        overwrite: Overwrite::IfMatch { etag: etag.into() },
        sha256: Some(sha.into()),
        ..offer(token, &container, "b.bin", size)
    };
    let replacing = |etag: &str, sha: &str| offer_as(TOKEN, etag, sha);
    // A, who compared version 1, may not replace B's version 3; and A, who may
    // not read the container and did not write version 3, is not told which
    // version is there, nor whether it holds the bytes A names: the same
    // plain conflict for version 3's bytes as for others.
    let mut told = Vec::new();
    for sha in [&sha2, &sha3] {
        match answer_to(&conn, replacing(&etag1, sha)).await {
            Message::Reject(f) => {
                assert_eq!(f.code, Code::Conflict, "{f:?}");
                assert_eq!(
                    f.message,
                    format!("the blob changed: it is no longer at etag {etag1}"),
                    "{f:?}"
                );
                told.push(format!("{f:?}"));
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }
    assert_eq!(told[0], told[1]);
    // B, version 3's writer, proving its bytes after "changed" (its Receipt
    // lost) is told "committed": the blob holds exactly them (B's commit,
    // sealed by the relay, B's mark on it).
    match answer_to(&conn, offer_as(LIMITED_TOKEN, &etag1, &sha3)).await {
        Message::Receipt(r) => assert_eq!(r.sha256, sha3),
        other => panic!("expected a Receipt, got {other:?}"),
    }

    // A replaces version 3 through the client; its Receipt "lost", the retry
    // offers the same etag and proves its bytes: already committed, nothing sent.
    let out = run_client(&put(&v2, TOKEN, &["--if-match", &etag3]), &[], T).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    match answer_to(&conn, replacing(&etag3, &sha2)).await {
        Message::Receipt(r) => assert_eq!((r.sha256.as_str(), r.size), (sha2.as_str(), size)),
        other => panic!("expected a Receipt, got {other:?}"),
    }
    // Other bytes under that old etag: a conflict, the blob untouched.
    match answer_to(&conn, replacing(&etag3, &sha3)).await {
        Message::Reject(f) => {
            assert_eq!(f.code, Code::Conflict, "{f:?}");
            assert!(f.message.starts_with("the blob changed"), "{f:?}");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(blob_sha(&container, "b.bin").await, (size, sha2));
    relay.stop().await;
}
