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
//! `max_per_address` slots, so one host cannot take every pending slot. An
//! IPv6 "address" here is its /64 (`host_of`): a host or site is given a whole
//! /64, and each of its 2^64 addresses would otherwise have slots of its own.
//!
//! When every pending slot is taken, a newcomer is not refused: the oldest
//! pending connection of the address holding the most pending slots is evicted
//! (closed with `UNAUTHENTICATED`) and the newcomer takes its slot, as SYN-flood
//! defences drop the oldest half-open connection. Peers holding slots without
//! authenticating therefore cannot lock legitimate clients out: a real client
//! presents its Offer within a round trip of its handshake, while an attacker
//! would have to cycle every pending slot faster than that, each new connection
//! costing it a Retry round trip once many are pending.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quinn::{Connection, Incoming, VarInt};
use relay_transport::quic::Windows;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::connection::stream_credit::{ConnectionCredit, StreamPool};

/// What admission counts per: an IPv4 address, or the /64 of an IPv6 one (an
/// IPv4-mapped IPv6 address is its IPv4 address).
pub fn host_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// The pending connections, oldest first; the slot count is the length.
#[derive(Default)]
struct PendingSet {
    next_id: u64,
    entries: VecDeque<PendingEntry>,
}

struct PendingEntry {
    id: u64,
    /// `host_of` the peer's address.
    ip: IpAddr,
    evict: Arc<Latch>,
}

impl PendingSet {
    /// The entry to evict for a newcomer: the oldest of the address with the
    /// most pending connections (so a host flooding the relay evicts itself).
    fn victim(&self) -> Option<usize> {
        let mut per_ip: HashMap<IpAddr, usize> = HashMap::new();
        for e in &self.entries {
            *per_ip.entry(e.ip).or_insert(0) += 1;
        }
        let most = per_ip.values().copied().max()?;
        // `entries` is oldest first, so the first match is that address's oldest.
        self.entries.iter().position(|e| per_ip[&e.ip] == most)
    }
}

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

/// Counts of refusals, for `/metrics` (cheap, lock-free).
#[derive(Debug, Default)]
pub struct Refusals {
    /// Pending connections closed to make room for a newcomer.
    pub evicted: std::sync::atomic::AtomicU64,
    pub per_address: std::sync::atomic::AtomicU64,
    pub retry_sent: std::sync::atomic::AtomicU64,
    pub connections_full: std::sync::atomic::AtomicU64,
    pub auth_deadline: std::sync::atomic::AtomicU64,
    /// Closed because an Offer was refused for its token or grant before any
    /// Offer of the connection was valid.
    pub refused_offer: std::sync::atomic::AtomicU64,
}

pub struct Admission {
    limits: Limits,
    windows: Windows,
    pending: Mutex<PendingSet>,
    authenticated: Arc<Semaphore>,
    max_connections: usize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    pub refusals: Refusals,
    /// Stream slots authenticated connections borrow beyond their base.
    pub streams: Arc<StreamPool>,
}

impl Admission {
    pub fn new(limits: Limits, max_connections: usize, windows: Windows) -> Self {
        Self {
            limits,
            windows,
            pending: Mutex::new(PendingSet::default()),
            authenticated: Arc::new(Semaphore::new(max_connections.max(1))),
            max_connections: max_connections.max(1),
            per_address: Mutex::new(HashMap::new()),
            refusals: Refusals::default(),
            streams: Arc::new(StreamPool::new(max_connections)),
        }
    }

    /// `--max-rate`: what the relay's connections send at most (Mbit/s), a
    /// bound on the pace a download's compression is judged against.
    pub fn max_rate_mbit(&self) -> Option<f64> {
        self.windows.max_rate_mbit
    }

    /// The stream limit of an accepted connection, drawn from this relay's pool.
    /// `storage_queue`: storage requests the relay sends at once.
    pub fn stream_credit(&self, conn: &Connection, storage_queue: u64) -> Arc<ConnectionCredit> {
        ConnectionCredit::new(
            &self.windows,
            storage_queue,
            self.limits.streams_before_auth,
            self.streams.clone(),
            conn.clone(),
        )
    }

    pub fn pending_now(&self) -> usize {
        self.pending_set().entries.len()
    }

    fn pending_set(&self) -> std::sync::MutexGuard<'_, PendingSet> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a pending slot for `ip`, evicting the oldest pending connection of
    /// the busiest address if every slot is taken.
    fn take_pending(self: &Arc<Self>, ip: IpAddr) -> PendingSlot {
        let mut set = self.pending_set();
        if set.entries.len() >= self.limits.max_pending.max(1)
            && let Some(i) = set.victim()
            && let Some(victim) = set.entries.remove(i)
        {
            self.refusals.evicted.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(ip = %victim.ip, "pending slots full; evicting the oldest of the busiest address");
            victim.evict.open();
        }
        let id = set.next_id;
        set.next_id += 1;
        let evict = Arc::new(Latch::default());
        set.entries.push_back(PendingEntry {
            id,
            ip,
            evict: evict.clone(),
        });
        PendingSlot {
            admission: self.clone(),
            id,
            evict,
        }
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
        let Some(admitted) = self.slots_for(remote.ip()) else {
            self.refusals.per_address.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%remote, "too many connections from this address; refusing");
            incoming.refuse();
            return None;
        };
        Some(Pending {
            incoming,
            remote,
            admitted,
        })
    }

    /// An address slot and a pending slot for a connection from `ip`, and its
    /// authentication deadline, counted from now (its first packet); `None`
    /// when the address holds all its slots.
    fn slots_for(self: &Arc<Self>, ip: IpAddr) -> Option<Admitted> {
        let host = host_of(ip);
        let address = AddressSlot::take(self, host)?;
        let pending = self.take_pending(host);
        Some(Admitted {
            admission: self.clone(),
            gate: Arc::new(Latch::default()),
            pending: Some(pending),
            connection: None,
            deadline: Instant::now() + self.limits.auth_deadline,
            _address: address,
        })
    }
}

/// A pending slot; returned on drop unless it was evicted (then the newcomer
/// that evicted it already holds it).
struct PendingSlot {
    admission: Arc<Admission>,
    id: u64,
    evict: Arc<Latch>,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut set = self.admission.pending_set();
        if let Some(i) = set.entries.iter().position(|e| e.id == self.id) {
            set.entries.remove(i);
        }
    }
}

/// One of a source address's `max_per_address` slots, returned on drop.
struct AddressSlot {
    admission: Arc<Admission>,
    /// `host_of` the peer's address.
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
        let deadline = self.admitted.deadline();
        let evicted = self.admitted.eviction();
        tokio::select! {
            r = tokio::time::timeout_at(deadline, self.incoming) => match r {
                Ok(Ok(conn)) => Some((conn, self.admitted)),
                Ok(Err(e)) => {
                    tracing::debug!(remote = %self.remote, error = %e, "handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(remote = %self.remote, "handshake not done in time");
                    None
                }
            },
            _ = evicted.opened() => {
                tracing::debug!(remote = %self.remote, "evicted during its handshake");
                None
            }
        }
    }
}

/// Opened by the first valid Offer on a connection.
pub type AuthGate = Latch;

/// A one-way signal: opened once, seen by every waiter, before or after.
#[derive(Debug, Default)]
pub struct Latch {
    open: AtomicBool,
    notify: Notify,
}

impl Latch {
    pub fn open(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            // Wakes every current waiter; later ones see `open` and never wait.
            self.notify.notify_waiters();
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub async fn opened(&self) {
        loop {
            // Registered before the check, so an `open` in between still wakes us.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_open() {
                return;
            }
            notified.await;
        }
    }
}

/// A connection's slots: pending until promoted, then a `--max-connections` slot.
pub struct Admitted {
    admission: Arc<Admission>,
    gate: Arc<AuthGate>,
    pending: Option<PendingSlot>,
    connection: Option<OwnedSemaphorePermit>,
    /// `auth_deadline` after the connection's first packet: its handshake and
    /// its wait for a valid Offer together.
    deadline: Instant,
    _address: AddressSlot,
}

impl Admitted {
    /// When the connection is closed if it has not authenticated by then.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    pub fn gate(&self) -> Arc<AuthGate> {
        self.gate.clone()
    }

    /// Opened if a newcomer evicted this connection while it was pending.
    pub fn eviction(&self) -> Arc<Latch> {
        self.pending
            .as_ref()
            .map(|p| p.evict.clone())
            .unwrap_or_default()
    }

    pub fn is_authenticated(&self) -> bool {
        self.connection.is_some()
    }

    pub fn count_refused_offer(&self) {
        self.admission
            .refusals
            .refused_offer
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_deadline_missed(&self) {
        self.admission
            .refusals
            .auth_deadline
            .fetch_add(1, Ordering::Relaxed);
    }

    /// After a valid Offer: count the connection against `--max-connections`
    /// (or refuse it) and raise its window to the configured one. (Its stream
    /// limit is raised by its `ConnectionCredit`.)
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
        Ok(())
    }
}

/// Admission and budget-wait series for `/metrics`; `blocks_waiting` is
/// `Shared::blocks_waiting` (the shared budget and every token's share).
pub fn render_metrics(
    a: &Admission,
    blocks_waiting: u64,
    out: &mut crate::telemetry::exposition::Exposition,
) {
    use crate::telemetry::exposition::Kind;
    let r = &a.refusals;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    out.value(
        "blob_relay_connections_pending",
        Kind::Gauge,
        "Connections without a valid Offer yet (handshakes included).",
        a.pending_now() as u64,
    );
    out.value(
        "blob_relay_connections_authenticated",
        Kind::Gauge,
        "Connections that presented a valid Offer (counted against --max-connections).",
        a.authenticated_now() as u64,
    );
    out.labelled(
        "blob_relay_connections_refused_total",
        Kind::Counter,
        "Connection attempts refused or closed by admission, by reason.",
        [
            ("evicted_oldest_pending", get(&r.evicted)),
            ("per_address", get(&r.per_address)),
            ("connections_full", get(&r.connections_full)),
            ("no_offer_in_time", get(&r.auth_deadline)),
            ("offer_refused", get(&r.refused_offer)),
            ("retry_sent", get(&r.retry_sent)),
        ]
        .map(|(reason, v)| ([("reason", reason)], v)),
    );
    out.value(
        "blob_relay_streams_borrowed",
        Kind::Gauge,
        "Stream slots connections of small files borrowed beyond their base (of blob_relay_streams_pool).",
        a.streams.borrowed(),
    );
    out.value(
        "blob_relay_streams_pool",
        Kind::Gauge,
        "Stream slots there are to borrow: (512 - 128) per --max-connections.",
        a.streams.total(),
    );
    out.value(
        "blob_relay_budget_waiting_blocks",
        Kind::Gauge,
        "Blocks waiting for memory right now, for the budget or for their token's share of it.",
        blocks_waiting,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ips: &[&str]) -> PendingSet {
        let mut s = PendingSet::default();
        for ip in ips {
            let id = s.next_id;
            s.next_id += 1;
            s.entries.push_back(PendingEntry {
                id,
                ip: ip.parse().unwrap_or_else(|e| panic!("{e}")),
                evict: Arc::default(),
            });
        }
        s
    }

    #[test]
    fn the_victim_is_the_oldest_of_the_busiest_address() {
        // 10.0.0.1 is oldest overall, but 10.0.0.2 holds the most slots.
        let s = set(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.2", "10.0.0.2"]);
        assert_eq!(s.victim(), Some(1));
        // A tie: the oldest of the tied addresses.
        let s = set(&["10.0.0.3", "10.0.0.1", "10.0.0.1", "10.0.0.3"]);
        assert_eq!(s.victim(), Some(0));
        assert_eq!(set(&[]).victim(), None);
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_ipv4_ones_each_alone() {
        assert_eq!(host_of(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(host_of(ip("2001:db8:1:2::ffff")), ip("2001:db8:1:2::"));
        assert_ne!(host_of(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(host_of(ip("10.0.0.1")), ip("10.0.0.1"));
        assert_ne!(host_of(ip("10.0.0.2")), host_of(ip("10.0.0.1")));
        assert_eq!(host_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    }

    #[test]
    fn one_ipv6_64_holds_the_slots_of_one_address() {
        let limits = Limits {
            max_per_address: 2,
            ..Limits::default()
        };
        let admission = Arc::new(Admission::new(limits, 4, Windows::default()));
        let a = admission.slots_for(ip("2001:db8::1"));
        let b = admission.slots_for(ip("2001:db8::2:0:0:2"));
        assert!(a.is_some() && b.is_some());
        // Any other address of the same /64: refused, as a third connection
        // from one address would be.
        assert!(
            admission
                .slots_for(ip("2001:db8::ffff:ffff:ffff:3"))
                .is_none()
        );
        // Another /64 and an IPv4 address have their own.
        assert!(admission.slots_for(ip("2001:db8:0:1::1")).is_some());
        assert!(admission.slots_for(ip("10.0.0.1")).is_some());
        // The pending connections count by /64 too: they are one host's.
        let set = admission.pending_set();
        assert_eq!(set.entries[0].ip, set.entries[1].ip);
    }

    #[tokio::test(start_paused = true)]
    async fn the_auth_deadline_counts_from_the_first_packet() {
        let limits = Limits {
            auth_deadline: Duration::from_secs(10),
            ..Limits::default()
        };
        let admission = Arc::new(Admission::new(limits, 4, Windows::default()));
        let ip: IpAddr = "10.0.0.1".parse().unwrap_or_else(|e| panic!("{e}"));
        let admitted = admission.slots_for(ip).unwrap_or_else(|| panic!("no slot"));
        // A handshake that took 6 s leaves 4 s to authenticate, not 10.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(
            admitted
                .deadline()
                .saturating_duration_since(Instant::now()),
            Duration::from_secs(4)
        );
    }

    #[tokio::test]
    async fn a_latch_wakes_waiters_before_and_after_it_opens() {
        let latch = Arc::new(Latch::default());
        let waiter = {
            let l = latch.clone();
            tokio::spawn(async move { l.opened().await })
        };
        tokio::task::yield_now().await;
        latch.open();
        waiter.await.unwrap_or_else(|e| panic!("{e}"));
        // Opened already: returns at once, any number of times.
        latch.opened().await;
        latch.opened().await;
    }
}
