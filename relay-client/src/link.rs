//! The relay connection of a run: one QUIC connection, re-established when it
//! is lost (a watchdog notices a silent relay long before QUIC's idle timeout),
//! and the path estimate saved for the next run's warm start.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::Connection;
use relay_storage::retry::Backoff;
use relay_transport::congestion::PathObserver;
use tokio::sync::Mutex;

use crate::connect::{ConnectError, Connector};
use crate::path_cache::PathCache;
use crate::report::FileError;

/// How a relay at its connection limit is asked again (up to `--busy-wait`): it
/// answers "busy", meaning later, and a slot frees whenever another client ends.
pub const BUSY_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(500),
    cap: Duration::from_secs(8),
    max_attempts: u32::MAX,
};

/// One QUIC connection, re-established when it is lost.
pub struct RelayLink {
    pub connector: Connector,
    pub addr: SocketAddr,
    pub name: String,
    pub timeout: Duration,
    /// How long a relay at its connection limit is asked again before giving up.
    pub busy_wait: Duration,
    pub current: Mutex<Option<Connection>>,
    /// Where this run's connections report their path estimate, and where it is
    /// saved for the next run (warm start).
    pub observer: Arc<PathObserver>,
    pub cache: Option<PathCache>,
}

impl RelayLink {
    /// Whether the connection started warm; saves what it measured.
    pub fn remember_path(&self) -> bool {
        if let (Some(cache), Some(estimate)) = (&self.cache, self.observer.estimate()) {
            cache.save(estimate);
        }
        self.observer.warm_started()
    }

    /// Closes the connection now (Ctrl-C): every stream is reset, so the relay
    /// commits nothing that was still arriving.
    pub async fn abort(&self) {
        if let Some(c) = self.current.lock().await.as_ref() {
            c.close(
                relay_proto::protocol::app_error::CLIENT_ABORT.into(),
                b"interrupted",
            );
        }
    }

    pub async fn get(&self) -> Result<Connection, FileError> {
        let mut cur = self.current.lock().await;
        if let Some(c) = cur.as_ref()
            && c.close_reason().is_none()
        {
            return Ok(c.clone());
        }
        // A busy relay (connection limit) is asked again with backoff until
        // `busy_wait` has passed: it says "later", not "no", and a slot frees up
        // when any other client finishes.
        let backoff = BUSY_BACKOFF;
        let give_up = Instant::now() + self.busy_wait;
        let mut tries = 0;
        let c = loop {
            tries += 1;
            match self
                .connector
                .connect(self.addr, &self.name, self.timeout)
                .await
            {
                Ok(c) => break c,
                Err(busy @ ConnectError::Busy { .. }) => {
                    let delay = backoff.delay(tries, rand::random::<f64>());
                    if Instant::now() + delay > give_up {
                        return Err(FileError::new(
                            "connection",
                            format!(
                                "{busy}; still busy after {} s (--busy-wait)",
                                self.busy_wait.as_secs()
                            ),
                            true,
                        ));
                    }
                    let left = give_up.saturating_duration_since(Instant::now());
                    let waited = self.busy_wait.saturating_sub(left);
                    tracing::warn!(
                        attempt = tries,
                        waited_s = waited.as_secs(),
                        "{busy}; waiting for a free slot"
                    );
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(FileError::new("connection", e.to_string(), true)),
            }
        };
        *cur = Some(c.clone());
        tokio::spawn(watchdog(c.clone()));
        Ok(c)
    }
}

/// Per-second transport figures at debug level (`RELAY_LOG=relay_client::path=debug`):
/// what an operator needs to tell a slow link from a slow relay.
struct PathTrace {
    enabled: bool,
    at: Instant,
    last: quinn::ConnectionStats,
}

impl PathTrace {
    fn new(conn: &Connection) -> Self {
        Self {
            enabled: tracing::enabled!(target: "relay_client::path", tracing::Level::DEBUG),
            at: Instant::now(),
            last: conn.stats(),
        }
    }

    fn tick(&mut self, conn: &Connection) {
        if !self.enabled || self.at.elapsed() < Duration::from_secs(1) {
            return;
        }
        let s = conn.stats();
        let secs = self.at.elapsed().as_secs_f64();
        tracing::debug!(
            target: "relay_client::path",
            tx_mbit = format!("{:.1}", (s.udp_tx.bytes - self.last.udp_tx.bytes) as f64 * 8.0 / secs / 1e6),
            sent = s.path.sent_packets - self.last.path.sent_packets,
            lost = s.path.lost_packets - self.last.path.lost_packets,
            cwnd = s.path.cwnd,
            rtt_ms = format!("{:.1}", s.path.rtt.as_secs_f64() * 1e3),
            mtu = s.path.current_mtu,
            "path"
        );
        self.at = Instant::now();
        self.last = s;
    }
}

/// A relay that hears nothing from us for this long is gone (crashed, restarted,
/// or its host is unreachable). Both ends send a keep-alive every 5 s, each
/// answered by an ACK, so a live relay is never this quiet.
const RELAY_SILENT: Duration = Duration::from_secs(10);

/// Closes `conn` when the relay stops acknowledging anything, so its files fail as
/// retryable and resume over a new connection. QUIC's own idle timeout (60 s) would
/// catch this too, but far later; and a relay restarted on the same address answers
/// old packets with stateless resets this client cannot authenticate, so only
/// acknowledged (authenticated) frames count as signs of life.
async fn watchdog(conn: Connection) {
    let mut acks = conn.stats().frame_rx.acks;
    let mut heard = Instant::now();
    let mut trace = PathTrace::new(&conn);
    loop {
        tokio::select! {
            _ = conn.closed() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        trace.tick(&conn);
        let now = conn.stats().frame_rx.acks;
        if now != acks {
            acks = now;
            heard = Instant::now();
        } else if heard.elapsed() >= RELAY_SILENT {
            tracing::warn!(
                remote = %conn.remote_address(),
                silent_s = RELAY_SILENT.as_secs(),
                "relay not responding; reconnecting"
            );
            conn.close(
                relay_proto::protocol::app_error::CLIENT_ABORT.into(),
                b"relay not responding",
            );
            return;
        }
    }
}
