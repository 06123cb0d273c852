//! Test harness: a real Azurite per test process, real relays on loopback QUIC, the
//! real `relay-client` binary, and real files. Shared by the end-to-end tests, the
//! demo and the loopback benchmark.

pub mod azcopy;
pub mod azurite;
pub mod blobs;
pub mod child_lines;
pub mod client_bench;
pub mod datasets;
pub mod download;
pub mod download_client;
pub mod download_local;
pub mod entra_issuer;
pub mod entra_sts;
pub mod files;
pub mod gate;
pub mod hostile;
pub mod hostile_relay;
pub mod http;
pub mod load;
pub mod log_capture;
pub mod outputs;
pub mod paced;
pub mod proxy;
pub mod raw_quic;
pub mod read_faults;
pub mod relay;
pub mod standin;
pub mod sync_folded;
pub mod tls_pipe;
pub mod upload;
pub mod watch;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

/// Azurite's well-known development account and key (public, emulator only).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The workspace's target directory holding the binaries (next to this test binary).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary; builds it once if it is missing (the test command
/// builds all binaries first, so this is a fallback for `cargo test` alone).
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = if bin_dir().ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        let status = std::process::Command::new(cargo)
            .args(["build", "--workspace", "--bin", name])
            .args(profile)
            .status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "could not build {name}; run `cargo build --workspace --bins` first"
        );
    }
    path
}

/// The real `relay-client` with `args`, in the tests' environment, not started
/// (for tests that watch its output while it runs, or signal it).
pub fn client_command(args: &[String], envs: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(binary("relay-client"));
    cmd.args(args).kill_on_drop(true);
    // Only what the test passes: never a token from the caller's environment,
    // nor a profile from the caller's configuration file.
    cmd.env_remove("RELAY_TOKEN");
    cmd.env_remove("RELAY_CONFIG");
    cmd.env_remove("RELAY_PROFILE");
    cmd.env(
        "XDG_CONFIG_HOME",
        std::env::temp_dir().join("blob-relay-tests-no-config"),
    );
    // Keep the tests' path estimates (warm start) out of the user's cache.
    cmd.env(
        "RELAY_PATH_CACHE",
        std::env::temp_dir().join(format!(
            "blob-relay-tests-paths-{}.json",
            std::process::id()
        )),
    );
    // What the client keeps in $XDG_STATE_HOME (a download's index of what it
    // placed) per test process, not in $HOME.
    cmd.env(
        "XDG_STATE_HOME",
        std::env::temp_dir().join(format!("blob-relay-tests-state-{}", std::process::id())),
    );
    // Direct mode's key (resume and seals) per test process, not in $HOME.
    cmd.env(
        "RELAY_ID_KEY_FILE",
        std::env::temp_dir().join(format!(
            "blob-relay-tests-direct-{}.key",
            std::process::id()
        )),
    );
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the real `relay-client` with `args`, bounded in time.
pub async fn run_client(args: &[String], envs: &[(&str, &str)], timeout: Duration) -> Output {
    let mut cmd = client_command(args, envs);
    match tokio::time::timeout(timeout, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("cannot run relay-client: {e}"),
        Err(_) => panic!("relay-client did not finish within {timeout:?}"),
    }
}

/// `client_command` started with its output thrown away, for a test that
/// stops it midway (killed when the handle is dropped).
pub fn spawn_client(args: &[String], envs: &[(&str, &str)]) -> tokio::process::Child {
    client_command(args, envs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn relay-client: {e}"))
}

/// What a run printed on stderr, as text (for assertions and failure messages).
pub fn stderr(out: &Output) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&out.stderr)
}

/// The JSON summary a `--json` run printed.
pub fn summary(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// A child process a test started, killed and reaped when the test ends,
/// also when it fails: no test leaves a process running.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A fresh, unique container name for one test.
pub fn unique_container(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(30)
        .collect();
    format!("t{}-{tag}-{n}", std::process::id())
}

/// A loopback port, free for both TCP and UDP right now, for a server that must
/// listen on an address known before it starts (Azurite, a relay process that is
/// restarted on the same address).
///
/// Why not the kernel's `bind(0)` and release: that port comes from the ephemeral
/// range, where every outgoing connection and every QUIC client of a concurrent
/// test also gets its port, so it can be taken again before our server binds it.
/// Ports below the ephemeral range are never handed out by the kernel; within this
/// process no port is handed out twice.
pub fn reserved_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // Start at 20000 (above well-known services); below `low`, or fall back to
    // 20000..30000 if the ephemeral range was moved down that far.
    let (from, to) = if low > 21_000 {
        (20_000, low)
    } else {
        (20_000, 30_000)
    };
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for _ in 0..10_000 {
        let port = rand::random_range(from..to);
        if given.contains(&port) {
            continue;
        }
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok();
        if free {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port in {from}..{to}");
}
