//! One in-memory Azurite per test process (it keeps freed data for minutes, so
//! sharing one across runs would grow). It dies with the process (PDEATHSIG).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use relay_proto::protocol::Secret;
use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{EntraSource, StorageAccess};

pub struct Azurite {
    pub port: u16,
    pub pid: u32,
}

impl Azurite {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/{}", self.port, crate::DEV_ACCOUNT)
    }

    /// A Storage authenticated with the development account key.
    pub fn storage(&self) -> Storage {
        self.storage_at(&self.url(), WriterOptions::default())
    }

    pub fn storage_at(&self, url: &str, opts: WriterOptions) -> Storage {
        let access = StorageAccess::resolve(
            url,
            Some(&Secret(crate::DEV_KEY.into())),
            EntraSource::default(),
        )
        .unwrap_or_else(|e| panic!("storage access: {e}"));
        Storage::new(access, &opts).unwrap_or_else(|e| panic!("storage: {e}"))
    }
}

/// The Azurite binary from the repo's pinned npm install.
pub fn azurite_bin() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let p = root.join("node_modules/.bin/azurite-blob");
    assert!(
        p.exists(),
        "Azurite is not installed: run `npm ci` in the repository root (see README)"
    );
    p
}

/// Starts Azurite once per process, from a thread that lives as long as the
/// process, so PDEATHSIG fires only when the test process ends.
pub fn shared_azurite() -> &'static Azurite {
    static AZ: OnceLock<Azurite> = OnceLock::new();
    AZ.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let started = start(crate::reserved_port());
            let _ = tx.send(started);
            loop {
                std::thread::park();
            }
        });
        rx.recv().unwrap_or_else(|e| panic!("azurite thread: {e}"))
    })
}

/// Starts an Azurite on `port` and waits until it accepts connections.
pub fn start(port: u16) -> Azurite {
    let child = spawn(port);
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "Azurite did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::mem::forget(child);
    Azurite { port, pid }
}

fn spawn(port: u16) -> Child {
    let mut cmd = Command::new(azurite_bin());
    cmd.args([
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        &port.to_string(),
        "--inMemoryPersistence",
        "--disableTelemetry",
        "--skipApiVersionCheck",
        "--silent",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    // Benches of `--block-checksum crc64` straight into Azurite: its strict mode
    // refuses x-ms-content-crc64 (loose mode ignores it). Tests stay strict.
    if std::env::var_os("RELAY_TESTS_AZURITE_LOOSE").is_some() {
        cmd.arg("--loose");
    }
    #[cfg(target_os = "linux")]
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot start Azurite: {e}"))
}
