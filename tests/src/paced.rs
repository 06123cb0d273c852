//! A relay whose transfer can be held at a chosen offset (so a client is killed
//! exactly there, however slow the machine), with small QUIC windows so the
//! client never runs far ahead of what the relay has read. For the resume tests.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use relay_proto::id_key::IdKey;
use relay_server::{Config, TestHooks};
use relay_storage::staging::Pace;
use relay_transport::quic::Windows;

use crate::azurite::shared_azurite;
use crate::binary;
use crate::relay::{RelayHandle, RelayOptions};
use crate::upload::Upload;

const MIB: u64 = 1 << 20;

/// Where the relay's transfer is, and how it should behave; shared with its hook.
pub struct Control {
    /// File offset after the last chunk the relay took.
    pub received: AtomicU64,
    /// The first chunk that reaches this offset (u64::MAX: none) is held: the relay
    /// reads nothing more on that transfer until `release`. One transfer only: the
    /// gate disarms when it closes, so a re-run passes freely.
    gate_at: AtomicU64,
    /// Set once a transfer is held at the gate.
    holding: AtomicBool,
    /// Lets the held transfer go on.
    released: AtomicBool,
}

impl Default for Control {
    fn default() -> Self {
        Self {
            received: AtomicU64::new(0),
            gate_at: AtomicU64::new(u64::MAX),
            holding: AtomicBool::new(false),
            released: AtomicBool::new(false),
        }
    }
}

impl Control {
    /// Holds the next transfer once the relay has taken `offset` bytes of it.
    pub fn gate_at(&self, offset: u64) {
        self.gate_at.store(offset, Ordering::SeqCst);
    }

    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// Called by the pace hook with the offset after a chunk.
    pub fn at(&self, end: u64) {
        self.received.store(end, Ordering::SeqCst);
        let gate = self.gate_at.load(Ordering::SeqCst);
        if end < gate
            || self
                .gate_at
                .compare_exchange(gate, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return;
        }
        self.holding.store(true, Ordering::SeqCst);
        // The hook is synchronous: block this task's thread (tokio moves the
        // runtime's other work elsewhere) until released. The bound only keeps a
        // broken test from hanging forever.
        tokio::task::block_in_place(|| {
            let deadline = Instant::now() + Duration::from_secs(300);
            while !self.released.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        });
    }
}

/// The harness's relay (`RelayHandle`) with small QUIC windows and the pacing hook
/// wired to a `Control`.
pub struct TestRelay {
    pub relay: RelayHandle,
    /// The relay's block-ID key (to stage IDs that a relay would have made).
    pub key: IdKey,
    pub control: Arc<Control>,
}

impl TestRelay {
    pub fn start() -> Self {
        Self::start_on(shared_azurite().storage())
    }

    pub fn start_on(storage: relay_storage::account::Storage) -> Self {
        let control = Arc::new(Control::default());
        let c = control.clone();
        let pace: Pace = Arc::new(move |offset, len| {
            c.at(offset + len as u64);
            Duration::ZERO
        });
        let relay = RelayHandle::start(
            storage,
            RelayOptions {
                hooks: TestHooks {
                    pace: Some(pace),
                    ..TestHooks::default()
                },
                // Small windows: what the client has sent is at most ~2 MiB past what
                // the relay has read, so a kill at a relay offset means the same at
                // the client.
                configure: Some(Box::new(|cfg: &mut Config| {
                    cfg.listen.windows = Windows {
                        stream_window: 2 * MIB,
                        connection_window: 8 * MIB,
                        ..Windows::default()
                    };
                })),
                ..RelayOptions::default()
            },
        );
        let key = relay.id_key();
        Self {
            relay,
            key,
            control,
        }
    }

    /// `upload FILE --to CONTAINER --json --block-size 5MiB` to this relay.
    pub fn upload(&self, file: &std::path::Path, container: &str) -> Vec<String> {
        Upload::file(file)
            .to(container)
            .json()
            .block_size("5MiB")
            .via(&self.relay)
            .args()
    }

    pub fn received(&self) -> u64 {
        self.control.received.load(Ordering::SeqCst)
    }

    pub async fn stop(self) {
        // A transfer still held (a test that failed early) must not hold the relay.
        self.control.release();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.relay.stop()).await;
    }
}

/// Runs the client and SIGKILLs it (by its own PID) once `ready()` holds.
pub async fn run_and_kill(args: &[String], ready: impl Fn() -> bool) {
    let mut child = tokio::process::Command::new(binary("relay-client"))
        .args(args)
        .env_remove("RELAY_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run relay-client: {e}"));
    // A bound against hangs only.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("client ended ({status}) before the kill point");
        }
        assert!(Instant::now() < deadline, "kill point never reached");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().await.unwrap_or_else(|e| panic!("kill: {e}"));
}

/// The blob's uncommitted blocks (ID, size).
pub async fn uncommitted(container: &str, blob: &str) -> Vec<(Vec<u8>, u64)> {
    crate::blobs::writer(container, blob)
        .uncommitted_blocks()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `blob` has `n` uncommitted blocks (the killed run's in-flight Put
/// Blocks landing), then returns them; after a bound against hangs, returns what
/// there is.
pub async fn wait_uncommitted(container: &str, blob: &str, n: usize) -> Vec<(Vec<u8>, u64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = uncommitted(container, blob).await;
        if list.len() >= n || Instant::now() > deadline {
            return list;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
