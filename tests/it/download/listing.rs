//! `download` and what a listing hands it: the ETag's one form from listing
//! to sidecar to `If-Match`, a listing lost midway and taken up again, and
//! each file's modification time set to its blob's Last-Modified. Through a
//! real relay and Azurite, and with `--direct`.

use std::net::SocketAddr;
use std::time::Duration;

use relay_client::download::place::{partial_name, sidecar_name};
use relay_storage::blob::WriterOptions;
use relay_storage::retry::Backoff;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::new_container;
use relay_tests::download_client::{direct_flags, files_of, relay_flags, s, setup, tree, upload};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{run_client, stderr, summary};

const T: Duration = relay_tests::download_client::T;

/// A relay behind the fault proxy that lists two blobs a page and gives up
/// on a storage request after three attempts.
async fn relay_behind_proxy(tag: &str) -> (FaultProxy, RelayHandle, String) {
    relay_behind_proxy_with(tag, relay_server::TestHooks::default()).await
}

async fn relay_behind_proxy_with(
    tag: &str,
    hooks: relay_server::TestHooks,
) -> (FaultProxy, RelayHandle, String) {
    let container = new_container(tag).await;
    let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
    let proxy = FaultProxy::start(azurite, Schedule::seeded(7)).await;
    let writer = WriterOptions {
        backoff: Backoff {
            initial: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            max_attempts: 3,
        },
        patience: relay_storage::watch::Patience::both(Duration::from_secs(10)),
        ..WriterOptions::default()
    };
    let relay = RelayHandle::start(
        shared_azurite().storage_at(&proxy.url(), writer),
        RelayOptions {
            limited_to: format!("{container}:rw"),
            configure: Some(Box::new(|cfg| cfg.storage.download.list_page = 2)),
            hooks,
            ..Default::default()
        },
    );
    (proxy, relay, container)
}

/// Page two failing past the relay's retries, once.
fn second_page_fails() -> Schedule {
    Schedule {
        script: vec![
            (Op::ListBlobs, Fault::Delay(Duration::ZERO)),
            (Op::ListBlobs, Fault::ServerBusy),
            (Op::ListBlobs, Fault::ServerBusy),
            (Op::ListBlobs, Fault::ServerBusy),
        ],
        ..Schedule::seeded(7)
    }
}

/// A listing taken up at its marker by a relay that starts it over instead
/// (one from before markers, met after a relay that hands them on, as in a
/// rolling upgrade): the client stops that stream at its first frame, so no
/// name is handed on twice, tries again within `--attempts`, and then fails
/// the listing with a message that says why. Exit 1; what was listed before
/// is downloaded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_starts_a_listing_over_hands_on_no_name_twice() {
    let hooks = relay_server::TestHooks {
        forgets_list_markers: true,
        ..Default::default()
    };
    let (proxy, relay, c) = relay_behind_proxy_with("dl-forget", hooks).await;
    let src = Scratch::new("dl-fsrc");
    let mut want = Vec::new();
    for i in 0..5u64 {
        let name = format!("f{i}.bin");
        let sha = write_random(&src.path(&format!("run/{name}")), 1000 + i, i);
        want.push((format!("run/{name}"), sha));
    }
    upload(&relay, &src.path("run"), &c).await;
    proxy.set_schedule(second_page_fails());
    let out_dir = Scratch::new("dl-fout");
    let mut a = s(&["download", &format!("{c}/run"), "--to"]);
    a.extend(s(&[out_dir.0.to_str().unwrap_or_default(), "--json"]));
    a.extend(s(&["--attempts", "2"]));
    a.extend(relay_flags(&relay));
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = summary(&out);
    let mut downloaded = Vec::new();
    let mut failed = Vec::new();
    for f in files_of(&v) {
        match f["status"].as_str() {
            Some("downloaded") => {
                downloaded.push(f["blob"].as_str().unwrap_or_default().to_string())
            }
            Some("failed") => failed.push(f["error"].clone()),
            _ => panic!("{f}"),
        }
    }
    downloaded.sort();
    assert_eq!(
        downloaded,
        ["run/f0.bin", "run/f1.bin"],
        "page one, once each"
    );
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["code"], "protocol", "{failed:?}");
    let why = failed[0]["message"].as_str().unwrap_or_default();
    assert!(why.contains("started the listing over"), "{why}");
    assert_eq!(
        tree(&out_dir.path("run")),
        want[..2]
            .iter()
            .map(|(n, sha)| (n.trim_start_matches("run/").to_string(), sha.clone()))
            .collect::<Vec<_>>()
    );
    relay.stop().await;
}

/// Storage fails the listing's second page past the relay's retries: the
/// relay's List stream ends with an error midway. The client takes the
/// listing up again and every blob is downloaded once, none twice, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_lost_midway_is_taken_up_again() {
    let (proxy, relay, c) = relay_behind_proxy("dl-relist").await;
    let src = Scratch::new("dl-lsrc");
    let mut want = Vec::new();
    for i in 0..5u64 {
        let name = format!("f{i}.bin");
        want.push((
            name.clone(),
            write_random(&src.path(&format!("run/{name}")), 1000 + i, i),
        ));
    }
    upload(&relay, &src.path("run"), &c).await;
    // Page 1 goes through; page 2 fails all three of the relay's attempts.
    let lists_before = proxy.stats.requests_of(Op::ListBlobs);
    proxy.set_schedule(second_page_fails());
    let out_dir = Scratch::new("dl-lout");
    let mut a = s(&["download", &format!("{c}/run"), "--to"]);
    a.extend(s(&[out_dir.0.to_str().unwrap_or_default(), "--json"]));
    a.extend(relay_flags(&relay));
    let out = run_client(&a, &[], T).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let v = summary(&out);
    let mut names: Vec<String> = files_of(&v)
        .iter()
        .map(|f| {
            assert_eq!(f["status"], "downloaded", "{f}");
            f["blob"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    names.sort();
    let wanted: Vec<String> = want.iter().map(|(n, _)| format!("run/{n}")).collect();
    assert_eq!(names, wanted, "each blob once");
    for (name, sha) in &want {
        assert_eq!(
            &sha256_file(&out_dir.path(&format!("run/{name}"))),
            sha,
            "{name}"
        );
    }
    // Three pages, the second failed three times, then the listing taken
    // up at the first page's marker: pages two and three.
    let lists = proxy.stats.requests_of(Op::ListBlobs) - lists_before;
    assert_eq!(lists, 1 + 3 + 2, "{lists}");
    relay.stop().await;
}

/// The listing names a blob's ETag as Get Blob Properties (and so `If-Match`
/// and the Source the sidecar records) does: quoted. A partial file whose
/// sidecar holds it either way (Azure's List Blobs writes it bare, a header
/// quoted) resumes from its length, through the relay and with `--direct`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_resumes_whichever_form_its_sidecar_keeps_the_etag_in() {
    let (relay, c) = setup("dl-etag", None).await;
    let src = Scratch::new("dl-esrc");
    let size: u64 = (5 << 20) + 123;
    let sha = write_random(&src.path("e.bin"), size, 5);
    upload(&relay, &src.path("e.bin"), &c).await;
    let data = std::fs::read(src.path("e.bin")).unwrap_or_else(|e| panic!("{e}"));

    let storage = shared_azurite().storage();
    let page = storage
        .lister(&c)
        .unwrap_or_else(|e| panic!("{e}"))
        .page("", None, 10)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let props = storage
        .reader(&c, "e.bin")
        .unwrap_or_else(|e| panic!("{e}"))
        .properties()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(page.blobs.len(), 1);
    assert_eq!(page.blobs[0].etag, props.etag, "one form in both");
    assert!(props.etag.starts_with('"'), "{}", props.etag);

    let bare = props.etag.trim_matches('"').to_string();
    let kept: u64 = (2 << 20) + 7;
    for (way, flags) in [("relay", relay_flags(&relay)), ("direct", direct_flags())] {
        for etag in [props.etag.clone(), bare.clone()] {
            let out_dir = Scratch::new("dl-eout");
            std::fs::write(
                out_dir.path(&partial_name(&c, "e.bin")),
                &data[..kept as usize],
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let sidecar = serde_json::json!({
                "container": c, "blob": "e.bin", "etag": etag, "size": size,
            });
            std::fs::write(
                out_dir.path(&sidecar_name(&c, "e.bin")),
                sidecar.to_string(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let mut a = s(&["download", &format!("{c}/e.bin"), "--to"]);
            a.extend(s(&[out_dir.0.to_str().unwrap_or_default(), "--json"]));
            a.extend(flags.iter().cloned());
            let out = run_client(&a, &[], T).await;
            assert!(out.status.success(), "{way} {etag}: {}", stderr(&out));
            let v = summary(&out);
            let f = &files_of(&v)[0];
            assert_eq!(f["status"], "downloaded", "{way} {etag}: {f}");
            assert_eq!(f["bytes_resumed"], kept, "{way} {etag}: {f}");
            assert_eq!(f["etag"].as_str(), Some(props.etag.as_str()), "{f}");
            assert_eq!(sha256_file(&out_dir.path("e.bin")), sha, "{way} {etag}");
        }
    }
    relay.stop().await;
}

/// Each downloaded file's modification time is its blob's Last-Modified (to
/// the second, as storage keeps it), through the relay and with `--direct`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downloaded_file_has_its_blobs_last_modified_as_mtime() {
    let (relay, c) = setup("dl-mtime", None).await;
    let src = Scratch::new("dl-msrc");
    write_random(&src.path("m/a.bin"), 5000, 1);
    write_random(&src.path("m/b/c.bin"), (4 << 20) + 9, 2);
    upload(&relay, &src.path("m"), &c).await;
    let storage = shared_azurite().storage();
    for (way, flags) in [("relay", relay_flags(&relay)), ("direct", direct_flags())] {
        let out_dir = Scratch::new("dl-mout");
        let mut a = s(&["download", &format!("{c}/m"), "--to"]);
        a.extend(s(&[out_dir.0.to_str().unwrap_or_default(), "--json"]));
        a.extend(flags.iter().cloned());
        let out = run_client(&a, &[], T).await;
        assert!(out.status.success(), "{way}: {}", stderr(&out));
        for name in ["m/a.bin", "m/b/c.bin"] {
            let props = storage
                .reader(&c, name)
                .unwrap_or_else(|e| panic!("{e}"))
                .properties()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let blob = props
                .last_modified
                .unwrap_or_else(|| panic!("{name}: no Last-Modified"));
            let mtime = std::fs::metadata(out_dir.path(name))
                .and_then(|m| m.modified())
                .unwrap_or_else(|e| panic!("{e}"))
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_else(|e| panic!("{e}"));
            // Exactly the blob's second: a file stamped at its download would
            // carry the nanoseconds of that moment.
            assert_eq!(mtime, Duration::from_secs(blob), "{way} {name}");
        }
    }
    relay.stop().await;
}
