//! Issue 20 in the WAN lab: a real 200 ms RTT, 200 Mbit/s path (no loss) between
//! the site namespace (relay-client) and the cloud namespace (Azurite and a
//! relay-server process). An upload capped at 20 Mbit/s is interrupted once
//! Azurite lists its first staged block; a rerun at full speed (whose eager body
//! and Trailer are all sent before the relay's redirect can arrive) must resume
//! from that block. Needs root and /dev/net/tun; prints SKIPPED otherwise.
//! Every wait is on an observable condition with a generous bound; the lab, Azurite
//! and the relay are torn down by their guards even when an assertion fails.

#[allow(dead_code)]
#[path = "../src/cloud.rs"]
mod cloud;
// cloud.rs can start the storage delay proxy (wanbench --storage-delay).
#[allow(dead_code)]
#[path = "../src/storage_delay.rs"]
mod storage_delay;
// ...and pin Azurite to a CPU (wanbench --storage-cpu).
#[allow(dead_code)]
#[path = "../src/cpu_split.rs"]
mod cpu_split;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile, Side};
use relay_tests::files::{Scratch, write_random};
use relay_tests::{DEV_ACCOUNT, DEV_KEY, binary};

const MIB: u64 = 1 << 20;
const RELAY_PORT: u16 = 4433;
const AZURITE_PORT: u16 = 10000;
const CONTAINER: &str = "resume-wan";

/// One lab at a time (2 cores; each lab's forwarder is a busy thread).
static LABS: Mutex<()> = Mutex::new(());

/// A child we started, SIGKILLed (by pid) and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn die_with_parent(cmd: &mut Command) {
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
struct Cloud {
    relay: Option<Proc>,
    _azurite: Proc,
    fingerprint: String,
    dir: PathBuf,
}

impl Cloud {
    fn start(lab: &Lab, dir: &Path) -> Self {
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
        cloud::ensure_container(lab, CONTAINER).unwrap_or_else(|e| panic!("container: {e:#}"));

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
        };
        c.start_relay(lab);
        c
    }

    /// (Re)starts the relay: same port, certificate and `--id-key-file`.
    fn start_relay(&mut self, lab: &Lab) {
        let fp_file = self.dir.join("relay.sha256");
        let _ = std::fs::remove_file(&fp_file);
        let mut relay = Command::new(binary("relay-server"));
        relay
            .arg("--listen")
            .arg(format!("{}:{RELAY_PORT}", lab.addr(Side::Cloud)))
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

    fn kill_relay(&mut self) {
        // Proc's drop: SIGKILL by pid, then reap.
        self.relay = None;
    }

    fn relay_err(&self) -> String {
        std::fs::read_to_string(self.dir.join("relay.err")).unwrap_or_default()
    }
}

/// The client in the site namespace; stdout and stderr to files.
fn client(lab: &Lab, cloud: &Cloud, file: &Path, max_rate: Option<u32>, out: &Path) -> Proc {
    let mut cmd = Command::new(binary("relay-client"));
    cmd.arg("upload")
        .arg(file)
        .arg("--relay")
        .arg(format!("{}:{RELAY_PORT}", lab.addr(Side::Cloud)))
        .args(["--relay-cert-sha256", &cloud.fingerprint])
        .args([
            "--to",
            CONTAINER,
            "--block-size",
            "16MiB",
            "--json",
            "--quiet",
        ])
        .arg("--path-cache")
        .arg(cloud.dir.join("paths.json"))
        .env("RELAY_TOKEN", cloud::TOKEN)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out.with_extension("out")).unwrap_or_else(|e| panic!("{e}")))
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap_or_else(|e| panic!("{e}")));
    if let Some(r) = max_rate {
        cmd.args(["--max-rate", &r.to_string()]);
    }
    cloud::strip_proxies(&mut cmd);
    die_with_parent(&mut cmd);
    Proc(
        lab.spawn_in(Side::Site, cmd)
            .unwrap_or_else(|e| panic!("client: {e:#}")),
    )
}

/// Uncommitted blocks of `blob`, asked of Azurite from inside the cloud namespace.
fn staged_blocks(lab: &Lab, blob: &str) -> usize {
    let b = blob.to_string();
    cloud::with_storage(lab, move |s| async move {
        Ok(s.writer(CONTAINER, &b)?.uncommitted_blocks().await?.len())
    })
    .unwrap_or_else(|e| panic!("block list: {e:#}"))
}

/// Waits until Azurite lists the first staged block (the client still running).
fn wait_first_block(lab: &Lab, blob: &str, client: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while staged_blocks(lab, blob) < 1 {
        if let Ok(Some(s)) = client.0.try_wait() {
            panic!("client ended ({s}) before the first block was staged");
        }
        assert!(Instant::now() < deadline, "first block never staged");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for the client (bounded) and returns its exit code and JSON file entry.
fn finish(mut c: Proc, out: &Path, limit: Duration) -> (Option<i32>, serde_json::Value) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(s)) = c.0.try_wait() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "client did not finish in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(out.with_extension("out")).unwrap_or_default();
    let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\nstderr:\n{stderr}"));
    assert_eq!(status.code(), Some(0), "client failed:\n{stderr}\n{stdout}");
    (status.code(), v["files"][0].clone())
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
    let mut cloud = Cloud::start(&lab, &dir.0);
    let blob = format!("{test}.bin");
    let file = dir.path(&blob);
    let sha = write_random(&file, size, size);
    let out = dir.path("run1");
    let mut c = client(&lab, &cloud, &file, Some(20), &out);
    wait_first_block(&lab, &blob, &mut c);
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
