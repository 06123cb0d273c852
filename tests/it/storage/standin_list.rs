//! The stand-in storage's List Blobs (what `syncbench --storage standin`
//! measures against) serves the relay's listing and direct mode's alike:
//! the storage crate's `Lister` pages through it by its markers in the
//! service's order (UTF-16: an emoji before a fullwidth character), with
//! the relay's seal in each blob's metadata; and `relay-client ls` and
//! `relay-client sync`, through a real relay and with `--direct`, run
//! against it as against Azurite: every file sent once, its blob's SHA-256
//! that of the file, an unchanged re-run reading and sending nothing.

use relay_tests::download_client::{T, relay_flags, s};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{DEV_ACCOUNT, DEV_KEY, run_client, stderr};

use crate::sync::{ok, sync};

/// The tree: names whose UTF-8 and UTF-16 orders differ, a folder, sizes.
const FILES: &[(&str, u64, u64)] = &[
    ("\u{FF01}.txt", 100, 1),
    ("\u{1F600}.txt", 2000, 2),
    ("a/x.bin", 70_000, 3),
    ("a.b", 0, 4),
    ("z", 10, 5),
];

/// The blob names under `prefix` in the service's order.
fn listed_order(prefix: &str) -> Vec<String> {
    let order = ["a.b", "a/x.bin", "z", "\u{1F600}.txt", "\u{FF01}.txt"];
    order.iter().map(|n| format!("{prefix}/{n}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_and_sync_run_against_the_standin_through_the_relay_and_direct() {
    relay_transport::install_crypto_provider();
    let (storage, addr) = super::standin::start_with(Default::default()).await;
    storage.ensure_container("cnt").await.expect("container");
    let dir = Scratch::new("standin-list");
    let root = dir.path("src");
    for (name, size, seed) in FILES {
        write_random(&root.join(name), *size, *seed);
    }
    let src = format!("{}/", root.display());
    let relay = RelayHandle::start(
        storage.clone(),
        RelayOptions {
            limited_to: "cnt:rw".into(),
            ..RelayOptions::default()
        },
    );
    let direct = s(&[
        "--direct",
        "--storage-url",
        &format!("http://{addr}/{DEV_ACCOUNT}"),
        "--account-key",
        DEV_KEY,
    ]);
    for (prefix, way) in [("p", relay_flags(&relay)), ("d", direct)] {
        let dest = format!("cnt/{prefix}");
        let index = dir.path(&format!("index-{prefix}.sqlite"));
        let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
        assert_eq!(ok(&out, &v)["sent"], FILES.len(), "{prefix}: {v}");
        let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
        let y = ok(&out, &v);
        assert_eq!(
            (y["sent"].as_u64(), y["bytes_read"].as_u64()),
            (Some(0), Some(0)),
            "{prefix}: an unchanged re-run: {v}"
        );
        assert_eq!(y["skipped_unchanged"], FILES.len(), "{prefix}: {v}");
        for (name, ..) in FILES {
            let w = storage
                .writer("cnt", &format!("{prefix}/{name}"))
                .expect("w");
            let (_, sha) = w.content_sha256().await.expect("blob");
            assert_eq!(hex::encode(sha), sha256_file(&root.join(name)), "{name}");
        }

        let mut args = s(&["ls", &dest, "--json"]);
        args.extend(way.iter().cloned());
        let out = run_client(&args, &[], T).await;
        assert!(out.status.success(), "ls: {}", stderr(&out));
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        let names: Vec<&str> = lines.iter().filter_map(|l| l["name"].as_str()).collect();
        assert_eq!(names, listed_order(prefix), "{prefix}: ls order");
        let big = lines
            .iter()
            .find(|l| l["name"] == format!("{prefix}/a/x.bin"))
            .expect("listed");
        assert_eq!(big["size"], 70_000);
        // Through the relay the seal in each blob's listed metadata vouches
        // for its SHA-256; direct mode holds no relay key to check one with.
        if prefix == "p" {
            let want = sha256_file(&root.join("a/x.bin"));
            assert_eq!(big["sha256"].as_str(), Some(want.as_str()), "{big}");
        }
    }
    relay.stop().await;
}

/// Page by page, two names at a time, by the markers the stand-in hands
/// out: every blob once, in UTF-16 order, with the relay's seal that holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lister_pages_by_markers_in_utf16_order_with_seals() {
    use bytes::Bytes;
    use relay_storage::store::{Commit, Condition};
    use sha2::{Digest, Sha256};
    relay_transport::install_crypto_provider();
    let (storage, _) = super::standin::start_with(Default::default()).await;
    storage.ensure_container("c").await.expect("container");
    let meta = std::collections::BTreeMap::new();
    let mut want = listed_order("p");
    want.push("q/outside".into());
    for name in &want {
        let data = Bytes::from(name.clone().into_bytes());
        let sha = hex::encode(Sha256::digest(&data));
        let commit = Commit {
            sha256_hex: &sha,
            seal: "a-seal",
            content_type: None,
            content_md5: None,
            metadata: &meta,
            condition: &Condition::IfAbsent,
        };
        let w = storage.writer("c", name).expect("writer");
        w.put_blob(data, &commit).await.expect("put");
    }
    want.pop();
    let lister = storage.lister("c").expect("lister").with_seals();
    let (mut marker, mut seen, mut pages) = (None::<String>, Vec::new(), 0);
    loop {
        let page = lister.page("p/", marker.as_deref(), 2).await.expect("page");
        pages += 1;
        assert!(page.blobs.len() <= 2);
        for b in &page.blobs {
            assert_eq!(b.size, b.name.len() as u64);
            assert_eq!(b.seal.as_deref(), Some("a-seal"), "{}", b.name);
            let sha = hex::encode(Sha256::digest(b.name.as_bytes()));
            assert_eq!(b.sha256.as_deref(), Some(sha.as_str()));
        }
        seen.extend(page.blobs.into_iter().map(|b| b.name));
        match page.next_marker {
            Some(m) => marker = Some(m),
            None => break,
        }
    }
    assert_eq!(seen, want);
    assert_eq!(pages, 3);
}
