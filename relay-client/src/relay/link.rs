//! One relay connection of a run (`links.rs` holds the run's N): a QUIC
//! connection, re-established when it is lost (a watchdog notices a silent
//! relay long before QUIC's idle timeout), and what it measured of the path
//! for the next run's warm start.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use quinn::Connection;
use relay_transport::congestion::PathObserver;
use tokio::sync::{Mutex, watch};

use crate::relay::backoff;
use crate::relay::connect::{AddressError, ConnectError, Connector, resolve};
use crate::relay::open_turns::OpenTurns;
use crate::relay::path_cache::PathCache;
use crate::relay::patience::{Patience, Step};
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;
use crate::ui::weather::{Weather, WeatherSink, human};

/// One QUIC connection, re-established when it is lost; while the relay cannot
/// be reached, every file waits here (within `--patience`).
pub struct RelayLink {
    pub connector: Connector,
    /// `--relay` as given: a name is resolved again for every new connection
    /// (an instance replaced behind DNS), the pinned identity still required.
    pub relay: String,
    pub addr: SocketAddr,
    pub name: String,
    pub timeout: Duration,
    /// How long a relay at its connection limit is asked again before giving up.
    pub busy_wait: Duration,
    /// A relay that acknowledges nothing for this long is taken as gone.
    pub silence: Duration,
    pub current: Mutex<Option<Connection>>,
    /// Files take turns to open their streams on the current connection.
    pub open_turns: OpenTurns,
    /// Where this run's connections report their path estimate, and where it is
    /// saved for the next run (warm start).
    pub observer: Arc<PathObserver>,
    pub cache: Option<PathCache>,
    /// Only touched while `current` is locked.
    pub patience: std::sync::Mutex<Patience<Instant>>,
    pub weather: WeatherSink,
    /// Outages seen so far (a file compares before and after its attempt).
    outages: AtomicU64,
    /// Connections made so far.
    connections: AtomicU64,
    /// Set once patience ran out: the run stops.
    out_of_patience: watch::Sender<bool>,
}

impl RelayLink {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        connector: Connector,
        relay: String,
        addr: SocketAddr,
        name: String,
        timeout: Duration,
        busy_wait: Duration,
        silence: Duration,
        patience: Duration,
        observer: Arc<PathObserver>,
        cache: Option<PathCache>,
        weather: WeatherSink,
    ) -> Self {
        Self {
            connector,
            relay,
            addr,
            name,
            timeout,
            busy_wait,
            silence,
            current: Mutex::new(None),
            open_turns: OpenTurns::default(),
            observer,
            cache,
            patience: std::sync::Mutex::new(Patience::new(patience)),
            weather,
            outages: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            out_of_patience: watch::channel(false).0,
        }
    }

    /// This link ends the run through `other`'s out-of-patience signal (and
    /// sees it): a run's connections (`RelayLinks`) give up as one.
    pub fn share_stop(&mut self, other: &RelayLink) {
        self.out_of_patience = other.out_of_patience.clone();
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

    /// Closes the endpoint at the end of the run (`Connector::close`).
    pub async fn close(&self) {
        let conn = self.current.lock().await.clone();
        self.connector.close(conn.as_ref()).await;
    }

    fn patience(&self) -> std::sync::MutexGuard<'_, Patience<Instant>> {
        self.patience.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether losing the network is waited for (`--patience` above zero).
    pub fn patient(&self) -> bool {
        self.patience().enabled()
    }

    /// Outages so far: a file whose attempt saw this change lost its
    /// connection to the weather, not to anything of its own.
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// QUIC connections this run made.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Waiting for the relay to answer again right now.
    pub fn waiting(&self) -> bool {
        self.patience().waiting()
    }

    /// After a piece of work's connection was lost: waits for a working one
    /// (every piece of work waits here while the relay cannot be reached,
    /// within `--patience`) and says whether the loss was weather, i.e. the
    /// link had to wait for the network since the attempt began (`outages`
    /// then). A loss followed by an immediate reconnect (a relay restarted,
    /// or something this work does) counts as an attempt, so work that keeps
    /// breaking its connection still fails after `--attempts`.
    pub async fn weathered(&self, outages: u64) -> bool {
        match self.get().await {
            Ok(_) => self.outages() != outages,
            Err(_) if self.gave_up() => match out_of_patience().await {},
            Err(_) => self.outages() != outages,
        }
    }

    pub fn gave_up(&self) -> bool {
        *self.out_of_patience.borrow()
    }

    /// Resolves once patience ran out (never, if it does not).
    pub async fn wait_gave_up(&self) {
        let mut rx = self.out_of_patience.subscribe();
        if rx.wait_for(|gave_up| *gave_up).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The current connection, or a new one. While the relay cannot be reached
    /// this waits (every file in line behind it) until it answers or patience
    /// runs out; then it returns an `unreachable` error and `gave_up` is set.
    pub async fn get(&self) -> Result<Connection, FileError> {
        self.get_with(self.patient()).await
    }

    /// As `get`, waiting for the network only if `patient`.
    pub async fn get_with(&self, patient: bool) -> Result<Connection, FileError> {
        let mut cur = self.current.lock().await;
        if let Some(c) = cur.as_ref()
            && c.close_reason().is_none()
        {
            return Ok(c.clone());
        }
        if self.gave_up() {
            return Err(FileError::new(
                ErrorCode::Unreachable,
                "the relay stayed unreachable (--patience)",
                false,
            ));
        }
        // A busy relay (connection limit) is asked again with backoff until
        // `busy_wait` has passed: it says "later", not "no", and a slot frees up
        // when any other client finishes.
        let give_up_busy = Instant::now() + self.busy_wait;
        let mut busy_tries = 0;
        let c = loop {
            let error = match self.connect_once().await {
                Ok(c) => break c,
                Err(Failure::Connect(busy @ ConnectError::Busy { .. })) => {
                    busy_tries += 1;
                    let delay = backoff::BUSY.delay(busy_tries, rand::random::<f64>());
                    if Instant::now() + delay > give_up_busy {
                        return Err(FileError::new(
                            ErrorCode::Connection,
                            format!(
                                "{busy}; still busy after {} s (--busy-wait)",
                                self.busy_wait.as_secs()
                            ),
                            true,
                        ));
                    }
                    let left = give_up_busy.saturating_duration_since(Instant::now());
                    let waited = self.busy_wait.saturating_sub(left);
                    tracing::warn!(
                        attempt = busy_tries,
                        waited_s = waited.as_secs(),
                        "{busy}; waiting for a free slot"
                    );
                    tokio::time::sleep(delay).await;
                    continue;
                }
                Err(e) if patient && e.is_network() => e,
                Err(e) => return Err(FileError::new(ErrorCode::Connection, e.to_string(), true)),
            };
            self.wait_for_network(error).await?;
        };
        if let Some(after) = self.patience().reachable(Instant::now()) {
            (self.weather)(&Weather::Reachable {
                relay: self.relay.clone(),
                after,
            });
        }
        self.connections.fetch_add(1, Ordering::Relaxed);
        *cur = Some(c.clone());
        tokio::spawn(watchdog(c.clone(), self.silence, self.observer.clone()));
        Ok(c)
    }

    /// After a try failed for want of a network: waits out the backoff (with a
    /// notice when due), or gives up when patience has run out.
    async fn wait_for_network(&self, error: Failure) -> Result<(), FileError> {
        let now = Instant::now();
        let (step, limit, first) = {
            let mut p = self.patience();
            let first = !p.waiting();
            (p.unreachable(now, rand::random::<f64>()), p.limit(), first)
        };
        if first {
            self.outages.fetch_add(1, Ordering::Relaxed);
        }
        match step {
            Step::Retry { delay, notice } => {
                tracing::debug!(?delay, error = %error, "relay unreachable; trying again");
                if let Some(n) = notice {
                    (self.weather)(&Weather::Unreachable {
                        relay: self.relay.clone(),
                        waited: n.waited,
                        until: SystemTime::now() + n.left,
                        patience: limit,
                        error: n.first.then(|| error.to_string()),
                    });
                }
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Step::GiveUp { waited } => {
                (self.weather)(&Weather::GaveUp {
                    relay: self.relay.clone(),
                    waited,
                    patience: limit,
                });
                self.out_of_patience.send_replace(true);
                Err(FileError::new(
                    ErrorCode::Unreachable,
                    format!(
                        "the relay stayed unreachable for {} (--patience): {error}",
                        human(waited)
                    ),
                    false,
                ))
            }
        }
    }

    /// One try: resolve `--relay` again (a name may point elsewhere now) and
    /// connect, under the same trust (pin or CA) as ever.
    async fn connect_once(&self) -> Result<Connection, Failure> {
        let addr = if self.relay.is_empty() {
            self.addr
        } else {
            match resolve(&self.relay).await {
                Ok((addr, _)) => addr,
                Err(e) => return Err(Failure::Resolve(e)),
            }
        };
        if addr != self.addr {
            tracing::info!(relay = %self.relay, was = %self.addr, now = %addr, "relay name resolves elsewhere now");
        }
        self.connector
            .connect(addr, &self.name, self.timeout)
            .await
            .map_err(Failure::Connect)
    }
}

/// Why one try to connect failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Resolve(AddressError),
    #[error(transparent)]
    Connect(ConnectError),
}

impl Failure {
    /// The network is away (no answer, no route, no name service), as opposed
    /// to an answer that says no (a certificate that does not match the pin).
    fn is_network(&self) -> bool {
        match self {
            Failure::Resolve(AddressError::Lookup { .. } | AddressError::NoAddress { .. }) => true,
            Failure::Resolve(AddressError::NoPort { .. }) => false,
            Failure::Connect(e) => e.is_network(),
        }
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

/// Closes `conn` when the relay stops acknowledging anything for `silence`
/// (default 10 s, `--idle-timeout`), so its files fail as retryable and resume
/// over a new connection. QUIC's own idle timeout (60 s) would catch this too,
/// but far later; and a relay restarted on the same address answers old
/// packets with stateless resets this client cannot authenticate, so only
/// acknowledged (authenticated) frames count as signs of life. Keep-alives go
/// out at a third of `silence` (`Connector::keep_alive`), each answered by an
/// ACK, so a live relay is never this quiet.
///
/// A connection that ends this way spent its last seconds in an outage: its
/// path estimate is forgotten, so neither the next run's warm start (the path
/// cache) nor the next connection starts from it; a later connection that
/// measures the path afresh replaces it.
async fn watchdog(conn: Connection, silence: Duration, observer: Arc<PathObserver>) {
    let mut acks = conn.stats().frame_rx.acks;
    let mut heard = Instant::now();
    let mut trace = PathTrace::new(&conn);
    let tick = (silence / 4).clamp(Duration::from_millis(100), Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = conn.closed() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        trace.tick(&conn);
        let now = conn.stats().frame_rx.acks;
        if now != acks {
            acks = now;
            heard = Instant::now();
        } else if heard.elapsed() >= silence {
            tracing::warn!(
                remote = %conn.remote_address(),
                silent_s = silence.as_secs_f64(),
                "relay not responding; reconnecting"
            );
            observer.forget();
            conn.close(
                relay_proto::protocol::app_error::CLIENT_ABORT.into(),
                b"relay not responding",
            );
            return;
        }
    }
}

/// Patience ran out: the run stops (`RelayLink::wait_gave_up`) and reports
/// the work in flight as stopped, resumable; it must not be reported failed
/// meanwhile, so it waits here to be dropped.
pub async fn out_of_patience() -> std::convert::Infallible {
    std::future::pending().await
}
