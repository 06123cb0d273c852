//! Resume in the WAN lab: a real 200 ms RTT, 200 Mbit/s path (no loss) between
//! the site namespace (relay-client) and the cloud namespace (Azurite and a
//! relay-server process). An upload capped at 20 Mbit/s is interrupted once
//! Azurite lists its first staged block; a rerun at full speed (whose eager body
//! and Trailer are all sent before the relay's redirect can arrive) must resume
//! from that block. Needs root and /dev/net/tun; prints SKIPPED otherwise.
//! Every wait is on an observable condition with a generous bound; the lab, Azurite
//! and the relay are torn down by their guards even when an assertion fails.

use wanbench::cloud;

#[allow(dead_code)]
mod wan_cloud;

use std::path::Path;
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile};
use relay_tests::files::{Scratch, write_random};
use wan_cloud::{Cloud, LABS, MIB, Proc, spawn_client, wait_blocks};

const CONTAINER: &str = "resume-wan";

/// The client in the site namespace; stdout and stderr to files.
fn client(lab: &Lab, cloud: &Cloud, file: &Path, max_rate: Option<u32>, out: &Path) -> Proc {
    let mut args = cloud.client_args(lab, &[file]);
    args.extend(
        ["--block-size", "16MiB", "--json", "--quiet"]
            .iter()
            .map(|s| s.to_string()),
    );
    if let Some(r) = max_rate {
        args.extend(["--max-rate".to_string(), r.to_string()]);
    }
    spawn_client(lab, &args, out)
}

fn staged_blocks(lab: &Lab, blob: &str) -> usize {
    wan_cloud::staged_blocks(lab, CONTAINER, blob)
}

/// Waits for the client (bounded) and returns its exit code and JSON file entry.
fn finish(c: Proc, out: &Path, limit: Duration) -> (Option<i32>, serde_json::Value) {
    let (code, stdout, stderr) = wan_cloud::wait_client(c, out, limit);
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\nstderr:\n{stderr}"));
    assert_eq!(code, Some(0), "client failed:\n{stderr}\n{stdout}");
    (code, v["files"][0].clone())
}

fn verify(lab: &Lab, blob: &str, sha: &str) {
    let ok = cloud::verify_blobs(lab, CONTAINER, vec![(blob.to_string(), sha.to_string())])
        .unwrap_or_else(|e| panic!("verify: {e:#}"));
    assert_eq!(ok, vec![true], "the blob's downloaded SHA-256 differs");
    assert_eq!(staged_blocks(lab, blob), 0, "uncommitted blocks left");
}

enum Kill {
    Client,
    Relay,
}

/// Uploads a `size` file in 16 MiB blocks at 20 Mbit/s, kills the client or the
/// relay once the first block is staged, and checks the upload is finished with
/// exactly that block resumed.
fn interrupted_upload_resumes(test: &str, size: u64, kill: Kill) {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED {test}: {e:#}");
        return;
    }
    let t0 = Instant::now();
    let lab =
        Lab::start(LinkProfile::new(200.0, 0.0, 200.0)).unwrap_or_else(|e| panic!("lab: {e:#}"));
    let dir = Scratch::new(test);
    let mut cloud = Cloud::start(&lab, &dir.0, CONTAINER);
    let blob = format!("{test}.bin");
    let file = dir.path(&blob);
    let sha = write_random(&file, size, size);
    let out = dir.path("run1");
    let mut c = client(&lab, &cloud, &file, Some(20), &out);
    wait_blocks(&lab, CONTAINER, &blob, 1, &mut c);
    let f = match kill {
        Kill::Client => {
            drop(c); // SIGKILL
            assert_eq!(staged_blocks(&lab, &blob), 1, "only the first block staged");
            // Another upload at full speed first, as a user's earlier runs would: the
            // path cache then starts the rerun warm, so its whole eager body and
            // Trailer are sent before the relay's redirect arrives.
            let warm = dir.path("warm.bin");
            write_random(&warm, 8 * MIB, 7);
            let out = dir.path("warm");
            finish(
                client(&lab, &cloud, &warm, None, &out),
                &out,
                Duration::from_secs(60),
            );
            let out = dir.path("run2");
            let rerun = client(&lab, &cloud, &file, None, &out);
            let (_, f) = finish(rerun, &out, Duration::from_secs(60));
            assert_eq!(f["attempts"], 1, "a redirect must not cost a retry: {f}");
            f
        }
        Kill::Relay => {
            cloud.kill_relay();
            cloud.start_relay(&lab);
            // The client notices the dead connection and retries by itself.
            let (_, f) = finish(c, &out, Duration::from_secs(90));
            assert_eq!(
                f["attempts"], 2,
                "one retry for the lost relay, none for the redirect: {f}"
            );
            f
        }
    };
    assert_eq!(f["status"], "committed", "{f}");
    assert_eq!(f["bytes_resumed"], 16 * MIB, "{f}");
    verify(&lab, &blob, &sha);
    println!("{test}: {f} ({:.1} s)", t0.elapsed().as_secs_f64());
}

/// The reproduction: 24 MiB, client killed after the first 16 MiB block.
#[test]
fn client_killed_rerun_resumes_over_200ms() {
    interrupted_upload_resumes("wanclient", 24 * MIB, Kill::Client);
}

/// The relay SIGKILLed after the first block and restarted with the same key file,
/// certificate and port; the client's own retry finishes the upload.
#[test]
fn relay_killed_client_retry_resumes_over_200ms() {
    interrupted_upload_resumes("wanrelay", 24 * MIB, Kill::Relay);
}

/// A remainder well under one block (3 MiB after a 16 MiB block).
#[test]
fn small_remainder_rerun_resumes_over_200ms() {
    interrupted_upload_resumes("wansmall", 19 * MIB, Kill::Client);
}
