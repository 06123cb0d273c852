//! What the relay runs with, in the groups an operator thinks in: where it
//! listens (`Listen`), the storage it writes and reads (`StorageConfig`), who
//! may do what (`SignIn`), how much memory transfers may hold (`Limits`) and
//! what it tells operators (`Telemetry`). Built once from the flags (the
//! crate's `configuration`) or for tests (`Config::for_tests`), then handed
//! down: the endpoint takes `Listen`, `Shared` keeps the rest.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use relay_proto::id_key::IdKey;
use relay_storage::account::Storage;
use relay_storage::listing::PageSize;
use relay_storage::staging::{Budget, Mangle, Pace};
use relay_transport::quic::Windows;

use crate::connection::admission::Limits as AdmissionLimits;
use crate::connection::tls::{Identity, TlsError};
use crate::sign_in::auth::TokenStore;
use crate::sign_in::entra::Entra;

pub struct Config {
    pub listen: Listen,
    pub storage: StorageConfig,
    pub sign_in: SignIn,
    pub limits: Limits,
    pub telemetry: Telemetry,
    pub hooks: TestHooks,
}

/// The QUIC endpoint and the connections it takes.
pub struct Listen {
    pub addr: SocketAddr,
    pub identity: Identity,
    pub windows: Windows,
    pub udp_buffer: usize,
    /// Most authenticated connections at once.
    pub max_connections: usize,
    /// Connections that have not presented a valid Offer yet.
    pub admission: AdmissionLimits,
    /// On shutdown, how long in-flight transfers may continue.
    pub grace: Duration,
}

/// The storage account and how blobs go to it and come back.
pub struct StorageConfig {
    pub account: Storage,
    /// Signs block IDs and seals commits; shared by every relay of a deployment.
    pub id_key: IdKey,
    pub block_size: u64,
    pub blocks_in_flight: usize,
    /// How downloads read from storage and write to clients.
    pub download: DownloadLimits,
}

/// Who may do what.
pub struct SignIn {
    pub tokens: TokenStore,
    /// Entra ID access tokens, when `--entra-audience` is set.
    pub entra: Option<Arc<Entra>>,
    /// Containers no stream may touch (the deployment's boot artifacts).
    pub reserved_containers: Vec<String>,
}

/// The block budget and each transfer's part of it.
#[derive(Debug, Clone)]
pub struct Limits {
    pub budget: Budget,
    /// Share of the budget one token's transfers may hold at once, in percent.
    pub token_share_percent: u64,
    /// Largest block a transfer may use (bounds one transfer's share of memory).
    pub max_block_size: u64,
    /// How long a transfer waits for block memory before a retryable `busy`.
    pub budget_wait: Duration,
    pub block_fill: BlockFill,
}

impl Limits {
    /// One token's (or principal's) share of the budget (`--token-share`).
    pub fn token_share_bytes(&self) -> u64 {
        // Multiply first: 50 % of 64 MiB is exactly 32 MiB (two 16 MiB blocks).
        (u128::from(self.budget.total_bytes()) * u128::from(self.token_share_percent.clamp(1, 100))
            / 100) as u64
    }
}

/// What the relay tells operators beyond its logs.
#[derive(Debug, Clone, Copy)]
pub struct Telemetry {
    /// `/healthz` and `/metrics` (off when `None`).
    pub health_listen: Option<SocketAddr>,
    /// Time between background storage checks.
    pub storage_check_interval: Duration,
}

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
    /// Called (with offset and length 0) before each Delete asks storage;
    /// the delete waits as long as it says (a blob rewritten between the
    /// client's listing and its delete, without timing).
    pub delete_pace: Option<Pace>,
    /// Before sending a Plan, wait until the connection has received this many
    /// bytes: makes "the Plan arrives after the client sent everything" (a long
    /// path) deterministic on loopback.
    pub hold_plan_until_received: Option<u64>,
    /// Announce only the plain protocol, as a relay from before compressed
    /// chunks does: the version-skew tests.
    pub before_compression: bool,
    /// Take no listing up at a marker (start it over, as a relay from before
    /// listing markers does) while still handing markers on: a fleet whose
    /// relays differ, as the client of a rolling upgrade meets it.
    pub forgets_list_markers: bool,
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
    /// rest to the caller's downloads. The relay's pages carry metadata (the
    /// seals it checks), so each name takes more (`PageSize::within`).
    pub fn list_page_size(&self, share_bytes: u64) -> PageSize {
        PageSize::within(self.list_page, share_bytes / 8, true)
    }
}

impl Default for DownloadLimits {
    /// Six 4 MiB ranges: 24 MiB in flight per blob keeps a blob's read ahead
    /// of a fast link with storage's tens of milliseconds per range. Pages of
    /// 1,000 names with their metadata: 14.6 MiB of budget each
    /// (`PageSize::bytes`), a fifth of what Azure's largest page would take.
    fn default() -> Self {
        Self {
            ranges_in_flight: 6,
            range_bytes: relay_storage::read::MAX_CHECKED_RANGE,
            write_timeout: Duration::from_secs(60),
            list_page: relay_storage::listing::DEFAULT_PAGE_NAMES,
        }
    }
}

impl Config {
    /// Defaults for tests and benchmarks: loopback, self-signed.
    pub fn for_tests(
        storage: Storage,
        tokens: TokenStore,
        memory_budget: u64,
    ) -> Result<Self, TlsError> {
        Ok(Self {
            listen: Listen {
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                identity: Identity::self_signed(vec!["localhost".into()])?,
                windows: Windows {
                    send_window: Some(Windows::default().stream_window),
                    ..Windows::default()
                },
                udp_buffer: 8 << 20,
                max_connections: 64,
                admission: AdmissionLimits::default(),
                grace: Duration::from_secs(5),
            },
            storage: StorageConfig {
                account: storage,
                id_key: IdKey::random(),
                block_size: relay_proto::limits::DEFAULT_BLOCK_SIZE,
                blocks_in_flight: 4,
                download: DownloadLimits::default(),
            },
            sign_in: SignIn {
                tokens,
                entra: None,
                reserved_containers: vec!["relay-boot".into()],
            },
            limits: Limits {
                budget: Budget::new(memory_budget),
                token_share_percent: 50,
                max_block_size: 128 << 20,
                budget_wait: Duration::from_secs(30),
                block_fill: BlockFill::default(),
            },
            telemetry: Telemetry {
                health_listen: None,
                storage_check_interval: Duration::from_secs(30),
            },
            hooks: TestHooks::default(),
        })
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
        assert_eq!(page.bytes(), 15_360_000);
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
