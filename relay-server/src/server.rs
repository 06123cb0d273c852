//! The QUIC endpoint: accepts connections under a limit, hands each bidirectional
//! stream to a transfer, and shuts down gracefully (stop accepting, let in-flight
//! transfers finish within a grace period, then close).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::Endpoint;
use relay_transport::quic::bind_udp;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::connection::admission::Admission;
use crate::connection::tls::TlsError;

use crate::state::Listen;
pub use crate::state::{BlockFill, Config, Shared, TestHooks};

/// Why the relay cannot start listening.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot bind UDP {addr}: {source}")]
    Udp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start QUIC on {addr}: {source}")]
    Quic {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub struct Relay {
    endpoint: Endpoint,
    stopping: watch::Sender<bool>,
    shared: Arc<Shared>,
    grace: Duration,
    fingerprint: String,
}

impl Relay {
    /// Binds the endpoint of `cfg.listen`; the transfers get the rest of `cfg`.
    pub fn bind(cfg: Config) -> Result<Self, BindError> {
        let listen = &cfg.listen;
        let endpoint = endpoint(listen, !cfg.hooks.before_compression)?;
        let (stopping, stopping_rx) = watch::channel(false);
        let admission = Arc::new(Admission::new(
            listen.admission,
            listen.max_connections.max(1),
            listen.windows,
        ));
        Ok(Self {
            endpoint,
            stopping,
            fingerprint: listen.identity.fingerprint.clone(),
            grace: listen.grace,
            shared: Arc::new(Shared::new(
                cfg.storage,
                cfg.sign_in,
                cfg.limits,
                admission,
                stopping_rx,
                cfg.hooks,
            )),
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

    pub fn admission(&self) -> Arc<Admission> {
        self.shared.admission.clone()
    }

    /// Serves until `shutdown` turns true, then drains.
    pub async fn serve(self, mut shutdown: watch::Receiver<bool>) {
        // Tokens-file reloads on a blocking thread, for as long as the relay lives.
        crate::sign_in::auth::watch(Arc::downgrade(&self.shared), |s| &s.sign_in.tokens);
        let mut conns = JoinSet::new();
        let for_conns = shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                incoming = self.endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    let Some(pending) = self.shared.admission.admit(incoming) else { continue };
                    let shared = self.shared.clone();
                    let stop = for_conns.clone();
                    conns.spawn(serve_connection(shared, pending, stop));
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
            relay_proto::protocol::app_error::SHUTDOWN.into(),
            b"relay shutting down",
        );
        conns.shutdown().await;
        self.endpoint.wait_idle().await;
    }
}

/// The QUIC endpoint on `listen.addr`, offering compressed chunks unless a
/// test asks for a relay from before them.
fn endpoint(listen: &Listen, compression: bool) -> Result<Endpoint, BindError> {
    let crypto = listen.identity.server_crypto_with(compression)?;
    let mut server = quinn::ServerConfig::with_crypto(crypto);
    // Until a connection presents a valid Offer it gets small windows and few
    // streams (`admission`); they are raised to `listen.windows` afterwards.
    server.transport_config(Arc::new(listen.windows.transport_before_auth(
        listen.admission.window_before_auth,
        listen.admission.streams_before_auth,
    )));
    // A client behind a NAT that rebinds (a new port after an idle spell,
    // Wi-Fi to wired) keeps its connection: quinn validates the new path
    // (PATH_CHALLENGE) and moves the connection there, so the transfer
    // goes on without a restart. quinn's default, stated because the
    // client's patience relies on it (tests/wanbench/tests/outage_wan.rs).
    server.migration(true);
    server.max_incoming(listen.admission.max_pending.max(1));
    // Early data is not used (no 0-RTT); keep what an unaccepted attempt may
    // buffer small.
    server.incoming_buffer_size(64 << 10);
    server.incoming_buffer_size_total(listen.admission.max_pending.max(1) as u64 * (64 << 10));
    let socket = bind_udp(listen.addr, listen.udp_buffer).map_err(|source| BindError::Udp {
        addr: listen.addr,
        source,
    })?;
    relay_transport::quic::endpoint(Some(server), socket).map_err(|source| BindError::Quic {
        addr: listen.addr,
        source,
    })
}

/// One connection: until a stream presents a valid Offer it holds only a pending
/// slot with small windows and a short deadline; then it is counted against
/// `--max-connections` and its windows are raised.
async fn serve_connection(
    shared: Arc<Shared>,
    pending: crate::connection::admission::Pending,
    mut shutdown: watch::Receiver<bool>,
) {
    let remote = pending.remote();
    let Some((conn, mut admitted)) = pending.handshake().await else {
        return;
    };
    tracing::debug!(%remote, "client connected");
    // Counted from the connection's first packet, not from its handshake's end.
    let deadline = tokio::time::sleep_until(admitted.deadline());
    tokio::pin!(deadline);
    let gate = admitted.gate();
    let evicted = admitted.eviction();
    let link = crate::connection::link::Link::new(gate.clone(), conn.clone());
    let refused = link.refused();
    let credit = shared.admission.stream_credit(
        &conn,
        shared.storage.account.max_requests_in_flight() as u64,
    );
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            // On shutdown stop taking new files; running ones continue.
            _ = shutdown.wait_for(|s| *s) => break,
            _ = &mut deadline, if !admitted.is_authenticated() => {
                tracing::info!(%remote, "no valid Offer in time; closing");
                admitted.count_deadline_missed();
                conn.close(relay_proto::protocol::app_error::UNAUTHENTICATED.into(), b"no valid Offer in time");
                break;
            }
            _ = evicted.opened(), if !admitted.is_authenticated() => {
                tracing::debug!(%remote, "evicted: pending slots full and it had no valid Offer yet");
                conn.close(relay_proto::protocol::app_error::UNAUTHENTICATED.into(), b"evicted: too many connections without a valid Offer");
                break;
            }
            // An Offer refused for its token or grant, and none valid: the
            // connection goes now, not at the deadline (its pending slot is
            // for a client about to authenticate, which it is not).
            _ = refused.opened(), if !admitted.is_authenticated() && !gate.is_open() => {
                if !gate.is_open() {
                    tracing::debug!(%remote, "Offer refused before any was valid; closing");
                    admitted.count_refused_offer();
                    conn.close(relay_proto::protocol::app_error::UNAUTHENTICATED.into(), b"Offer refused");
                    break;
                }
            }
            _ = gate.opened(), if !admitted.is_authenticated() => {
                if let Err(why) = admitted.promote(&conn) {
                    tracing::warn!(%remote, why, "connection limit reached; closing");
                    conn.close(relay_proto::protocol::app_error::BUSY.into(), why.as_bytes());
                    break;
                }
                credit.activate();
            }
            s = conn.accept_bi() => match s {
                Ok((send, recv)) => {
                    streams.spawn(crate::transfer::handle(
                        shared.clone(),
                        link.clone(),
                        credit.open(),
                        send,
                        recv,
                    ));
                }
                Err(e) => {
                    tracing::debug!(%remote, reason = %e, "client disconnected");
                    break;
                }
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
    while streams.join_next().await.is_some() {}
    conn.close(relay_proto::protocol::app_error::DONE.into(), b"");
    drop(admitted);
}
