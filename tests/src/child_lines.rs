//! A child process's output read line by line as it comes, and waits for
//! the line a test needs (with a bound only against hangs): for tests that
//! act while a run is provably at some point (a commit held, every byte
//! staged), never after a sleep.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

use crate::proxy::FaultProxy;

/// How long a wait for a line may take before the test fails (a hang).
const T: Duration = Duration::from_secs(120);

/// Lines of a child's pipe, as they come.
pub fn lines<R: AsyncRead + Unpin + Send + 'static>(r: R) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut l = BufReader::new(r).lines();
        while let Ok(Some(line)) = l.next_line().await {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads until a line contains `needle`; returns every line read.
pub async fn until(rx: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> Vec<String> {
    until_line(rx, needle, |l| l.contains(needle)).await
}

/// Reads until a status line says every byte found is staged, the total
/// being whole (`2 files`, not `2+`: the walk, or a sync's merge, has ended)
/// and not empty (a line from before anything was found says `0 B/0 B`).
/// Only then does the client know that the held file's bytes are all in
/// storage and its commit is under way: storage may hold the commit while the
/// relay's last `Progress` frame is still on its way to the client (a Ctrl-C
/// sent in that gap found the file "stopped in flight", once in a CI run).
pub async fn until_all_staged(rx: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    until_line(rx, "status line with every byte staged", |l| {
        let Some(rest) = l.strip_prefix("status: ") else {
            return false;
        };
        let mut fields = rest.split(", ");
        let files = fields.next().unwrap_or_default();
        let bytes = fields.next().unwrap_or_default();
        let whole = files
            .strip_suffix(" files")
            .and_then(|f| f.split_once('/'))
            .is_some_and(|(_, total)| total != "0" && !total.ends_with('+'));
        whole
            && bytes
                .split_once('/')
                .is_some_and(|(done, found)| done == found)
    })
    .await
}

/// Reads until a line matches `hit`; returns every line read.
pub async fn until_line(
    rx: &mut mpsc::UnboundedReceiver<String>,
    needle: &str,
    hit: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(T, async {
        while let Some(line) = rx.recv().await {
            let hit = hit(&line);
            seen.push(line);
            if hit {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "no line with {needle:?} in {seen:?}"
    );
    seen
}

/// Sends Ctrl-C (SIGINT) to a child the test started.
pub fn sigint(child: &tokio::process::Child) {
    let pid = child.id().unwrap_or_else(|| panic!("no pid")) as libc::pid_t;
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
}

/// The client's line while it waits, after Ctrl-C, for commits under way.
pub const WAITING: &str = "Ctrl-C again to exit now";

/// Reads until the client says it waits for commits under way after Ctrl-C,
/// and checks it waits for `files` file(s) whose bytes are all staged.
pub async fn until_waiting_for(
    rx: &mut mpsc::UnboundedReceiver<String>,
    files: usize,
) -> Vec<String> {
    let said = until(rx, WAITING).await;
    let want = format!("for {files} file(s) whose bytes are all staged");
    assert!(said.iter().any(|l| l.contains(&want)), "{said:?}");
    said
}

/// Ctrl-C while `proxy` holds a file's commit: once the line of `first` (a
/// file not held) is on `out`, the commit is held and a status line on `err`
/// says every byte is staged (so the client knows only the commit is left),
/// one SIGINT; the client must say it waits for that one commit and still be
/// running; then the commit goes on.
pub async fn ctrl_c_with_a_commit_held(
    child: &mut tokio::process::Child,
    out: &mut mpsc::UnboundedReceiver<String>,
    err: &mut mpsc::UnboundedReceiver<String>,
    proxy: &FaultProxy,
    first: &str,
) {
    until(out, first).await;
    proxy.wait_held(1, T).await;
    until_all_staged(err).await;
    sigint(child);
    until_waiting_for(err, 1).await;
    assert!(matches!(child.try_wait(), Ok(None)), "still waiting");
    proxy.release();
}
