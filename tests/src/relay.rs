//! A real relay, in-process, on loopback QUIC.

use std::net::SocketAddr;

use relay_server::{Config, Relay, TestHooks};
use relay_storage::account::Storage;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "test-token-0123456789abcdef";
pub const LIMITED_TOKEN: &str = "limited-token-0123456789abcdef";

pub struct RelayHandle {
    pub addr: SocketAddr,
    pub fingerprint: String,
    pub shared: std::sync::Arc<relay_server::server::Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    _tokens: crate::files::Scratch,
}

/// Changes a test makes to the relay's configuration before it starts.
pub type Configure = Box<dyn FnOnce(&mut Config) + Send>;

pub struct RelayOptions {
    pub memory_budget: u64,
    pub hooks: TestHooks,
    /// Containers the limited token may write.
    pub limited_to: String,
    /// Anything else about the relay's configuration (limits, windows, key).
    pub configure: Option<Configure>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        Self {
            memory_budget: 256 << 20,
            hooks: TestHooks::default(),
            limited_to: "allowed-only".into(),
            configure: None,
        }
    }
}

impl RelayHandle {
    pub fn start(storage: Storage, opts: RelayOptions) -> Self {
        relay_transport::install_crypto_provider();
        let dir = crate::files::Scratch::new("tokens");
        let tokens_path = dir.path("tokens");
        std::fs::write(
            &tokens_path,
            format!("{TOKEN}\n{LIMITED_TOKEN} {}\n", opts.limited_to),
        )
        .unwrap_or_else(|e| panic!("tokens: {e}"));
        let tokens = relay_server::sign_in::auth::TokenStore::load(&tokens_path)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut cfg = Config::for_tests(storage, tokens, opts.memory_budget)
            .unwrap_or_else(|e| panic!("{e}"));
        cfg.hooks = opts.hooks;
        if let Some(configure) = opts.configure {
            configure(&mut cfg);
        }
        let relay = Relay::bind(cfg).unwrap_or_else(|e| panic!("{e}"));
        let addr = relay.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let fingerprint = relay.fingerprint().to_string();
        let shared = relay.shared();
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(relay.serve(rx));
        Self {
            addr,
            fingerprint,
            shared,
            stop,
            task,
            _tokens: dir,
        }
    }

    /// A relay on the shared Azurite and a fresh container for one test.
    pub async fn with_container(tag: &str, opts: RelayOptions) -> (Self, String) {
        let container = crate::blobs::new_container(tag).await;
        (
            Self::start(crate::azurite::shared_azurite().storage(), opts),
            container,
        )
    }

    /// The relay's block-ID key (to make IDs a relay would have made).
    pub fn id_key(&self) -> relay_proto::id_key::IdKey {
        self.shared.storage.id_key.clone()
    }

    /// Arguments that reach this relay with the full token.
    pub fn client_args(&self, to: &str) -> Vec<String> {
        vec![
            "--relay".into(),
            self.addr.to_string(),
            "--relay-cert-sha256".into(),
            self.fingerprint.clone(),
            "--to".into(),
            to.into(),
            "--token".into(),
            TOKEN.into(),
        ]
    }

    /// Replaces the tokens file (the relay re-reads it when its mtime changes; the
    /// new mtime is made to differ even on a file system with a coarse clock).
    pub fn rewrite_tokens(&self, text: &str) {
        let path = self._tokens.path("tokens");
        let before = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("tokens: {e}"));
        let after = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if let Some(before) = before
            && after <= Some(before)
        {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(before + std::time::Duration::from_secs(1)))
                .unwrap_or_else(|e| panic!("tokens mtime: {e}"));
        }
    }

    /// One sample of the relay's /metrics text (as its endpoint renders it),
    /// by its series name with labels.
    pub fn metric(&self, series: &str) -> Option<u64> {
        relay_server::operations::health::render(&self.shared)
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Stops the relay without waiting for its transfers (one a test stalled).
    pub fn abandon(self) {
        let _ = self.stop.send(true);
        self.task.abort();
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// A relay that can be stopped and started again as itself: the same address,
/// certificate and block-ID key, so a client waiting for it (`--patience`)
/// reconnects to it and resumes what it had staged.
pub struct Revivable {
    /// Caps each start's QUIC sending rate (Mbit/s), so a test can catch a
    /// download in the middle.
    pub send_rate_mbit: Option<f64>,
    storage: Storage,
    listen: std::net::SocketAddr,
    identity: relay_server::connection::tls::Identity,
    id_key: relay_proto::id_key::IdKey,
}

impl Revivable {
    pub fn new(storage: Storage) -> Self {
        relay_transport::install_crypto_provider();
        Self {
            send_rate_mbit: None,
            storage,
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], crate::reserved_port())),
            identity: relay_server::connection::tls::Identity::self_signed(vec![
                "localhost".into(),
            ])
            .unwrap_or_else(|e| panic!("{e}")),
            id_key: relay_proto::id_key::IdKey::random(),
        }
    }

    /// Starts it (again), once its address is free (the last one's socket
    /// closes as its task ends).
    pub async fn start(&self) -> RelayHandle {
        let t0 = std::time::Instant::now();
        while std::net::UdpSocket::bind(self.listen).is_err() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "{} stayed in use",
                self.listen
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (listen, key, rate) = (self.listen, self.id_key.clone(), self.send_rate_mbit);
        let identity = relay_server::connection::tls::Identity {
            certs: self.identity.certs.clone(),
            key: self.identity.key.clone_key(),
            fingerprint: self.identity.fingerprint.clone(),
        };
        let opts = RelayOptions {
            configure: Some(Box::new(move |cfg: &mut Config| {
                cfg.listen.addr = listen;
                cfg.listen.identity = identity;
                cfg.storage.id_key = key;
                if rate.is_some() {
                    cfg.listen.windows.max_rate_mbit = rate;
                }
            })),
            ..RelayOptions::default()
        };
        RelayHandle::start(self.storage.clone(), opts)
    }
}

/// A relay (with `opts`) whose storage requests pass a fault proxy on their
/// way to the shared Azurite, the proxy holding every request of `op` until
/// the test releases it: a run provably at that step, without timing.
pub async fn held_at(
    op: crate::proxy::Op,
    opts: RelayOptions,
) -> (crate::proxy::FaultProxy, RelayHandle) {
    let az = crate::azurite::shared_azurite();
    let azurite = SocketAddr::from(([127, 0, 0, 1], az.port));
    let proxy = crate::proxy::FaultProxy::start(azurite, crate::proxy::Schedule::seeded(1)).await;
    proxy.hold(op);
    let storage = az.storage_at(&proxy.url(), Default::default());
    (proxy, RelayHandle::start(storage, opts))
}
