//! The QUIC endpoint: accepts connections under a limit, hands each bidirectional
//! stream to a transfer, and shuts down gracefully (stop accepting, let in-flight
//! transfers finish within a grace period, then close).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{Endpoint, TokioRuntime};
use shared::blob::Storage;
use shared::quic::{Windows, bind_udp};
use shared::staging::{Budget, Mangle, Pace};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::auth::TokenStore;
use crate::metrics::Metrics;
use crate::tls::Identity;

/// Fault hooks for the end-to-end tests; not reachable from the command line.
#[derive(Clone, Default)]
pub struct TestHooks {
    /// Called on every received chunk before it is hashed (e.g. to flip a byte).
    pub mangle: Option<Mangle>,
    /// Called on every received chunk with its offset and length; the transfer
    /// waits as long as it says (a slow relay, to stop a test at a chosen point).
    pub pace: Option<Pace>,
}

pub struct Config {
    pub listen: SocketAddr,
    pub storage: Storage,
    pub tokens: TokenStore,
    pub identity: Identity,
    pub budget: Budget,
    pub block_size: u64,
    pub blocks_in_flight: usize,
    pub windows: Windows,
    pub udp_buffer: usize,
    pub max_connections: usize,
    pub grace: Duration,
    pub hooks: TestHooks,
}

/// State every transfer reads.
pub struct Shared {
    pub storage: Storage,
    pub tokens: TokenStore,
    pub budget: Budget,
    pub block_size: u64,
    pub blocks_in_flight: usize,
    pub metrics: Metrics,
    /// Turns true when shutdown begins: transfers stop at their next block boundary.
    pub stopping: watch::Receiver<bool>,
    hooks: TestHooks,
}

impl Shared {
    pub fn mangle(&self) -> Option<Mangle> {
        if cfg!(feature = "test-hooks") {
            self.hooks.mangle.clone()
        } else {
            None
        }
    }

    pub fn pace(&self) -> Option<Pace> {
        if cfg!(feature = "test-hooks") {
            self.hooks.pace.clone()
        } else {
            None
        }
    }
}

pub struct Relay {
    endpoint: Endpoint,
    stopping: watch::Sender<bool>,
    shared: Arc<Shared>,
    max_connections: usize,
    grace: Duration,
    fingerprint: String,
}

impl Relay {
    pub fn bind(cfg: Config) -> Result<Self, String> {
        let crypto = cfg.identity.server_crypto()?;
        let mut server = quinn::ServerConfig::with_crypto(crypto);
        server.transport_config(Arc::new(cfg.windows.transport()));
        let socket = bind_udp(cfg.listen, cfg.udp_buffer)
            .map_err(|e| format!("cannot bind UDP {}: {e}", cfg.listen))?;
        let endpoint = Endpoint::new(
            shared::quic::endpoint_config(),
            Some(server),
            socket,
            Arc::new(TokioRuntime),
        )
        .map_err(|e| format!("cannot start QUIC on {}: {e}", cfg.listen))?;
        let (stopping, stopping_rx) = watch::channel(false);
        let metrics = Metrics::default();
        // Every writer records its retries in the relay's metrics as they happen.
        let storage = cfg.storage.with_retry_counts(metrics.azure_retries.clone());
        Ok(Self {
            endpoint,
            stopping,
            fingerprint: cfg.identity.fingerprint.clone(),
            shared: Arc::new(Shared {
                storage,
                tokens: cfg.tokens,
                budget: cfg.budget,
                block_size: cfg.block_size,
                blocks_in_flight: cfg.blocks_in_flight,
                metrics,
                stopping: stopping_rx,
                hooks: cfg.hooks,
            }),
            max_connections: cfg.max_connections.max(1),
            grace: cfg.grace,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Serves until `shutdown` turns true, then drains.
    pub async fn serve(self, mut shutdown: watch::Receiver<bool>) {
        let limit = Arc::new(Semaphore::new(self.max_connections));
        let mut conns = JoinSet::new();
        let for_conns = shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                incoming = self.endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    let Ok(permit) = limit.clone().try_acquire_owned() else {
                        tracing::warn!(remote = %incoming.remote_address(), "connection limit reached; refusing");
                        incoming.refuse();
                        continue;
                    };
                    let shared = self.shared.clone();
                    let stop = for_conns.clone();
                    conns.spawn(async move {
                        serve_connection(shared, incoming, stop).await;
                        drop(permit);
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        tracing::info!(
            active = conns.len(),
            grace_s = self.grace.as_secs(),
            "shutting down: no new transfers"
        );
        // Refuse new connections at once (clients retry elsewhere) and ask running
        // transfers to stop at their next block boundary after in-flight blocks land.
        self.endpoint.set_server_config(None);
        let _ = self.stopping.send(true);
        let drained = tokio::time::timeout(self.grace, async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "grace period over; closing remaining connections (clients will resume)"
            );
        }
        self.endpoint.close(
            shared::protocol::app_error::SHUTDOWN.into(),
            b"relay shutting down",
        );
        conns.shutdown().await;
        self.endpoint.wait_idle().await;
    }
}

async fn serve_connection(
    shared: Arc<Shared>,
    incoming: quinn::Incoming,
    mut shutdown: watch::Receiver<bool>,
) {
    let remote = incoming.remote_address();
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(%remote, error = %e, "handshake failed");
            return;
        }
    };
    tracing::info!(%remote, "client connected");
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            // On shutdown stop taking new files; running ones continue.
            _ = shutdown.wait_for(|s| *s) => break,
            s = conn.accept_bi() => match s {
                Ok((send, recv)) => {
                    streams.spawn(crate::transfer::handle(shared.clone(), send, recv));
                }
                Err(e) => {
                    tracing::info!(%remote, reason = %e, "client disconnected");
                    break;
                }
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
    while streams.join_next().await.is_some() {}
    conn.close(shared::protocol::app_error::DONE.into(), b"");
}
