//! A file swapped for a symbolic link after the walk saw it is refused when
//! the upload opens it, not sent as the link's target (someone who may write
//! in the source folder must not get a run to upload a file only the user
//! can read). Deterministic without timing: direct mode's first storage
//! request for the file (its resume probe, Get Block List) is held by the
//! fault proxy after the walk and the first open took the file as regular;
//! the swap happens while it is held, and the staging's open finds the link.

use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, new_container};
use relay_tests::download_client::direct_flags_at;
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::upload::Upload;
use relay_tests::{client_command, summary};

const MIB: u64 = 1 << 20;
const T: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_swapped_for_a_link_before_it_is_read_is_refused_and_nothing_is_sent() {
    let container = new_container("linkswap").await;
    let upstream = format!("127.0.0.1:{}", shared_azurite().port)
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let proxy = FaultProxy::start(upstream, Schedule::seeded(1)).await;
    proxy.hold(Op::GetBlockList);
    let dir = Scratch::new("linkswap");
    let secret = dir.path("secret.bin");
    write_random(&secret, 2 * 5 * MIB + 77, 71);
    let file = dir.path("d.bin");
    write_random(&file, 2 * 5 * MIB + 77, 72);
    let mut args = Upload::file(&file)
        .json()
        .block_size("5MiB")
        .to(&container)
        .args();
    args.extend(direct_flags_at(&proxy.url()));
    args.push("--id-key-file".into());
    args.push(dir.path("direct.key").display().to_string());
    let child = client_command(&args, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    // The file was walked and opened as a regular file; its upload waits on
    // the probe. Now it becomes a link to the secret.
    proxy.wait_held(1, T).await;
    std::fs::remove_file(&file).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&secret, &file).unwrap_or_else(|e| panic!("{e}"));
    proxy.release();
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(1));
    let report = summary(&out);
    assert_eq!(report["files"][0]["status"], "failed", "{report}");
    assert_eq!(report["files"][0]["error"]["code"], "symlink", "{report}");
    // Nothing of the target (nor of anything) was staged or committed.
    assert!(!blob_exists(&container, "d.bin").await);
    assert_eq!(proxy.stats.requests_of(Op::PutBlock), 0);
    assert_eq!(proxy.stats.requests_of(Op::PutBlockList), 0);
}
