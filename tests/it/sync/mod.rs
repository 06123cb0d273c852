//! `relay-client sync` end to end, both ways: the real client binary, a
//! real relay on loopback QUIC (or `--direct`), a real Azurite, real files.
//! Every blob and every file is checked by its SHA-256; "unchanged costs
//! nothing" is checked by the client's own count of the bytes it read
//! (`sync.bytes_read` in the JSON summary) and by the blobs' ETags and the
//! relay's counters staying as they were.

mod deletes;
mod download;
mod early;
mod interrupt;
mod names;
mod status;
mod upload;
mod wide;

use std::path::{Path, PathBuf};

use relay_tests::blobs::{new_container, writer};
use relay_tests::child_lines::lines;
use relay_tests::download_client::{T, relay_flags, s};
use relay_tests::files::Scratch;
use relay_tests::proxy::{FaultProxy, Op};
use relay_tests::relay::{RelayHandle, RelayOptions, held_at};
use relay_tests::{client_command, stderr, summary};
use tokio::sync::mpsc::UnboundedReceiver;

/// `sync SRC DEST --json --index INDEX EXTRA WAY`; its output and summary.
pub async fn sync(
    way: &[String],
    src: &str,
    dest: &str,
    index: &Path,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let args = sync_args(way, src, dest, index, extra);
    let out = tokio::time::timeout(T, client_command(&args, &[]).output())
        .await
        .unwrap_or_else(|_| panic!("sync did not finish within {T:?}"))
        .unwrap_or_else(|e| panic!("cannot run relay-client: {e}"));
    let v = summary(&out);
    (out, v)
}

pub fn sync_args(
    way: &[String],
    src: &str,
    dest: &str,
    index: &Path,
    extra: &[&str],
) -> Vec<String> {
    let mut a = s(&["sync", src, dest, "--json", "--index"]);
    a.push(index.display().to_string());
    a.extend(s(extra));
    a.extend(way.iter().cloned());
    a
}

/// A run that must have succeeded: its `sync` counts.
pub fn ok(out: &std::process::Output, v: &serde_json::Value) -> serde_json::Value {
    assert!(out.status.success(), "{}\n{v}", stderr(out));
    v["sync"].clone()
}

/// Each blob's ETag, in name order.
pub async fn etags(container: &str, blobs: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for b in blobs {
        let p = writer(container, b)
            .properties()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no blob {b}"));
        out.push(p.etag);
    }
    out
}

/// Removes an index and its write-ahead log.
pub fn forget_index(index: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = index.as_os_str().to_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// A new container, and a relay whose storage requests of `op` the proxy
/// holds until the test releases them; `relay_flags`' token may read the
/// container (the listing) and write it.
pub async fn held_relay(tag: &str, op: Op) -> (String, FaultProxy, RelayHandle) {
    let container = new_container(tag).await;
    let opts = RelayOptions {
        limited_to: format!("{container}:rw"),
        ..RelayOptions::default()
    };
    let (proxy, relay) = held_at(op, opts).await;
    (container, proxy, relay)
}

/// The client started with `args`, its stdout and stderr read as lines (keep
/// both: a closed stderr would fail the client's writes to it).
pub fn spawn_lines(
    args: &[String],
) -> (
    tokio::process::Child,
    UnboundedReceiver<String>,
    UnboundedReceiver<String>,
) {
    let mut child = client_command(args, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = lines(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
    let err = lines(child.stderr.take().unwrap_or_else(|| panic!("stderr")));
    (child, out, err)
}

/// A folder synced once to `CONTAINER/p` through a relay, as a test goes on
/// from there.
pub struct Synced {
    /// Held: the scratch dir goes when the test's `Synced` does.
    pub _dir: Scratch,
    pub root: PathBuf,
    pub index: PathBuf,
    /// SRC and DEST as the client takes them.
    pub src: String,
    pub dest: String,
    /// The relay's connection flags.
    pub way: Vec<String>,
}

/// `make` fills the folder `src` of a new scratch dir; it is synced once
/// through `relay` to `container/p`, which must succeed.
pub async fn synced_once(
    relay: &RelayHandle,
    container: &str,
    tag: &str,
    make: impl FnOnce(&Path),
) -> (Synced, serde_json::Value) {
    let dir = Scratch::new(tag);
    let root = dir.path("src");
    make(&root);
    let index = dir.path("index.sqlite");
    let (src, dest) = (format!("{}/", root.display()), format!("{container}/p"));
    let way = relay_flags(relay);
    let (out, v) = sync(&way, &src, &dest, &index, &[]).await;
    let counts = ok(&out, &v);
    let synced = Synced {
        _dir: dir,
        root,
        index,
        src,
        dest,
        way,
    };
    (synced, counts)
}
