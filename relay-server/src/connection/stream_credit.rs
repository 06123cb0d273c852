//! How many streams (files) one connection may have open: as many as the files
//! it has open leave room for in its window, by their declared sizes.
//!
//! A long path needs bytes in flight, and a small file's bytes are few: at
//! 200 ms × 200 Mbit/s (5 MB) it takes ~1,200 files of 4 KiB in flight to fill
//! the path, where four 64 MiB files fill the whole connection window. So a
//! connection's stream limit follows what its open files declared: each counts
//! its size (in 64 KiB units, at most one stream window) against the
//! connection window, a stream whose Offer has not been read yet counts one
//! unit, and the limit is the open streams plus the units left.
//!
//! Files whose bytes have all arrived wait only for storage. More of them than
//! storage takes at once (`--storage-concurrency`) buy nothing but memory and
//! CPU, so they do not raise the limit: it is at most the streams still
//! receiving plus that many.
//!
//! What a stream costs the relay beyond its bytes (its Offer, its task, quinn's
//! state: `PER_STREAM_STATE`) stays inside the memory bound because streams are
//! drawn from a relay-wide pool sized exactly as the bound counts them: every
//! authenticated connection always has `BASE_STREAMS`; beyond that it borrows
//! from `StreamPool`, which holds `STREAMS_IN_BOUND - BASE_STREAMS` per
//! connection of `--max-connections`. The bound is the same as when every
//! connection had `STREAMS_IN_BOUND` streams; a connection of small files may
//! now use the slots of connections that are not there or do not need them. One
//! connection borrows at most a quarter of the pool (or what `STREAMS_IN_BOUND`
//! gives it, if more), so a peer that takes all it can leaves the rest to others,
//! who keep their base streams whatever happens.
//!
//! quinn cannot take back stream credit it already gave: after the limit is
//! lowered the peer may still open the streams credited before, and quinn only
//! credits new ones once the open ones drop below the new limit. `Credit` keeps
//! the same count (`held`) and returns a borrowed slot only when a stream closes
//! and `held` falls, so the pool never lends a slot a peer may still fill.
//!
//! `Credit` is the pure rule (unit-tested); `ConnectionCredit` applies it to a
//! quinn connection and the pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use quinn::VarInt;
use relay_transport::quic::Windows;

/// Streams every authenticated connection has, whatever others borrowed.
/// 128 files of 64 KiB are 8 MiB in flight: 335 Mbit/s at 200 ms before any
/// borrowing.
pub const BASE_STREAMS: u64 = 128;
/// Streams per connection the memory bound counts (`per_connection_state`):
/// the pool is what `--max-connections` connections of this many would hold
/// beyond their base.
pub const STREAMS_IN_BOUND: u64 = 512;
/// Never more on one connection (quinn allocates state for every credited
/// stream at once; 4,096 files of 4 KiB fill 440 Mbit/s at 300 ms).
pub const MAX_STREAMS_PER_CONNECTION: u64 = 4096;

/// A file's share of the connection window is counted in these units.
const UNIT: u64 = 64 << 10;

/// Stream slots beyond the base, shared by every connection of the relay.
#[derive(Debug)]
pub struct StreamPool {
    free: AtomicU64,
    total: u64,
    /// Most one connection may borrow.
    per_connection: u64,
}

impl StreamPool {
    /// The pool for `max_connections` connections.
    pub fn new(max_connections: usize) -> Self {
        let total = max_connections.max(1) as u64 * (STREAMS_IN_BOUND - BASE_STREAMS);
        let per_connection = (total / 4)
            .max(STREAMS_IN_BOUND - BASE_STREAMS)
            .min(total)
            .min(MAX_STREAMS_PER_CONNECTION - BASE_STREAMS);
        Self {
            free: AtomicU64::new(total),
            total,
            per_connection,
        }
    }

    /// Takes up to `n` slots; returns how many it got.
    fn take(&self, n: u64) -> u64 {
        let mut got = 0;
        let _ = self
            .free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                got = free.min(n);
                Some(free - got)
            });
        got
    }

    fn give(&self, n: u64) {
        self.free.fetch_add(n, Ordering::AcqRel);
    }

    /// Slots lent out now.
    pub fn borrowed(&self) -> u64 {
        self.total - self.free.load(Ordering::Acquire).min(self.total)
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Most streams one connection may have open.
    pub fn max_per_connection(&self) -> u64 {
        BASE_STREAMS + self.per_connection
    }
}

/// One connection's streams: the pure rule.
#[derive(Debug, Clone)]
pub struct Credit {
    window_units: u64,
    stream_units: u64,
    max: u64,
    /// Files waiting for storage worth having: what storage takes at once.
    storage_queue: u64,
    /// Streams accepted and not finished.
    open: u64,
    /// Of those, the ones whose bytes have not all arrived.
    receiving: u64,
    /// Their sizes in units (one for a stream whose Offer is not read yet).
    declared: u64,
    /// The limit quinn has now.
    limit: u64,
    /// What the peer may have open: the most quinn may have credited and not
    /// seen closed (at least `limit`). Slots beyond the base are borrowed.
    held: u64,
}

/// What to do after a change: borrow or return pool slots, tell quinn a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Change {
    pub give_back: u64,
    pub new_limit: Option<u64>,
}

impl Credit {
    /// `before_auth`: the limit quinn gave the connection at its handshake
    /// (the admission's few streams). The model starts from it, so the first
    /// limit it wants after authentication is always told to quinn, even one
    /// that equals the base.
    pub fn new(windows: &Windows, max_streams: u64, storage_queue: u64, before_auth: u64) -> Self {
        let window_units = (windows.connection_window / UNIT).max(1);
        Self {
            window_units,
            stream_units: (windows.stream_window / UNIT).clamp(1, window_units),
            max: max_streams.max(BASE_STREAMS),
            storage_queue,
            open: 0,
            receiving: 0,
            declared: 0,
            limit: before_auth,
            held: BASE_STREAMS,
        }
    }

    /// A file of `size` bytes counts this many units against the window.
    pub fn units(&self, size: u64) -> u64 {
        size.div_ceil(UNIT).clamp(1, self.stream_units)
    }

    pub fn opened(&mut self) {
        self.open += 1;
        self.receiving += 1;
        self.declared += 1;
    }

    /// A stream's bytes have all arrived (or stopped): it waits for storage.
    pub fn received(&mut self) {
        self.receiving = self.receiving.saturating_sub(1);
    }

    /// A stream's Offer said `units` (it counted one until now).
    pub fn declared(&mut self, units: u64) {
        self.declared = (self.declared + units).saturating_sub(1);
    }

    /// A stream that counted `units` finished (`receiving`: before all its
    /// bytes arrived): its slot comes back once quinn no longer credits it.
    /// Returns the slots to give back to the pool.
    pub fn closed(&mut self, units: u64, receiving: bool) -> u64 {
        if receiving {
            self.received();
        }
        self.open = self.open.saturating_sub(1);
        self.declared = self.declared.saturating_sub(units);
        // The base is never borrowed: `held` stays at least that.
        let held = self
            .held
            .saturating_sub(1)
            .max(self.limit)
            .max(BASE_STREAMS);
        let back = self.held - held;
        self.held = held;
        back
    }

    /// The limit the open files ask for: room in the window by their sizes,
    /// and no more waiting for storage than storage takes at once.
    pub fn wanted(&self) -> u64 {
        let room = self.window_units.saturating_sub(self.declared);
        let by_window = self.open + room;
        let by_storage = self.receiving + self.storage_queue;
        by_window.min(by_storage).clamp(BASE_STREAMS, self.max)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    /// Slots borrowed from the pool now.
    pub fn borrowed(&self) -> u64 {
        self.held - BASE_STREAMS
    }

    /// Moves the limit toward `wanted`, borrowing with `borrow(n) -> got`. A
    /// lower limit returns nothing yet (`closed` does, as streams close).
    pub fn rebalance(&mut self, borrow: impl FnOnce(u64) -> u64) -> Option<u64> {
        let want = self.wanted();
        if want > self.limit {
            if want > self.held {
                self.held += borrow(want - self.held).min(want - self.held);
            }
            let limit = want.min(self.held);
            (limit != self.limit).then(|| {
                self.limit = limit;
                limit
            })
        } else if want < self.limit {
            self.limit = want;
            Some(want)
        } else {
            None
        }
    }
}

/// `Credit` applied to a connection: tells quinn each new limit and borrows
/// from (and returns to) the relay's pool. Inactive until the connection
/// authenticates (until then the admission's few streams apply).
pub struct ConnectionCredit {
    credit: Mutex<Credit>,
    pool: Arc<StreamPool>,
    conn: quinn::Connection,
    active: std::sync::atomic::AtomicBool,
}

impl ConnectionCredit {
    /// `storage_queue`: storage requests the relay sends at once;
    /// `before_auth`: the stream limit the connection has until it
    /// authenticates (`admission::Limits::streams_before_auth`).
    pub fn new(
        windows: &Windows,
        storage_queue: u64,
        before_auth: u64,
        pool: Arc<StreamPool>,
        conn: quinn::Connection,
    ) -> Arc<Self> {
        Arc::new(Self {
            credit: Mutex::new(Credit::new(
                windows,
                pool.max_per_connection(),
                storage_queue,
                before_auth,
            )),
            pool,
            conn,
            active: false.into(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Credit> {
        self.credit.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection authenticated: from now on its limit follows its files.
    pub fn activate(&self) {
        self.active.store(true, Ordering::Release);
        self.apply(|_| 0);
    }

    /// A stream was accepted; its slot returns when the ticket drops.
    pub fn open(self: &Arc<Self>) -> StreamTicket {
        self.apply(|c| {
            c.opened();
            0
        });
        StreamTicket {
            credit: self.clone(),
            units: 1,
            receiving: true,
        }
    }

    /// Applies `change` (which returns slots to give back to the pool), then
    /// moves the limit toward what the open files ask for.
    fn apply(&self, change: impl FnOnce(&mut Credit) -> u64) {
        let mut c = self.lock();
        self.pool.give(change(&mut c));
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        if let Some(limit) = c.rebalance(|n| self.pool.take(n)) {
            self.conn
                .set_max_concurrent_bi_streams(VarInt::from_u64(limit).unwrap_or(VarInt::MAX));
        }
    }

    /// The limit quinn has now (for tests and logs).
    pub fn limit(&self) -> u64 {
        self.lock().limit()
    }
}

impl Drop for ConnectionCredit {
    /// The connection is gone: every borrowed slot goes back.
    fn drop(&mut self) {
        let borrowed = self.lock().borrowed();
        self.pool.give(borrowed);
    }
}

/// One open stream's place in its connection's credit.
pub struct StreamTicket {
    credit: Arc<ConnectionCredit>,
    units: u64,
    receiving: bool,
}

impl StreamTicket {
    /// The stream's Offer declared `size` bytes.
    pub fn declare(&mut self, size: u64) {
        let mut units = 0;
        self.credit.apply(|c| {
            units = c.units(size);
            c.declared(units);
            0
        });
        self.units = units;
    }

    /// Every byte of the stream's file has arrived (or it stopped for good).
    pub fn received(&mut self) {
        if std::mem::replace(&mut self.receiving, false) {
            self.credit.apply(|c| {
                c.received();
                0
            });
        }
    }
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        let (units, receiving) = (self.units, self.receiving);
        self.credit.apply(|c| c.closed(units, receiving));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// Storage that takes any number of requests at once.
    const NO_QUEUE_LIMIT: u64 = 1 << 40;

    fn windows() -> Windows {
        Windows {
            stream_window: 64 * MIB,
            connection_window: 256 * MIB,
            ..Windows::default()
        }
    }

    /// A pool that lends up to `free` slots.
    fn lender(free: &mut u64) -> impl FnOnce(u64) -> u64 + '_ {
        move |n| {
            let got = n.min(*free);
            *free -= got;
            got
        }
    }

    #[test]
    fn small_files_raise_the_limit_and_large_ones_do_not() {
        let mut free = 1_000_000;
        let mut small = Credit::new(&windows(), 4096, NO_QUEUE_LIMIT, BASE_STREAMS);
        for _ in 0..BASE_STREAMS {
            small.opened();
            small.declared(small.units(4096));
        }
        assert_eq!(small.rebalance(lender(&mut free)), Some(4096));
        assert_eq!(small.borrowed(), 4096 - BASE_STREAMS);

        let mut large = Credit::new(&windows(), 4096, NO_QUEUE_LIMIT, BASE_STREAMS);
        for _ in 0..4 {
            large.opened();
            large.declared(large.units(1 << 40)); // counts one stream window
        }
        assert_eq!(large.rebalance(lender(&mut free)), None);
        assert_eq!(large.limit(), BASE_STREAMS);

        // 1 MiB files: the window holds 256 of them.
        let mut medium = Credit::new(&windows(), 4096, NO_QUEUE_LIMIT, BASE_STREAMS);
        for _ in 0..256 {
            medium.opened();
            medium.declared(medium.units(MIB));
        }
        assert_eq!(medium.rebalance(lender(&mut free)), Some(256));
    }

    #[test]
    fn a_stream_not_yet_declared_counts_one_unit() {
        let mut free = 1_000_000;
        let mut c = Credit::new(&windows(), 8192, NO_QUEUE_LIMIT, BASE_STREAMS);
        c.opened();
        assert_eq!(c.wanted(), 1 + 4096 - 1);
        assert_eq!(c.rebalance(lender(&mut free)), Some(4096));
        c.declared(c.units(64 * MIB));
        assert_eq!(c.wanted(), 1 + 4096 - 1024);
    }

    #[test]
    fn it_borrows_only_what_the_pool_has_and_never_drops_below_the_base() {
        let mut free = 100;
        let mut c = Credit::new(&windows(), 4096, NO_QUEUE_LIMIT, BASE_STREAMS);
        for _ in 0..10 {
            c.opened();
        }
        assert_eq!(c.rebalance(lender(&mut free)), Some(BASE_STREAMS + 100));
        assert_eq!((free, c.borrowed()), (0, 100));
        // Nothing left: the limit stays where it is.
        assert_eq!(c.rebalance(lender(&mut free)), None);
        let mut empty = 0;
        let mut d = Credit::new(&windows(), 4096, NO_QUEUE_LIMIT, BASE_STREAMS);
        d.opened();
        assert_eq!(d.rebalance(lender(&mut empty)), None);
        assert_eq!(d.limit(), BASE_STREAMS);
    }

    #[test]
    fn slots_come_back_only_as_streams_close_after_the_limit_falls() {
        let mut free = 10_000;
        let mut c = Credit::new(&windows(), 4096, NO_QUEUE_LIMIT, BASE_STREAMS);
        for _ in 0..1000 {
            c.opened();
            c.declared(1);
        }
        assert_eq!(c.rebalance(lender(&mut free)), Some(4096));
        // One huge Offer among them: the window is nearly full, the limit falls,
        // but quinn already credited 4,096 streams: nothing is returned yet.
        c.opened();
        c.declared(c.units(64 * MIB));
        let limit = c.rebalance(lender(&mut free));
        assert_eq!(limit, Some(1001 + 4096 - 1000 - 1024));
        assert_eq!(c.held(), 4096);
        // Each close returns one slot until `held` reaches the new limit.
        let mut back = 0;
        for _ in 0..1000 {
            back += c.closed(1, true);
            let _ = c.rebalance(lender(&mut free));
        }
        assert!(c.held() >= c.limit());
        assert_eq!(back + c.borrowed(), 4096 - BASE_STREAMS);
        // Every stream closed: the limit goes back up, borrowing again.
        let _ = c.closed(c.units(64 * MIB), true);
        let _ = c.rebalance(lender(&mut free));
        assert_eq!(c.limit(), BASE_STREAMS.max(c.wanted()));
    }

    #[test]
    fn files_waiting_for_storage_beyond_what_it_takes_do_not_raise_the_limit() {
        let mut free = 1_000_000;
        let mut c = Credit::new(&windows(), 4096, 128, BASE_STREAMS);
        // 300 files of 64 KiB all received, waiting for storage: storage takes
        // 128 at once, so the limit stays at the base and no new stream comes
        // until the queue drains.
        for _ in 0..300 {
            c.opened();
            c.declared(1);
            c.received();
        }
        assert_eq!(c.wanted(), BASE_STREAMS);
        assert_eq!(c.rebalance(lender(&mut free)), None);
        // 400 more still arriving: they may have room for as many again as
        // storage takes (their bytes are what fills the path).
        for _ in 0..400 {
            c.opened();
            c.declared(1);
        }
        assert_eq!(c.wanted(), 400 + 128);
        assert_eq!(c.rebalance(lender(&mut free)), Some(528));
        // The queue drains: each close leaves the limit where the receiving
        // streams put it.
        for _ in 0..300 {
            let _ = c.closed(1, false);
        }
        assert_eq!(c.wanted(), 528);
        // A stream that ends before its bytes all came counts as received once.
        let _ = c.closed(1, true);
        assert_eq!(c.wanted(), 399 + 128);
    }

    #[test]
    fn the_first_limit_after_authentication_is_told_to_quinn() {
        // quinn gives a new connection the admission's 4 streams. Storage that
        // takes 64 at once makes the wanted limit exactly the base: it must
        // still be told, or the connection keeps 4 streams for good.
        let mut free = 1_000_000;
        let mut c = Credit::new(&windows(), 4096, 64, 4);
        assert_eq!(c.limit(), 4);
        c.opened();
        assert_eq!(c.wanted(), BASE_STREAMS);
        assert_eq!(c.rebalance(lender(&mut free)), Some(BASE_STREAMS));
        assert_eq!(
            (c.limit(), c.borrowed(), free),
            (BASE_STREAMS, 0, 1_000_000)
        );
        // A stream that closed before authentication returns nothing: the base
        // is not the pool's.
        let mut d = Credit::new(&windows(), 4096, 64, 4);
        d.opened();
        assert_eq!(d.closed(1, true), 0);
        assert_eq!(d.borrowed(), 0);
    }

    #[test]
    fn the_pool_is_what_the_memory_bound_counts() {
        let pool = StreamPool::new(32);
        assert_eq!(pool.total(), 32 * (STREAMS_IN_BOUND - BASE_STREAMS));
        assert_eq!(pool.max_per_connection(), BASE_STREAMS + pool.total() / 4);
        // A relay for one connection still gives it what the bound counts.
        let one = StreamPool::new(1);
        assert_eq!(one.max_per_connection(), STREAMS_IN_BOUND);
        let big = StreamPool::new(1000);
        assert_eq!(big.max_per_connection(), MAX_STREAMS_PER_CONNECTION);
        assert_eq!(pool.take(u64::MAX), pool.total());
        assert_eq!(pool.take(1), 0);
        pool.give(pool.total());
        assert_eq!(pool.borrowed(), 0);
    }
}
