//! What the user sees while an upload runs, and how it ends: result lines as
//! files finish (not at the end), status lines without a terminal, bars on one
//! (through a pseudo-terminal from `script`), `--json-lines` events, JSON for
//! setup and usage errors, refusals said once (exit 2), size flags as usage
//! errors, Ctrl-C (exit 130 and a rerun that resumes), completions and man page.
//!
//! Nothing here waits on the clock: a file is held mid-commit by the storage
//! proxy (`FaultProxy::hold`) while the test reads what the client already said.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, new_container};
use relay_tests::child_lines::{
    WAITING, ctrl_c_with_a_commit_held, lines, sigint, until, until_all_staged,
};
use relay_tests::files::{Scratch, write_random};
use relay_tests::proxy::{FaultProxy, Op};
use relay_tests::relay::{RelayHandle, RelayOptions, TOKEN, held_at};
use relay_tests::{binary, client_command, run_client};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;

fn s(p: &Path) -> String {
    p.to_str().unwrap_or_default().to_string()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|x| x.to_string()).collect()
}

/// A relay whose Put Block List requests wait until the test releases them.
async fn held_relay() -> (FaultProxy, RelayHandle) {
    held_at(Op::PutBlockList, RelayOptions::default()).await
}

/// Everything a child's pipe says, as raw text (a terminal's redraws included).
fn raw<R: AsyncRead + Unpin + Send + 'static>(
    mut r: R,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let t = text.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                return;
            }
            if let Ok(mut t) = t.lock() {
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    });
    text
}

/// Waits until `text` contains `needle`; returns it then.
async fn until_raw(text: &std::sync::Arc<std::sync::Mutex<String>>, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let now = text.lock().map(|t| t.clone()).unwrap_or_default();
        if now.contains(needle) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {needle:?} in {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A small file (one Put Blob, not held) and a three-block one (its Put Block
/// List is held).
fn two_files(dir: &Scratch) -> (String, String, String, String) {
    let small = dir.path("small.txt");
    let big = dir.path("big.bin");
    let sha_small = write_random(&small, 1000, 1);
    let sha_big = write_random(&big, 11 * MIB, 2);
    (s(&small), sha_small, s(&big), sha_big)
}

/// Two files uploaded by a running client whose big file's commit is held.
struct Held {
    container: String,
    proxy: FaultProxy,
    relay: RelayHandle,
    dir: Scratch,
    sha_small: String,
    sha_big: String,
    child: tokio::process::Child,
    out: mpsc::UnboundedReceiver<String>,
    err: mpsc::UnboundedReceiver<String>,
}

async fn held_upload(tag: &str, extra: &[&str]) -> Held {
    let container = new_container(tag).await;
    let (proxy, relay) = held_relay().await;
    let dir = Scratch::new(tag);
    let (small, sha_small, big, sha_big) = two_files(&dir);
    let mut a = strings(&["upload", &small, &big, "--block-size", "5MiB"]);
    a.extend(strings(extra));
    a.extend(relay.client_args(&container));
    let mut child = client_command(&a, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = lines(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
    let err = lines(child.stderr.take().unwrap_or_else(|| panic!("stderr")));
    Held {
        container,
        proxy,
        relay,
        dir,
        sha_small,
        sha_big,
        child,
        out,
        err,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_stream_as_files_finish_with_status_lines_without_a_terminal() {
    let Held {
        container,
        proxy,
        relay,
        dir: _dir,
        sha_small,
        sha_big,
        mut child,
        mut out,
        mut err,
    } = held_upload("results_st", &["--status-interval", "0.05"]).await;

    // The small file's line arrives while the big one cannot have finished.
    let seen = until(&mut out, "small.txt").await;
    assert!(
        seen[0].starts_with(&format!(
            "committed  {container}/small.txt  1000 bytes  sha256 {sha_small}"
        )),
        "{seen:?}"
    );
    proxy.wait_held(1, T).await;
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "still running while the big file is held"
    );
    let status = until(&mut err, "status: ").await;
    let line = status.last().cloned().unwrap_or_default();
    assert!(
        line.contains("/2 files,") && line.contains("Mbit/s, eta"),
        "{line}"
    );

    proxy.release();
    let rest = until(&mut out, "files committed and verified").await;
    assert!(
        rest.iter()
            .any(|l| l.starts_with(&format!("committed  {container}/big.bin"))),
        "{rest:?}"
    );
    assert!(
        rest.last()
            .is_some_and(|l| l.starts_with("2 of 2 files committed and verified")),
        "{rest:?}"
    );
    let code = child.wait().await.unwrap_or_else(|e| panic!("{e}")).code();
    assert_eq!(code, Some(0));
    assert_eq!(blob_sha(&container, "small.txt").await, (1000, sha_small));
    assert_eq!(blob_sha(&container, "big.bin").await, (11 * MIB, sha_big));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_events_follow_progress() {
    let Held {
        proxy,
        relay,
        dir: _dir,
        sha_small,
        mut child,
        mut out,
        // Kept open: a closed stderr would fail the client's writes to it.
        err: _err,
        ..
    } = held_upload("json_lines", &["--json-lines", "--status-interval", "0.05"]).await;
    let seen = until(&mut out, "small.txt").await;
    proxy.wait_held(1, T).await;
    let events: Vec<serde_json::Value> = seen
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let file = events.last().cloned().unwrap_or_default();
    assert_eq!(file["event"], "file");
    assert_eq!(file["file"]["status"], "committed");
    assert_eq!(file["file"]["sha256"], sha_small.as_str());
    // The count walks beside the upload: `files_total` is final once a status
    // event says `walk_complete` (the held big file keeps the run going until then).
    let status = loop {
        let lines = until(&mut out, "\"status\"").await;
        let status: serde_json::Value =
            serde_json::from_str(lines.last().map(String::as_str).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}"));
        if status["walk_complete"] == true {
            break status;
        }
    };
    assert_eq!(status["files_total"], 2, "{status}");
    assert!(
        status["bytes_done"].as_u64().is_some_and(|b| b >= 1000),
        "{status}"
    );
    proxy.release();
    let last = until(&mut out, "\"summary\"").await;
    let summary: serde_json::Value =
        serde_json::from_str(last.last().map(String::as_str).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["totals"]["committed"], 2);
    assert_eq!(child.wait().await.ok().and_then(|s| s.code()), Some(0));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_cleanly_and_the_printed_command_resumes() {
    let Held {
        container,
        proxy,
        relay,
        dir,
        sha_small,
        sha_big,
        mut child,
        mut out,
        mut err,
    } = held_upload("ctrl_c_sto", &["--status-interval", "0.05"]).await;
    // The big file's every byte is sent and its commit is held in storage,
    // and the client knows its bytes are all staged; after Ctrl-C its commit
    // is under way: the client waits for it, and says so.
    ctrl_c_with_a_commit_held(&mut child, &mut out, &mut err, &proxy, "small.txt").await;
    let said = until(&mut err, "to resume").await;
    let code = child.wait().await.unwrap_or_else(|e| panic!("{e}")).code();
    assert_eq!(code, Some(130));
    // So the report is exact: both committed, nothing left in flight.
    assert!(
        said.iter()
            .any(|l| l
                .contains("interrupted: 2 committed, 0 skipped, 0 failed; 0 stopped in flight")),
        "{said:?}"
    );
    let mut rest = Vec::new();
    while let Some(l) = err.recv().await {
        rest.push(l);
    }
    let rerun = rest
        .iter()
        .find(|l| !l.starts_with("status: "))
        .cloned()
        .unwrap_or_default();
    assert!(
        rerun.contains("--token \"$RELAY_TOKEN\""),
        "the token is not echoed: {rerun}"
    );
    assert!(!rerun.contains(TOKEN));

    // The rerun, run as printed through a shell, finds both done.
    // The command starts with the client as it was invoked (here its full path).
    let rerun = rerun.trim().to_string();
    assert!(rerun.starts_with(&s(&binary("relay-client"))), "{rerun}");
    let out = tokio::process::Command::new("sh")
        .args(["-c", &rerun])
        .env("RELAY_TOKEN", TOKEN)
        .env("RELAY_PATH_CACHE", dir.path("paths.json"))
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["small.txt", "big.bin"] {
        assert!(
            stdout.contains(&format!("skipped    {container}/{name}  (identical)")),
            "{stdout}"
        );
    }
    assert_eq!(blob_sha(&container, "small.txt").await, (1000, sha_small));
    assert_eq!(blob_sha(&container, "big.bin").await, (11 * MIB, sha_big));
    relay.stop().await;
}

/// A second Ctrl-C while the client waits for a commit under way ends it at
/// once (the wait could last up to its bound). Deterministic: the commit is
/// held in storage, and the second signal is sent only after the client said
/// it is waiting, which it does after its handler took the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_exits_at_once() {
    let Held {
        proxy,
        relay,
        dir: _dir,
        mut child,
        mut out,
        mut err,
        ..
    } = held_upload("ctrl_c_two", &["--status-interval", "0.05"]).await;
    until(&mut out, "small.txt").await;
    proxy.wait_held(1, T).await;
    until_all_staged(&mut err).await;
    sigint(&child);
    until(&mut err, WAITING).await;
    sigint(&child);
    let said = until(&mut err, "interrupted again").await;
    let code = child.wait().await.unwrap_or_else(|e| panic!("{e}")).code();
    assert_eq!(code, Some(130), "{said:?}");
    // It left without its report: nothing after the line that says so.
    let mut rest = Vec::new();
    while let Some(l) = err.recv().await {
        rest.push(l);
    }
    assert!(rest.iter().all(|l| !l.contains("to resume")), "{rest:?}");
    proxy.release();
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bars_on_a_terminal_count_the_same_bytes_as_the_total() {
    let container = new_container("tty").await;
    let (proxy, relay) = held_relay().await;
    let dir = Scratch::new("tty");
    let (small, _, big, sha_big) = two_files(&dir);
    let mut a = strings(&[
        &s(&binary("relay-client")),
        "upload",
        &small,
        &big,
        "--block-size",
        "5MiB",
    ]);
    a.extend(relay.client_args(&container));
    let quoted: Vec<String> = a.iter().map(|x| format!("'{x}'")).collect();
    // `script` gives the client a pseudo-terminal and copies what it draws.
    let mut child = tokio::process::Command::new("script")
        .args(["-qfec", &quoted.join(" "), "/dev/null"])
        .env("RELAY_PATH_CACHE", dir.path("paths.json"))
        .env("COLUMNS", "160")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let drawn = raw(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
    proxy.wait_held(1, T).await;
    // Every byte is sent while the commit is held: the big file's bar and the
    // total both reach their whole size, counted the same way.
    until_raw(&drawn, "total").await;
    let text = until_raw(&drawn, "11.00 MiB/11.00 MiB").await;
    assert!(text.contains("big.bin"), "{text}");
    proxy.release();
    let text = until_raw(&drawn, "files committed and verified").await;
    assert!(
        text.contains(&format!("committed  {container}/big.bin")),
        "{text}"
    );
    assert_eq!(child.wait().await.ok().and_then(|s| s.code()), Some(0));
    assert_eq!(blob_sha(&container, "big.bin").await, (11 * MIB, sha_big));
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_bad_flags_are_one_clear_error() {
    let container = new_container("refusal").await;
    let relay = RelayHandle::start(shared_azurite().storage(), RelayOptions::default());
    let dir = Scratch::new("refusal");
    let mut files = Vec::new();
    for i in 0..12 {
        let p = dir.path(&format!("f{i}.bin"));
        write_random(&p, 100, i);
        files.push(s(&p));
    }
    // A wrong token: one setup error (exit 2), not one line per file.
    let mut a = strings(&["upload"]);
    a.extend(files.iter().cloned());
    a.extend(relay.client_args(&container));
    let at = a.iter().position(|x| x == TOKEN).unwrap_or_default();
    a[at] = "wrong-token-0123456789abcdef".into();
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // (Retries of streams the relay cut meanwhile may log warnings; results do not.)
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("relay-client:"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(err.contains("the relay refused the token"), "{err}");
    // The same as JSON.
    a.push("--json".into());
    let out = run_client(&a, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["code"], "setup");

    // Direct mode with a wrong account key: one setup error with the cause, at
    // once, not a retry per file.
    let mut d = strings(&["upload"]);
    d.extend(files.iter().cloned());
    let url = shared_azurite().url();
    let wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==";
    d.extend(strings(&[
        "--direct",
        "--storage-url",
        &url,
        "--account-key",
        wrong_key,
        "--to",
        &container,
    ]));
    let out = run_client(&d, &[], T).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot use the storage credentials"), "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("relay-client:"))
            .count(),
        1,
        "{err}"
    );

    // Size flags: usage errors (exit 2) that explain units, also as JSON.
    for (flag, says) in [
        ("1MiB", "5MiB to 4000MiB"),
        ("8MB", "1000-based"),
        ("8 parsecs", "unknown unit"),
    ] {
        let mut b = strings(&["upload", &files[0], "--block-size", flag]);
        b.extend(relay.client_args(&container));
        let out = run_client(&b, &[], T).await;
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{flag}: {err}");
        b.push("--json".into());
        let out = run_client(&b, &[], T).await;
        assert_eq!(out.status.code(), Some(2));
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["error"]["code"], "usage");
    }
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_man_page_and_version() {
    let run = |args: &[&str]| {
        let a = strings(args);
        async move { run_client(&a, &[], T).await }
    };
    let out = run(&["completions", "bash"]).await;
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--overwrite") && text.contains("complete"),
        "{text}"
    );
    let out = run(&["man"]).await;
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(".ie") || text.contains(".TH"), "{text}");
    let out = run(&["--version"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("relay-client "));
    // --cap-mbps is AzCopy's name for --max-rate.
    let out = run(&[
        "upload",
        "x",
        "--to",
        "c1x",
        "--cap-mbps",
        "0",
        "--relay",
        "127.0.0.1:9",
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("above 0 Mbit/s"));
}

/// Bars, status lines and `--json-lines` status events count what storage
/// holds, as the relay reports it, not what the client queued: with every
/// Put Block held in storage after the relay received every byte, no status
/// event may count any of the big file (the small one, one Put Blob, is done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_counts_what_the_relay_staged_not_what_was_sent() {
    let container = new_container("staged").await;
    let (proxy, relay) = held_at(Op::PutBlock, RelayOptions::default()).await;
    let dir = Scratch::new("staged");
    let (small, _, big, sha_big) = two_files(&dir);
    let mut a = strings(&[
        "upload",
        &small,
        &big,
        "--block-size",
        "5MiB",
        "--json-lines",
        "--status-interval",
        "0.05",
    ]);
    a.extend(relay.client_args(&container));
    let mut child = client_command(&a, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = lines(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
    until(&mut out, "small.txt").await;
    // big.bin's three blocks are all held at storage...
    proxy.wait_held(3, T).await;
    // ...and every byte of it has reached the relay: the client queued it all.
    let received = relay
        .shared
        .metrics
        .bytes_received
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(received >= 11 * MIB, "{received}");
    let status = |line: &str| -> Option<u64> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        (v["event"] == "status").then(|| v["bytes_done"].as_u64().unwrap_or_default())
    };
    // Ten status events from here on (0.05 s apart): a client that counted
    // queued bytes shows 1000 + 11 MiB in them.
    let mut seen = 0;
    while seen < 10 {
        for line in until(&mut out, "\"status\"").await {
            if let Some(done) = status(&line) {
                assert!(done <= 1000, "counted bytes nobody staged: {line}");
                seen += 1;
            }
        }
    }
    proxy.release();
    let rest = until(&mut out, "\"summary\"").await;
    let summary: serde_json::Value =
        serde_json::from_str(rest.last().map(String::as_str).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["totals"]["committed"], 2, "{summary}");
    assert_eq!(child.wait().await.ok().and_then(|s| s.code()), Some(0));
    assert_eq!(blob_sha(&container, "big.bin").await, (11 * MIB, sha_big));
    relay.stop().await;
}
