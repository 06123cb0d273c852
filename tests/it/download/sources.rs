//! Download sources given as blob URLs, against Azurite, through the relay and
//! `--direct`: a URL's path is percent-decoded as storage reads it (`my%20file`
//! is the blob `my file`), a path that decodes to no UTF-8 is a usage error,
//! and in direct mode every URL source must name `--storage-url`'s account,
//! not only the first (a usage error, exit 2, before anything is read).

use relay_tests::DEV_ACCOUNT;
use relay_tests::download_client::{
    T, args_via, direct_flags, files_of, put_raw, relay_flags, setup, tree,
};
use relay_tests::files::{Scratch, sha256_file};
use relay_tests::{run_client, stderr, summary};

/// `CONTAINER/NAME` as a blob URL of `account`, its name percent-encoded.
fn url(account: &str, container: &str, encoded_name: &str) -> String {
    format!("https://{account}.blob.core.windows.net/{container}/{encoded_name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blob_urls_are_percent_decoded_and_every_sources_account_is_checked() {
    let (relay, c) = setup("dlsources", None).await;
    let blobs = [
        ("my file", &b"spaces"[..]),
        ("déjà vu/50%#.txt", &b"more"[..]),
    ];
    for (name, body) in blobs {
        put_raw(&c, name, body).await;
    }
    let sources = [
        url(DEV_ACCOUNT, &c, "my%20file"),
        url(DEV_ACCOUNT, &c, "d%C3%A9j%C3%A0%20vu/50%25%23.txt"),
    ];
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    for (how, way) in [("relay", relay_flags(&relay)), ("direct", direct_flags())] {
        let out_dir = Scratch::new(&format!("dlsrc-{how}"));
        let out = run_client(&args_via(&way, &sources, &out_dir.0, &[]), &[], T).await;
        assert!(out.status.success(), "{how}: {}", stderr(&out));
        // In the order they finished: any.
        let mut done: Vec<String> = files_of(&summary(&out))
            .iter()
            .map(|f| format!("{} {}", f["blob"], f["status"]))
            .collect();
        done.sort();
        assert_eq!(
            done,
            [
                "\"déjà vu/50%#.txt\" \"downloaded\"",
                "\"my file\" \"downloaded\""
            ],
            "{how}"
        );
        // Each source's last segment keeps its name.
        let want: Vec<(String, String)> = vec![
            ("50%#.txt".into(), sha256_of(b"more")),
            ("my file".into(), sha256_of(b"spaces")),
        ];
        assert_eq!(tree(&out_dir.0), want, "{how}");
    }

    // A path that decodes to no UTF-8 is said once, as a usage error.
    let out_dir = Scratch::new("dlsrc-bad");
    let bad = url(DEV_ACCOUNT, &c, "a%FFb");
    let out = run_client(
        &args_via(&relay_flags(&relay), &[&bad], &out_dir.0, &[]),
        &[],
        T,
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let message = summary(&out)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("not UTF-8"), "{message}");

    // Direct mode: the second source is another account's; nothing is read.
    let theirs = url("otheraccount", &c, "d%C3%A9j%C3%A0%20vu/50%25%23.txt");
    let both = [sources[0], theirs.as_str()];
    let out = run_client(&args_via(&direct_flags(), &both, &out_dir.0, &[]), &[], T).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let message = summary(&out)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        message,
        format!(
            "source {theirs:?} names account \"otheraccount\" but --storage-url is account {DEV_ACCOUNT}"
        )
    );
    assert!(tree(&out_dir.0).is_empty(), "{:?}", tree(&out_dir.0));
    // Through the relay, the account is the relay's to know: read as given.
    let out = run_client(
        &args_via(&relay_flags(&relay), &both, &out_dir.0, &[]),
        &[],
        T,
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tree(&out_dir.0).len(), 2, "{:?}", tree(&out_dir.0));
    relay.stop().await;
}

fn sha256_of(data: &[u8]) -> String {
    let dir = Scratch::new("dlsrc-sha");
    let p = dir.path("x");
    std::fs::write(&p, data).unwrap_or_else(|e| panic!("{e}"));
    sha256_file(&p)
}
