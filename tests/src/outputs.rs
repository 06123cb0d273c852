//! What runs of the real binaries leave for people to read (stdout, stderr,
//! log files, files they write), gathered to be searched for what must never
//! be there; and the ways a test ends a run so that it prints what it prints
//! when stopped: Ctrl-C while a storage request is held, SIGTERM once a watch
//! reported a commit.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::client_command;
use crate::proxy::{FaultProxy, Op};

/// Every text the runs left, by where it came from.
#[derive(Default)]
pub struct Seen(Vec<(String, String)>);

impl Seen {
    pub fn text(&mut self, label: &str, text: &str) {
        self.0.push((label.to_string(), text.to_string()));
    }

    pub fn output(&mut self, label: &str, out: &Output) {
        let (o, e) = (&out.stdout, &out.stderr);
        self.text(&format!("{label}: stdout"), &String::from_utf8_lossy(o));
        self.text(&format!("{label}: stderr"), &String::from_utf8_lossy(e));
    }

    /// Every file under `path` (a file or a folder), as text.
    pub fn files(&mut self, label: &str, path: &Path) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                self.files(label, &entry.path());
            }
        } else if let Ok(bytes) = std::fs::read(path) {
            let label = format!("{label}: {}", path.display());
            self.text(&label, &String::from_utf8_lossy(&bytes));
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a text whose label starts with `label` contains `needle`.
    pub fn any(&self, label: &str, needle: &str) -> bool {
        self.0
            .iter()
            .any(|(l, t)| l.starts_with(label) && t.contains(needle))
    }

    /// Every (text, secret) pair found, with some context, and every text
    /// holding a SAS signature other than `sig=REDACTED`.
    pub fn leaks(&self, secrets: &[(&str, String)]) -> Vec<String> {
        let mut found = Vec::new();
        for (label, text) in &self.0 {
            for (what, secret) in secrets {
                if let Some(at) = text.find(secret.as_str()) {
                    let from = text[..at]
                        .char_indices()
                        .rev()
                        .nth(80)
                        .map_or(0, |(i, _)| i);
                    let context: String = text[from..].chars().take(200).collect();
                    found.push(format!("{what} in {label}: ...{context}..."));
                }
            }
            if relay_proto::logsafe::hide_sas_signatures(text) != text.as_str() {
                found.push(format!("a SAS signature in {label}"));
            }
        }
        found
    }
}

/// Everything a pipe says until it closes.
pub async fn drain<R: AsyncRead + Unpin>(pipe: Option<R>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(mut p) = pipe {
        let _ = p.read_to_end(&mut buf).await;
    }
    buf
}

fn signal(child: &tokio::process::Child, sig: libc::c_int) {
    let pid = child.id().unwrap_or_else(|| panic!("no pid")) as libc::pid_t;
    // SAFETY: signalling our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// The client with `args` and `env`, interrupted by one Ctrl-C once `proxy`
/// holds its first request of `op` (the proxy then lets it go).
pub async fn interrupted(
    args: &[String],
    env: &[(&str, &str)],
    proxy: &FaultProxy,
    op: Op,
    limit: Duration,
) -> Output {
    proxy.hold(op);
    let mut child = client_command(args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = tokio::spawn(drain(child.stdout.take()));
    let stderr = tokio::spawn(drain(child.stderr.take()));
    proxy.wait_held(1, limit).await;
    signal(&child, libc::SIGINT);
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("no exit after Ctrl-C"))
        .unwrap_or_else(|e| panic!("{e}"));
    proxy.release();
    Output {
        status,
        stdout: stdout.await.unwrap_or_default(),
        stderr: stderr.await.unwrap_or_default(),
    }
}

/// A `watch ... --json-lines` with `args`, stopped by SIGTERM once it
/// reported a committed file.
pub async fn watched_until_commit(
    args: &[String],
    env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut child = client_command(args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let stderr = tokio::spawn(drain(child.stderr.take()));
    let mut stdout = Vec::new();
    let committed = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            let n = out.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            stdout.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&stdout).contains("\"committed\"") {
                return true;
            }
        }
    })
    .await;
    let said = String::from_utf8_lossy(&stdout).to_string();
    assert!(matches!(committed, Ok(true)), "no commit: {said}");
    signal(&child, libc::SIGTERM);
    let _ = out.read_to_end(&mut stdout).await;
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the watch did not stop"))
        .unwrap_or_else(|e| panic!("{e}"));
    Output {
        status,
        stdout,
        stderr: stderr.await.unwrap_or_default(),
    }
}
