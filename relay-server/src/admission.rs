//! Who gets a connection, and what a connection costs before it authenticates.
//!
//! Anyone who can reach the UDP port can open connections; only a valid Offer
//! (a known token) makes one worth resources. So a connection moves through two
//! stages:
//! - **pending** (handshake, then until its first valid Offer): counted against
//!   `max_pending`, never against `--max-connections`; small QUIC windows and
//!   few streams (`Windows::transport_before_auth`); closed after `auth_deadline`.
//!   Once many are pending, new peers must prove their address (QUIC Retry), so
//!   a flood of spoofed Initials costs one stateless packet each.
//! - **authenticated**: takes a `--max-connections` slot and gets the configured
//!   windows and stream count. If no slot is free it is closed with `BUSY` and
//!   the client retries later.
//!
//! Every connection, in either stage, also holds one of its source address's
//! `max_per_address` slots, so one host cannot take every pending slot.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quinn::{Connection, Incoming, VarInt};
use relay_transport::quic::Windows;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections that have not presented a valid Offer yet (handshakes included).
    pub max_pending: usize,
    /// Connections (pending or authenticated) from one source address.
    pub max_per_address: usize,
    /// From the first packet to a valid Offer.
    pub auth_deadline: Duration,
    /// Connection receive window before authentication (bytes).
    pub window_before_auth: u64,
    /// Concurrent bidirectional streams before authentication.
    pub streams_before_auth: u64,
    /// Pending connections above which new peers must validate their address.
    pub retry_above_pending: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pending: 128,
            max_per_address: 32,
            auth_deadline: Duration::from_secs(10),
            window_before_auth: 1 << 20,
            streams_before_auth: 4,
            retry_above_pending: 32,
        }
    }
}

impl Limits {
    /// Worst-case memory of all pending connections' receive buffers.
    pub fn pending_bytes(&self) -> u64 {
        self.max_pending as u64 * self.window_before_auth
    }
}

/// Counts of refusals, for `/metrics` (cheap, lock-free).
#[derive(Debug, Default)]
pub struct Refusals {
    pub pending_full: std::sync::atomic::AtomicU64,
    pub per_address: std::sync::atomic::AtomicU64,
    pub retry_sent: std::sync::atomic::AtomicU64,
    pub connections_full: std::sync::atomic::AtomicU64,
    pub auth_deadline: std::sync::atomic::AtomicU64,
}

pub struct Admission {
    limits: Limits,
    windows: Windows,
    pending: Arc<Semaphore>,
    authenticated: Arc<Semaphore>,
    max_connections: usize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    pub refusals: Refusals,
}

impl Admission {
    pub fn new(limits: Limits, max_connections: usize, windows: Windows) -> Self {
        Self {
            limits,
            windows,
            pending: Arc::new(Semaphore::new(limits.max_pending.max(1))),
            authenticated: Arc::new(Semaphore::new(max_connections.max(1))),
            max_connections: max_connections.max(1),
            per_address: Mutex::new(HashMap::new()),
            refusals: Refusals::default(),
        }
    }

    pub fn pending_now(&self) -> usize {
        self.limits.max_pending.max(1) - self.pending.available_permits()
    }

    pub fn authenticated_now(&self) -> usize {
        self.max_connections - self.authenticated.available_permits()
    }

    /// Decides on a new connection attempt; `None` when it was refused or sent a
    /// Retry (the peer comes back with a validated address).
    pub fn admit(self: &Arc<Self>, incoming: Incoming) -> Option<Pending> {
        let remote = incoming.remote_address();
        if self.pending_now() >= self.limits.retry_above_pending
            && !incoming.remote_address_validated()
            && incoming.may_retry()
        {
            self.refusals.retry_sent.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = incoming.retry() {
                e.into_incoming().ignore();
            }
            return None;
        }
        let Ok(pending) = self.pending.clone().try_acquire_owned() else {
            self.refusals.pending_full.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%remote, "too many unauthenticated connections; refusing");
            incoming.refuse();
            return None;
        };
        let Some(address) = AddressSlot::take(self, remote.ip()) else {
            self.refusals.per_address.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%remote, "too many connections from this address; refusing");
            incoming.refuse();
            return None;
        };
        Some(Pending {
            incoming,
            remote,
            admitted: Admitted {
                admission: self.clone(),
                gate: Arc::new(AuthGate::default()),
                pending: Some(pending),
                connection: None,
                _address: address,
            },
        })
    }
}

/// One of a source address's `max_per_address` slots, returned on drop.
struct AddressSlot {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl AddressSlot {
    fn take(admission: &Arc<Admission>, ip: IpAddr) -> Option<Self> {
        let mut map = admission
            .per_address
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= admission.limits.max_per_address.max(1) {
            return None;
        }
        *n += 1;
        Some(Self {
            admission: admission.clone(),
            ip,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self
            .admission
            .per_address
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// A connection attempt that holds a pending slot.
pub struct Pending {
    incoming: Incoming,
    remote: SocketAddr,
    admitted: Admitted,
}

impl Pending {
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Completes the handshake within the authentication deadline.
    pub async fn handshake(self) -> Option<(Connection, Admitted)> {
        let deadline = self.admitted.admission.limits.auth_deadline;
        match tokio::time::timeout(deadline, self.incoming).await {
            Ok(Ok(conn)) => Some((conn, self.admitted)),
            Ok(Err(e)) => {
                tracing::debug!(remote = %self.remote, error = %e, "handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!(remote = %self.remote, "handshake not done in time");
                None
            }
        }
    }
}

/// Opened by the first valid Offer on a connection.
#[derive(Debug, Default)]
pub struct AuthGate {
    open: AtomicBool,
    notify: Notify,
}

impl AuthGate {
    pub fn open(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            // notify_one keeps a permit if nobody waits yet.
            self.notify.notify_one();
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub async fn opened(&self) {
        while !self.is_open() {
            self.notify.notified().await;
        }
    }
}

/// A connection's slots: pending until promoted, then a `--max-connections` slot.
pub struct Admitted {
    admission: Arc<Admission>,
    gate: Arc<AuthGate>,
    pending: Option<OwnedSemaphorePermit>,
    connection: Option<OwnedSemaphorePermit>,
    _address: AddressSlot,
}

impl Admitted {
    /// How long the connection may stay unauthenticated after its handshake.
    pub fn deadline(&self) -> Duration {
        self.admission.limits.auth_deadline
    }

    pub fn gate(&self) -> Arc<AuthGate> {
        self.gate.clone()
    }

    pub fn is_authenticated(&self) -> bool {
        self.connection.is_some()
    }

    pub fn count_deadline_missed(&self) {
        self.admission
            .refusals
            .auth_deadline
            .fetch_add(1, Ordering::Relaxed);
    }

    /// After a valid Offer: count the connection against `--max-connections`
    /// (or refuse it) and raise its windows to the configured ones.
    pub fn promote(&mut self, conn: &Connection) -> Result<(), &'static str> {
        if self.connection.is_some() {
            return Ok(());
        }
        let Ok(slot) = self.admission.authenticated.clone().try_acquire_owned() else {
            self.admission
                .refusals
                .connections_full
                .fetch_add(1, Ordering::Relaxed);
            return Err("relay at its connection limit; retry later");
        };
        self.connection = Some(slot);
        self.pending = None;
        let w = &self.admission.windows;
        let var = |v: u64| VarInt::from_u64(v).unwrap_or(VarInt::MAX);
        conn.set_receive_window(var(w.connection_window));
        conn.set_max_concurrent_bi_streams(var(w.max_streams()));
        Ok(())
    }
}

/// Admission and budget-wait series for `/metrics`.
pub fn render_metrics(a: &Admission, budget: &relay_storage::staging::Budget, out: &mut String) {
    use crate::metrics::render_value;
    let r = &a.refusals;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    render_value(
        out,
        "blob_relay_connections_pending",
        "gauge",
        "Connections without a valid Offer yet (handshakes included).",
        a.pending_now() as u64,
    );
    render_value(
        out,
        "blob_relay_connections_authenticated",
        "gauge",
        "Connections that presented a valid Offer (counted against --max-connections).",
        a.authenticated_now() as u64,
    );
    let _ = std::fmt::Write::write_fmt(
        out,
        format_args!(
            "# HELP blob_relay_connections_refused_total Connection attempts refused or closed by admission, by reason.\n# TYPE blob_relay_connections_refused_total counter\n"
        ),
    );
    for (reason, v) in [
        ("pending_full", get(&r.pending_full)),
        ("per_address", get(&r.per_address)),
        ("connections_full", get(&r.connections_full)),
        ("no_offer_in_time", get(&r.auth_deadline)),
        ("retry_sent", get(&r.retry_sent)),
    ] {
        let _ = std::fmt::Write::write_fmt(
            out,
            format_args!("blob_relay_connections_refused_total{{reason=\"{reason}\"}} {v}\n"),
        );
    }
    render_value(
        out,
        "blob_relay_budget_waiting_blocks",
        "gauge",
        "Blocks waiting for memory from the budget right now.",
        budget.waiting(),
    );
}
