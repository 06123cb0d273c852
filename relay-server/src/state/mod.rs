//! What the relay is configured with (`Config`) and the state every transfer
//! reads (`Shared`), with each owner's share of the block budget (`shares`).
//! Its own layer so the endpoint (`server`) and the per-stream drivers
//! (`transfer`) both depend on it, not on each other. May import
//! `telemetry`, `connection` and `sign_in`; never `transfer`, `server` or
//! `operations`.

pub mod shares;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use relay_proto::id_key::{IdKey, Owner};
use relay_storage::account::Storage;
use relay_storage::listing::PageSize;
use relay_storage::staging::{Budget, Mangle, Pace};
use relay_transport::quic::Windows;
use tokio::sync::watch;

use crate::connection::admission::{Admission, Limits as AdmissionLimits};
use crate::connection::tls::Identity;
use crate::sign_in::auth::TokenStore;
use crate::sign_in::entra::Entra;
use crate::state::shares::Shares;
use crate::telemetry::metrics::Metrics;

/// Fault hooks for the end-to-end tests; not reachable from the command line.
#[derive(Clone, Default)]
pub struct TestHooks {
    /// Called on every received chunk before it is hashed (e.g. to flip a byte).
    pub mangle: Option<Mangle>,
    /// Called on every received chunk with its offset and length; the transfer
    /// waits as long as it says (a slow relay, to stop a test at a chosen point).
    pub pace: Option<Pace>,
    /// Called after each range a Fetch sent, with its offset and length; the
    /// fetch waits as long as it says (stops a download at a chosen point).
    pub fetch_pace: Option<Pace>,
    /// Before sending a Plan, wait until the connection has received this many
    /// bytes: makes "the Plan arrives after the client sent everything" (a long
    /// path) deterministic on loopback.
    pub hold_plan_until_received: Option<u64>,
    /// Announce only the plain protocol, as a relay from before compressed
    /// chunks (issue 34) does: the version-skew tests.
    pub before_compression: bool,
    /// Take no listing up at a marker (start it over, as a relay from before
    /// listing markers does) while still handing markers on: a fleet whose
    /// relays differ, as the client of a rolling upgrade meets it.
    pub forgets_list_markers: bool,
}

pub struct Config {
    pub listen: SocketAddr,
    pub storage: Storage,
    pub tokens: TokenStore,
    /// Entra ID access tokens, when `--entra-audience` is set.
    pub entra: Option<Arc<Entra>>,
    pub identity: Identity,
    pub budget: Budget,
    pub block_size: u64,
    pub blocks_in_flight: usize,
    pub windows: Windows,
    pub udp_buffer: usize,
    pub max_connections: usize,
    pub admission: AdmissionLimits,
    pub grace: Duration,
    /// Signs block IDs and seals commits; shared by every relay of a deployment.
    pub id_key: IdKey,
    /// Largest block a transfer may use (bounds one transfer's share of memory).
    pub max_block_size: u64,
    /// Share of the budget one token's transfers may hold at once, in percent.
    pub token_share_percent: u64,
    /// How long a transfer waits for block memory before a retryable `busy`.
    pub budget_wait: Duration,
    pub block_fill: BlockFill,
    /// Containers no upload may write (the deployment's boot artifacts).
    pub reserved_containers: Vec<String>,
    /// How downloads read from storage and write to clients.
    pub download: DownloadLimits,
    pub hooks: TestHooks,
}

/// A block that holds memory must fill at least `min_bytes_per_s` fast, after
/// `grace`: a peer trickling bytes into a held buffer is cut (its staged blocks
/// stay for a resume).
#[derive(Debug, Clone, Copy)]
pub struct BlockFill {
    pub min_bytes_per_s: u64,
    pub grace: Duration,
}

impl Default for BlockFill {
    /// 64 KiB/s (0.5 Mbit/s per file) after a minute.
    fn default() -> Self {
        Self {
            min_bytes_per_s: 64 << 10,
            grace: Duration::from_secs(60),
        }
    }
}

/// State every transfer reads.
pub struct Shared {
    pub storage: Storage,
    pub tokens: TokenStore,
    pub entra: Option<Arc<Entra>>,
    pub budget: Budget,
    /// Connection admission: pending and authenticated slots, refusals.
    pub admission: Arc<Admission>,
    pub id_key: IdKey,
    pub max_block_size: u64,
    pub budget_wait: Duration,
    pub block_fill: BlockFill,
    pub reserved_containers: Vec<String>,
    pub download: DownloadLimits,
    pub(crate) token_share_bytes: u64,
    pub(crate) shares: Shares,
    pub block_size: u64,
    pub blocks_in_flight: usize,
    pub metrics: Metrics,
    /// Turns true when shutdown begins: transfers stop at their next block boundary.
    pub stopping: watch::Receiver<bool>,
    pub(crate) hooks: TestHooks,
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

    pub fn fetch_pace(&self) -> Option<Pace> {
        if cfg!(feature = "test-hooks") {
            self.hooks.fetch_pace.clone()
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
        self.max_block_size.min(self.token_share_bytes)
    }

    /// Blocks waiting for memory right now. A block takes its token's share
    /// first, then the shared budget, so it may wait at either: with every
    /// token at its share, the shared budget alone shows no one waiting.
    pub fn blocks_waiting(&self) -> u64 {
        self.budget.waiting() + self.shares.waiting()
    }

    /// The budget share of one token or Entra ID principal (kept while its
    /// transfers use it: `shares`).
    pub fn share_of(&self, owner: &Owner) -> Budget {
        self.shares.of(owner)
    }

    /// One listing page: its names and the memory taken for it.
    pub fn list_page(&self) -> PageSize {
        self.download.list_page_size(self.token_share_bytes)
    }
}

/// How downloads read and send.
#[derive(Debug, Clone, Copy)]
pub struct DownloadLimits {
    /// Ranges of one blob read from storage at once.
    pub ranges_in_flight: usize,
    /// Bytes per range (at most `MAX_CHECKED_RANGE`, storage's limit for a
    /// range's MD5).
    pub range_bytes: u64,
    /// Longest one write to the client may wait for room in its window, and
    /// a listing page's frames in all.
    pub write_timeout: Duration,
    /// Most blobs per List Blobs page (Azure's most is 5,000); fewer when
    /// memory is tight (`list_page_size`).
    pub list_page: u32,
}

impl DownloadLimits {
    /// A listing page of at most `list_page` names whose memory is at most
    /// an eighth of a caller's share (`share_bytes`): a listing leaves the
    /// rest to the caller's downloads.
    pub fn list_page_size(&self, share_bytes: u64) -> PageSize {
        PageSize::within(self.list_page, share_bytes / 8)
    }
}

impl Default for DownloadLimits {
    /// Six 4 MiB ranges: 24 MiB in flight per blob keeps a blob's read ahead
    /// of a fast link with storage's tens of milliseconds per range. Pages of
    /// 1,000 names: 10.7 MiB of budget each (`PageSize::bytes`), a fifth of
    /// what Azure's largest page would take.
    fn default() -> Self {
        Self {
            ranges_in_flight: 6,
            range_bytes: relay_storage::read::MAX_CHECKED_RANGE,
            write_timeout: Duration::from_secs(60),
            list_page: relay_storage::listing::DEFAULT_PAGE_NAMES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page_takes_at_most_an_eighth_of_a_callers_share() {
        let limits = DownloadLimits::default();
        // The default 1 GiB budget at 50 %: the whole page of 1,000 names.
        let page = limits.list_page_size(512 << 20);
        assert_eq!(page.names, 1000);
        assert_eq!(page.bytes(), 11_264_000);
        // A 96 MiB budget: 48 MiB a share, so 6 MiB a page, fewer names.
        let page = limits.list_page_size(48 << 20);
        assert!(page.names < 1000 && page.bytes() <= 6 << 20, "{page:?}");
        // However small the share, a page still lists one name.
        assert_eq!(limits.list_page_size(0).names, 1);
        let few = DownloadLimits {
            list_page: 2,
            ..limits
        };
        assert_eq!(few.list_page_size(512 << 20).names, 2);
    }
}
