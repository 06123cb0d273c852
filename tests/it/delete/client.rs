//! The client's delete primitive (`relay_client::transfer::delete::delete_listed`),
//! as a sync calls it: a blob as the listing gave it, through the relay and
//! straight to storage (`--direct`), each outcome typed; the connection made
//! by the client's own setup from its own flags.

use std::sync::Arc;

use clap::Parser;
use relay_client::commands::ls_args::{LsArgs, mode_flags};
use relay_client::commands::setup::connection::connected;
use relay_client::sign_in::Bearer;
use relay_client::transfer::delete::{DeleteOutcome, delete_listed};
use relay_client::transfer::mode::Mode;
use relay_client::ui::error_code::ErrorCode;
use relay_proto::protocol::Listed;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, put_sealed};
use relay_tests::download_client::direct_flags;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use sha2::{Digest, Sha256};

const DELETER: &str = "deleter-token-0123456789abcdef";

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    ls: LsArgs,
}

/// The client's connection from `flags` (as `ls` would make it).
async fn connect(container: &str, flags: &[String]) -> (Bearer, Mode) {
    let mut argv = vec!["x".to_string(), container.to_string()];
    argv.extend(flags.iter().cloned());
    let f = Flags::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"));
    let quiet = Arc::new(|_: &relay_client::ui::weather::Weather| {});
    connected(&f.ls.connection, &mode_flags(&f.ls), container, quiet)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

fn relay_flags(relay: &RelayHandle, token: &str) -> Vec<String> {
    [
        "--relay",
        &relay.addr.to_string(),
        "--relay-cert-sha256",
        &relay.fingerprint,
        "--token",
        token,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn listed(name: &str, etag: &str) -> Listed {
    Listed {
        name: name.into(),
        size: 0,
        etag: etag.into(),
        last_modified: None,
        sha256: None,
    }
}

/// Each way in turn: the listed version deleted, then gone already; a blob
/// written after the listing kept (and holding its new bytes); through the
/// relay, a token without the delete grant refused with nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_listed_removes_only_the_listed_version_both_ways() {
    let c = new_container("cldel").await;
    let relay = RelayHandle::start(
        relay_tests::azurite::shared_azurite().storage(),
        RelayOptions {
            limited_to: format!("{c}:rw"),
            ..Default::default()
        },
    );
    relay.rewrite_tokens(&format!("{LIMITED_TOKEN} {c}:rw\n{DELETER} {c}:d\n"));
    relay.shared.sign_in.tokens.reload();
    let ways = [
        ("relay", relay_flags(&relay, DELETER)),
        ("direct", direct_flags()),
    ];
    for (way, flags) in ways {
        let (token, mode) = connect(&c, &flags).await;
        let name = format!("{way}/a");
        let etag = put_sealed(&c, &name, b"listed", "00", "none").await;
        let blob = listed(&name, &etag);
        let first = delete_listed(&mode, &token, &c, &blob, 3).await;
        assert!(
            matches!(first, Ok(DeleteOutcome::Deleted)),
            "{way}: {first:?}"
        );
        assert!(!blob_exists(&c, &name).await, "{way}");
        let again = delete_listed(&mode, &token, &c, &blob, 3).await;
        assert!(
            matches!(again, Ok(DeleteOutcome::AlreadyGone)),
            "{way}: {again:?}"
        );

        let name = format!("{way}/b");
        let old = put_sealed(&c, &name, b"old", "00", "none").await;
        let newer = b"written after the listing";
        put_sealed(&c, &name, newer, "00", "none").await;
        let kept = delete_listed(&mode, &token, &c, &listed(&name, &old), 3).await;
        assert!(
            matches!(kept, Ok(DeleteOutcome::Changed)),
            "{way}: {kept:?}"
        );
        let want = (newer.len() as u64, hex::encode(Sha256::digest(newer)));
        assert_eq!(blob_sha(&c, &name).await, want, "{way}");
    }

    // A token that may read and write, but not delete.
    let (token, mode) = connect(&c, &relay_flags(&relay, LIMITED_TOKEN)).await;
    let etag = put_sealed(&c, "w/a", b"kept", "00", "none").await;
    let refused = delete_listed(&mode, &token, &c, &listed("w/a", &etag), 3).await;
    match refused {
        Ok(DeleteOutcome::Refused(e)) => assert_eq!(e.code, ErrorCode::Forbidden, "{e:?}"),
        other => panic!("not refused: {other:?}"),
    }
    assert!(blob_exists(&c, "w/a").await);
    relay.stop().await;
}
