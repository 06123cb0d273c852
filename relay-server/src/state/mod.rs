//! What the relay is configured with (`config`: `Config` in its groups), the
//! most memory that lets it use (`memory_bound`) and the state every transfer
//! reads (`Shared`), with each owner's share of the block budget (`shares`).
//! Its own layer so the endpoint (`server`) and the per-stream drivers
//! (`transfer`) both depend on it, not on each other. May import
//! `telemetry`, `connection` and `sign_in`; never `transfer`, `server` or
//! `operations`.

pub mod config;
pub mod memory_bound;
pub mod shares;

use std::sync::Arc;

use relay_proto::id_key::Owner;
use relay_storage::listing::PageSize;
use relay_storage::staging::{Budget, Mangle, Pace};
use tokio::sync::watch;

use crate::connection::admission::Admission;
use crate::state::shares::{Held, Shares};
use crate::telemetry::metrics::Metrics;

pub use config::{
    BlockFill, Config, DownloadLimits, Limits, Listen, SignIn, StorageConfig, Telemetry, TestHooks,
};
pub use memory_bound::MemoryBound;

/// State every transfer reads: the configuration's groups the transfers use,
/// and what the relay keeps while it runs.
pub struct Shared {
    /// The account (counting its retries and requests in `metrics`) and how
    /// blobs go to it and come back.
    pub storage: StorageConfig,
    pub sign_in: SignIn,
    pub limits: Limits,
    /// Connection admission: pending and authenticated slots, refusals.
    pub admission: Arc<Admission>,
    pub(crate) token_share_bytes: u64,
    pub(crate) shares: Shares,
    pub metrics: Metrics,
    /// Turns true when shutdown begins: transfers stop at their next block boundary.
    pub stopping: watch::Receiver<bool>,
    pub(crate) hooks: TestHooks,
}

impl Shared {
    /// The transfers' state from the configuration's groups; the storage
    /// account then counts its retries and requests in `metrics`.
    pub fn new(
        storage: StorageConfig,
        sign_in: SignIn,
        limits: Limits,
        admission: Arc<Admission>,
        stopping: watch::Receiver<bool>,
        hooks: TestHooks,
    ) -> Self {
        let metrics = Metrics::default();
        // Every writer records its retries in the relay's metrics as they happen.
        let account = storage
            .account
            .with_retry_counts(metrics.azure_retries.clone())
            .with_request_count(metrics.storage_requests.clone());
        let token_share_bytes = limits.token_share_bytes();
        Self {
            storage: StorageConfig { account, ..storage },
            sign_in,
            limits,
            admission,
            token_share_bytes,
            shares: Shares::new(token_share_bytes),
            metrics,
            stopping,
            hooks,
        }
    }

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

    pub fn fetch_pace(&self) -> Option<Pace> {
        if cfg!(feature = "test-hooks") {
            self.hooks.fetch_pace.clone()
        } else {
            None
        }
    }

    pub fn delete_pace(&self) -> Option<Pace> {
        if cfg!(feature = "test-hooks") {
            self.hooks.delete_pace.clone()
        } else {
            None
        }
    }

    pub fn forgets_list_markers(&self) -> bool {
        cfg!(feature = "test-hooks") && self.hooks.forgets_list_markers
    }

    pub fn hold_plan_until_received(&self) -> Option<u64> {
        if cfg!(feature = "test-hooks") {
            self.hooks.hold_plan_until_received
        } else {
            None
        }
    }

    /// The largest block a transfer may use: the configured cap, and never more
    /// than one token's share of the budget.
    pub fn max_block_bytes(&self) -> u64 {
        self.limits.max_block_size.min(self.token_share_bytes)
    }

    /// Blocks waiting for memory right now. A block takes its token's share
    /// first, then the shared budget, so it may wait at either: with every
    /// token at its share, the shared budget alone shows no one waiting.
    pub fn blocks_waiting(&self) -> u64 {
        self.limits.budget.waiting() + self.shares.waiting()
    }

    /// The budget share of one token or Entra ID principal (kept while its
    /// transfers use it: `shares`).
    pub fn share_of(&self, owner: &Owner) -> Budget {
        self.shares.of(owner)
    }

    /// `bytes` of memory for one caller: its share (`share_of`) first, then the
    /// relay's budget, so it waits at its own share before it takes from
    /// everyone's. `None` if either budget is closed; callers bound the wait.
    pub async fn hold(&self, share: &Budget, bytes: u64) -> Option<Held> {
        let mine = share.take(bytes).await.ok()?;
        let everyone = self.limits.budget.take(bytes).await.ok()?;
        Some((mine, everyone))
    }

    /// One listing page: its names and the memory taken for it.
    pub fn list_page(&self) -> PageSize {
        self.storage.download.list_page_size(self.token_share_bytes)
    }
}
