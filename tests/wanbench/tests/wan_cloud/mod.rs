//! What the WAN-lab end-to-end tests share: the cloud side (Azurite and a relay
//! that can be killed and restarted with the same key, certificate and port),
//! the client in the site namespace with its output in files, and checks
//! against storage (a test file declares the modules `cloud`, `storage_delay`
//! and `cpu_split` from `../src` at its root, as `outage_wan.rs` does). Every process is a child killed (by pid) and reaped on drop.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use linklab::{Lab, Side};
use relay_tests::{DEV_ACCOUNT, DEV_KEY, binary};

use wanbench::cloud;

pub const MIB: u64 = 1 << 20;
pub const RELAY_PORT: u16 = 4433;
const AZURITE_PORT: u16 = 10000;

/// One lab at a time (2 cores; each lab's forwarder is a busy thread).
pub static LABS: Mutex<()> = Mutex::new(());

/// A child we started, SIGKILLed (by pid) and reaped on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// The cloud side: Azurite, and a relay that can be killed and restarted with the
/// same key file, certificate and port. Field order is drop order.
pub struct Cloud {
    relay: Option<Proc>,
    _azurite: Proc,
    pub fingerprint: String,
    pub dir: PathBuf,
    pub container: String,
}

impl Cloud {
    pub fn start(lab: &Lab, dir: &Path, container: &str) -> Self {
        let mut az = Command::new(relay_tests::azurite::azurite_bin());
        az.args(["--blobHost", "0.0.0.0", "--blobPort"])
            .arg(AZURITE_PORT.to_string())
            .args([
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--silent",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut az);
        let azurite = Proc(
            lab.spawn_in(Side::Cloud, az)
                .unwrap_or_else(|e| panic!("azurite: {e:#}")),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while !lab
            .run_in(Side::Cloud, || {
                Ok(std::net::TcpStream::connect(("127.0.0.1", AZURITE_PORT)).is_ok())
            })
            .unwrap_or(false)
        {
            assert!(Instant::now() < deadline, "Azurite did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        cloud::ensure_container(lab, container).unwrap_or_else(|e| panic!("container: {e:#}"));

        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .unwrap_or_else(|e| panic!("rcgen: {e}"));
        std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("key.pem"), ck.signing_key.serialize_pem())
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("tokens"), format!("{}\n", cloud::TOKEN))
            .unwrap_or_else(|e| panic!("{e}"));
        let fingerprint = relay_transport::tls::format_fingerprint(
            &relay_transport::tls::fingerprint(ck.cert.der()),
        );
        let mut c = Cloud {
            relay: None,
            _azurite: azurite,
            fingerprint,
            dir: dir.to_path_buf(),
            container: container.to_string(),
        };
        c.start_relay(lab);
        c
    }

    /// (Re)starts the relay: same port, certificate and `--id-key-file`.
    pub fn start_relay(&mut self, lab: &Lab) {
        self.start_relay_at(lab, lab.addr(Side::Cloud));
    }

    /// As `start_relay`, listening on `addr` (one of the cloud's).
    pub fn start_relay_at(&mut self, lab: &Lab, addr: std::net::Ipv4Addr) {
        let fp_file = self.dir.join("relay.sha256");
        let _ = std::fs::remove_file(&fp_file);
        let mut relay = Command::new(binary("relay-server"));
        relay
            .arg("--listen")
            .arg(format!("{addr}:{RELAY_PORT}"))
            .arg("--storage-url")
            .arg(format!("http://127.0.0.1:{AZURITE_PORT}/{DEV_ACCOUNT}"))
            .arg("--tokens")
            .arg(self.dir.join("tokens"))
            .arg("--id-key-file")
            .arg(self.dir.join("id.key"))
            .arg("--tls-cert")
            .arg(self.dir.join("cert.pem"))
            .arg("--tls-key")
            .arg(self.dir.join("key.pem"))
            .arg("--cert-fingerprint-file")
            .arg(&fp_file)
            .env("RELAY_ACCOUNT_KEY", DEV_KEY)
            .env_remove("RELAY_HEALTH_LISTEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("relay.err"))
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        cloud::strip_proxies(&mut relay);
        die_with_parent(&mut relay);
        let mut p = Proc(
            lab.spawn_in(Side::Cloud, relay)
                .unwrap_or_else(|e| panic!("relay: {e:#}")),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&fp_file).map_or(true, |s| s.trim().is_empty()) {
            if let Ok(Some(s)) = p.0.try_wait() {
                panic!("relay-server exited at start: {s}; {}", self.relay_err());
            }
            assert!(Instant::now() < deadline, "relay-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.relay = Some(p);
    }

    /// The relay's pid while it runs (for its CPU time).
    pub fn relay_pid(&self) -> Option<u32> {
        self.relay.as_ref().map(|p| p.0.id())
    }

    pub fn azurite_pid(&self) -> u32 {
        self._azurite.0.id()
    }

    pub fn kill_relay(&mut self) {
        // Proc's drop: SIGKILL by pid, then reap.
        self.relay = None;
    }

    pub fn relay_err(&self) -> String {
        std::fs::read_to_string(self.dir.join("relay.err")).unwrap_or_default()
    }

    /// The client's arguments up to (not including) its options of the test:
    /// `upload PATHS --relay ... --relay-cert-sha256 ... --to CONTAINER
    /// --path-cache ...`.
    pub fn client_args(&self, lab: &Lab, paths: &[&Path]) -> Vec<String> {
        let mut a = vec!["upload".to_string()];
        a.extend(paths.iter().map(|p| p.display().to_string()));
        a.extend([
            "--relay".into(),
            format!("{}:{RELAY_PORT}", lab.addr(Side::Cloud)),
            "--relay-cert-sha256".into(),
            self.fingerprint.clone(),
            "--to".into(),
            self.container.clone(),
            "--path-cache".into(),
            self.dir.join("paths.json").display().to_string(),
        ]);
        a
    }
}

/// relay-client with `args`, the test's token, no proxies, killed with the
/// test; stdout and stderr go to `out`.out and `out`.err (a caller may
/// replace either, e.g. with a pipe to timestamp lines as they come).
pub fn client_command(args: &[String], out: &Path) -> Command {
    let mut cmd = Command::new(binary("relay-client"));
    cmd.args(args)
        .env("RELAY_TOKEN", cloud::TOKEN)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out.with_extension("out")).unwrap_or_else(|e| panic!("{e}")))
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap_or_else(|e| panic!("{e}")));
    cloud::strip_proxies(&mut cmd);
    die_with_parent(&mut cmd);
    cmd
}

/// Starts `cmd` (from `client_command`) in the site namespace.
pub fn spawn_site(lab: &Lab, cmd: Command) -> Proc {
    Proc(
        lab.spawn_in(Side::Site, cmd)
            .unwrap_or_else(|e| panic!("client: {e:#}")),
    )
}

/// Starts relay-client with `args` in the site namespace; stdout and stderr
/// go to `out`.out and `out`.err.
pub fn spawn_client(lab: &Lab, args: &[String], out: &Path) -> Proc {
    spawn_site(lab, client_command(args, out))
}

/// Makes `cmd` see `hosts` as its /etc/hosts (a private mount namespace with
/// a bind mount), so a test can point a name elsewhere by rewriting that file
/// in place while the process runs; the machine's own /etc/hosts is untouched.
pub fn with_hosts_file(cmd: &mut Command, hosts: &Path) {
    let src = std::ffi::CString::new(hosts.as_os_str().as_encoded_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: unshare and mount are async-signal-safe system calls on
    // arguments prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let root = c"/";
            let target = c"/etc/hosts";
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                || libc::mount(
                    src.as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Starts relay-client with `args` in the site namespace, seeing `hosts` as
/// its /etc/hosts (`with_hosts_file`).
pub fn spawn_client_with_hosts(lab: &Lab, args: &[String], out: &Path, hosts: &Path) -> Proc {
    let mut cmd = client_command(args, out);
    with_hosts_file(&mut cmd, hosts);
    spawn_site(lab, cmd)
}

/// The client's exit status, stdout and stderr, once it ends (within `limit`).
pub fn wait_client(mut c: Proc, out: &Path, limit: Duration) -> (Option<i32>, String, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(s)) = c.0.try_wait() {
            break s;
        }
        if Instant::now() >= deadline {
            let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
            panic!("client did not finish in {limit:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(out.with_extension("out")).unwrap_or_default();
    let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
    (status.code(), stdout, stderr)
}

/// Uncommitted blocks of `blob`, asked of Azurite from inside the cloud namespace.
pub fn staged_blocks(lab: &Lab, container: &str, blob: &str) -> usize {
    let (c, b) = (container.to_string(), blob.to_string());
    cloud::with_storage(lab, move |s| async move {
        Ok(s.writer(&c, &b)?.uncommitted_blocks().await?.len())
    })
    .unwrap_or_else(|e| panic!("block list: {e:#}"))
}

/// Waits until Azurite lists `blocks` staged blocks of `blob` (the client
/// still running).
pub fn wait_blocks(lab: &Lab, container: &str, blob: &str, blocks: usize, client: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while staged_blocks(lab, container, blob) < blocks {
        if let Ok(Some(s)) = client.0.try_wait() {
            panic!("client ended ({s}) before block {blocks} of {blob} was staged");
        }
        assert!(
            Instant::now() < deadline,
            "block {blocks} of {blob} never staged"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Downloads every blob and checks its SHA-256; none may be left uncommitted.
pub fn verify(lab: &Lab, container: &str, blobs: &[(String, String)]) {
    let ok = cloud::verify_blobs(lab, container, blobs.to_vec())
        .unwrap_or_else(|e| panic!("verify: {e:#}"));
    let bad: Vec<&String> = blobs
        .iter()
        .zip(&ok)
        .filter(|(_, ok)| !**ok)
        .map(|((b, _), _)| b)
        .collect();
    assert!(bad.is_empty(), "downloaded SHA-256 differs: {bad:?}");
}

/// Every blob downloaded and hashed (32 at a time); a blob whose download
/// failed is asked again alone, with the error kept, so a download that
/// failed under load is told apart from a blob that holds other bytes.
/// Either way the bench fails unless every blob is its file.
pub fn verify_with_second_look(lab: &Lab, container: &str, blobs: &[(String, String)]) {
    let ok = cloud::verify_blobs(lab, container, blobs.to_vec())
        .unwrap_or_else(|e| panic!("verify: {e:#}"));
    let again: Vec<(String, String)> = blobs
        .iter()
        .zip(&ok)
        .filter(|(_, ok)| !**ok)
        .map(|(b, _)| b.clone())
        .collect();
    if again.is_empty() {
        return;
    }
    println!(
        "{} blobs not verified at the first download; again, one at a time",
        again.len()
    );
    let c = container.to_string();
    let results = cloud::with_storage(lab, move |s| async move {
        let mut out = Vec::new();
        for (blob, want) in again {
            let got = s.writer(&c, &blob)?.content_sha256().await;
            out.push(match got {
                Ok((_, h)) if hex::encode(h) == want => (blob, Ok(())),
                Ok((n, h)) => (blob, Err(format!("other bytes: {n} B, {}", hex::encode(h)))),
                Err(e) => (blob, Err(format!("download failed: {e}"))),
            });
        }
        Ok(out)
    })
    .unwrap_or_else(|e| panic!("verify: {e:#}"));
    let bad: Vec<String> = results
        .iter()
        .filter_map(|(b, r)| r.as_ref().err().map(|e| format!("{b}: {e}")))
        .collect();
    println!(
        "second look: {} verified, {} not",
        results.len() - bad.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "blobs not verified:\n{}", bad.join("\n"));
}
