//! A run's relay connections (`--relay-connections N`, default 1): N
//! `RelayLink`s, each with its own UDP socket (so its own source port, and a
//! 5-tuple balancer may send it to another relay), its own QUIC flow and
//! congestion control, its own reconnects and patience. A file is given one
//! of them for its whole upload (`assign`, least loaded first: `spread.rs`);
//! its retries and its resume go over that connection, and resume works on
//! any relay because its state is in storage.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::relay::link::RelayLink;
use crate::relay::spread::{Spread, combined};

pub struct RelayLinks {
    links: Vec<RelayLink>,
    /// Bytes of the files each link carries now.
    loads: Vec<AtomicU64>,
    spread: Mutex<Spread>,
}

/// One file's connection, for as long as the file is on it.
pub struct Lane<'a> {
    links: &'a RelayLinks,
    index: usize,
    bytes: u64,
}

impl Lane<'_> {
    pub fn link(&self) -> &RelayLink {
        &self.links.links[self.index]
    }
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        self.links.loads[self.index].fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl RelayLinks {
    /// `first` is the link setup connected; `rest` connect when a file first
    /// needs them. Every link stops the run through `first`'s signal.
    pub fn new(first: RelayLink, rest: Vec<RelayLink>) -> Self {
        let mut links = vec![first];
        for mut l in rest {
            l.share_stop(&links[0]);
            links.push(l);
        }
        let loads = links.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            links,
            loads,
            spread: Mutex::new(Spread::default()),
        }
    }

    /// The connection that was made at setup (errors, the path cache).
    pub fn first(&self) -> &RelayLink {
        &self.links[0]
    }

    pub fn all(&self) -> &[RelayLink] {
        &self.links
    }

    /// The connection the next file of `bytes` goes on: the least loaded.
    pub fn assign(&self, bytes: u64) -> Lane<'_> {
        let loads: Vec<u64> = self
            .loads
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .collect();
        let index = self
            .spread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pick(&loads);
        self.loads[index].fetch_add(bytes, Ordering::Relaxed);
        Lane {
            links: self,
            index,
            bytes,
        }
    }

    /// Some connection is waiting for the relay to answer again.
    pub fn waiting(&self) -> bool {
        self.links.iter().any(RelayLink::waiting)
    }

    /// Resolves once any connection ran out of patience: they share one
    /// signal (`RelayLink::share_stop`), so the run stops as a whole.
    pub async fn wait_gave_up(&self) {
        self.first().wait_gave_up().await
    }

    /// Closes every connection now (Ctrl-C).
    pub async fn abort(&self) {
        for l in &self.links {
            l.abort().await;
        }
    }

    /// Closes every endpoint at the end of the run (each returns once its
    /// close is on the wire).
    pub async fn close(&self) {
        for l in &self.links {
            l.close().await;
        }
    }

    /// QUIC connections this run made, over all its links.
    pub fn connections(&self) -> u64 {
        self.links.iter().map(RelayLink::connections).sum()
    }

    /// Saves what the links measured together for the next run's warm start
    /// (`spread::combined`); whether any started warm.
    pub fn remember_path(&self) -> bool {
        let estimates: Vec<_> = self
            .links
            .iter()
            .filter_map(|l| l.observer.estimate())
            .collect();
        if let (Some(cache), Some(total)) = (&self.first().cache, combined(&estimates)) {
            cache.save(total);
        }
        self.links.iter().any(|l| l.observer.warm_started())
    }
}
