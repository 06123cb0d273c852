//! `download` and what a listing hands it: the ETag's one form from listing
//! to sidecar to `If-Match`, a listing lost midway and taken up again, and
//! each file's modification time set to its blob's Last-Modified. Through a
//! real relay and Azurite, and with `--direct`.

use relay_tests::azurite::shared_azurite;
use relay_tests::download_client::{direct_flags, files_of, relay_flags, s, setup, upload};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::{run_client, stderr, summary};

const T: std::time::Duration = relay_tests::download_client::T;

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
            std::fs::write(out_dir.path(".e.bin.relay-partial"), &data[..kept as usize])
                .unwrap_or_else(|e| panic!("{e}"));
            let sidecar = serde_json::json!({
                "container": c, "blob": "e.bin", "etag": etag, "size": size,
            });
            std::fs::write(
                out_dir.path(".e.bin.relay-partial.json"),
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
