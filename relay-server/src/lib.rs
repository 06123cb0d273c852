//! Blob Relay server: QUIC in, large staged blocks out, commit only after the
//! whole-file SHA-256 matches. The binary is a thin shell over this library so the
//! end-to-end tests can run a real relay in-process.
//!
//! Its modules are layers, each importing only the ones listed before it:
//! `telemetry` (metrics, the exposition format, the build), then
//! `connection` (one QUIC connection: TLS, admission, stream credit) and
//! `sign_in` (tokens and Entra ID), then `state` (`Config`, `Shared`), then
//! `transfer` (one stream: upload, download, listing), then `server` (the
//! endpoint that accepts connections and spawns streams), then `operations`
//! (flags, subcommands, the health listener). The protocol's decisions are
//! not here: they live in `relay_proto`'s sessions and `relay_pipeline`.

pub mod connection;
pub mod operations;
pub mod server;
pub mod sign_in;
pub mod state;
pub mod telemetry;
pub mod transfer;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use relay_proto::id_key::{IdKey, IdKeyError};
use relay_proto::plan::PlanError;
use relay_proto::protocol::Secret;
use relay_proto::size::format_size;
use relay_storage::account::{ClientBuildError, Storage};
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{CredentialError, StorageAccess};
use relay_storage::staging::Budget;
use relay_storage::watch::Patience;
use relay_transport::quic::Windows;

pub use server::{BlockFill, Config, Relay, TestHooks};

/// Why the flags do not make a runnable configuration.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("--storage-url is required")]
    NoStorageUrl,
    #[error(transparent)]
    StorageAccess(#[from] CredentialError),
    #[error(transparent)]
    HttpClient(#[from] ClientBuildError),
    #[error("--tokens or --entra-audience is required")]
    NoTokens,
    #[error(transparent)]
    Entra(#[from] operations::entra_config::EntraConfigError),
    #[error(transparent)]
    Tokens(#[from] sign_in::auth::TokensError),
    #[error("--block-size: {0}")]
    BlockSize(#[source] PlanError),
    #[error(transparent)]
    State(#[from] operations::state_dir::StateError),
    #[error(transparent)]
    Tls(#[from] connection::tls::TlsError),
    #[error("--id-key-file: {0}")]
    IdKey(#[source] IdKeyError),
    #[error(
        "this configuration may use up to {} ({bound}), more than the memory limit {}: lower --max-connections, --connection-window, --memory-budget or --max-pending, or raise --memory-limit",
        format_size(bound.total()),
        format_size(*limit)
    )]
    OverMemoryLimit { bound: MemoryBound, limit: u64 },
}

impl Config {
    /// Resolves flags into a runnable configuration (reads files, makes the certificate).
    pub fn from_args(args: &operations::config::Args) -> Result<Self, ResolveError> {
        let storage = storage(args)?;
        let entra = operations::entra_config::entra(args)?;
        let tokens = match (args.tokens.as_deref(), &entra) {
            (Some(path), _) => sign_in::auth::TokenStore::load(path)?,
            (None, Some(_)) => sign_in::auth::TokenStore::none(),
            (None, None) => return Err(ResolveError::NoTokens),
        };
        relay_proto::plan::BlockPlan::new(0, args.block_size).map_err(ResolveError::BlockSize)?;
        let identity = identity(args)?;
        let id_key = id_key(args)?;
        let cfg = Self {
            listen: args.listen,
            storage,
            tokens,
            entra,
            identity,
            budget: Budget::new(args.memory_budget),
            block_size: args.block_size,
            blocks_in_flight: args.blocks_in_flight.max(1),
            windows: windows(args),
            udp_buffer: usize::try_from(args.udp_buffer).unwrap_or(usize::MAX),
            max_connections: args.max_connections,
            admission: admission_limits(args),
            grace: args.grace(),
            id_key,
            max_block_size: args.max_block_size,
            token_share_percent: args.token_share,
            budget_wait: args.budget_wait,
            block_fill: server::BlockFill::default(),
            reserved_containers: args.reserved_containers.clone(),
            download: state::DownloadLimits {
                ranges_in_flight: usize::try_from(args.download_ranges).unwrap_or(1),
                write_timeout: args.download_write_timeout,
                ..state::DownloadLimits::default()
            },
            hooks: TestHooks::default(),
        };
        cfg.check_memory_limit(args.memory_limit)?;
        Ok(cfg)
    }

    /// Refuses a configuration whose memory bound exceeds `--memory-limit`
    /// (default: 90 % of the machine's memory, when it can be read).
    fn check_memory_limit(&self, memory_limit: Option<u64>) -> Result<(), ResolveError> {
        let bound = self.memory_bound();
        let limit = memory_limit.or_else(|| machine_memory().map(|m| m / 10 * 9));
        match limit {
            Some(limit) if bound.total() > limit => {
                Err(ResolveError::OverMemoryLimit { bound, limit })
            }
            _ => Ok(()),
        }
    }

    /// The most memory this configuration lets the relay use, whatever its peers
    /// do (docs/SECURITY.md, "Memory").
    pub fn memory_bound(&self) -> MemoryBound {
        // Connections borrow streams beyond their base from a pool sized so that
        // all of them together hold no more than this many each (`stream_credit`).
        let authenticated_state = per_connection_state(connection::stream_credit::STREAMS_IN_BOUND);
        let pending_state = per_connection_state(
            self.admission
                .streams_before_auth
                .clamp(1, connection::stream_credit::BASE_STREAMS),
        );
        MemoryBound {
            base: BASE_MEMORY,
            budget: self.budget.total_bytes(),
            authenticated: self.max_connections.max(1) as u64
                * (self.windows.connection_window + authenticated_state),
            sending: self.max_connections.max(1) as u64 * self.send_window(),
            pending: self.admission.max_pending.max(1) as u64
                * (self.admission.window_before_auth + pending_state + INCOMING_BUFFER),
            list_page: self
                .download
                .list_page_size(self.token_share_bytes())
                .bytes(),
        }
    }

    /// One token's (or principal's) share of the budget (`--token-share`).
    pub fn token_share_bytes(&self) -> u64 {
        // Multiply first: 50 % of 64 MiB is exactly 32 MiB (two 16 MiB blocks).
        (u128::from(self.budget.total_bytes()) * u128::from(self.token_share_percent.clamp(1, 100))
            / 100) as u64
    }

    /// Bytes one connection may have sent and not yet had acknowledged.
    fn send_window(&self) -> u64 {
        self.windows
            .send_window
            .unwrap_or(self.windows.connection_window)
    }

    /// Defaults for tests and benchmarks: loopback, self-signed.
    pub fn for_tests(
        storage: Storage,
        tokens: sign_in::auth::TokenStore,
        memory_budget: u64,
    ) -> Result<Self, connection::tls::TlsError> {
        Ok(Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            storage,
            tokens,
            entra: None,
            identity: connection::tls::Identity::self_signed(vec!["localhost".into()])?,
            budget: Budget::new(memory_budget),
            block_size: relay_proto::limits::DEFAULT_BLOCK_SIZE,
            blocks_in_flight: 4,
            windows: Windows {
                send_window: Some(Windows::default().stream_window),
                ..Windows::default()
            },
            udp_buffer: 8 << 20,
            max_connections: 64,
            admission: connection::admission::Limits::default(),
            grace: Duration::from_secs(5),
            id_key: IdKey::random(),
            max_block_size: 128 << 20,
            token_share_percent: 50,
            budget_wait: Duration::from_secs(30),
            block_fill: server::BlockFill::default(),
            reserved_containers: vec!["relay-boot".into()],
            download: state::DownloadLimits::default(),
            hooks: TestHooks::default(),
        })
    }
}

/// `https://acct.blob.core.windows.net/ (managed identity)`: for operators, no
/// secrets, no Debug text.
pub fn describe_storage(access: &StorageAccess) -> String {
    let how = match &access.auth {
        relay_storage::credentials::StorageAuth::Entra(_) => "Entra ID",
        relay_storage::credentials::StorageAuth::Sas(_) => "SAS",
    };
    format!("{} via {how}", access.service_url)
}

/// The storage account of `--storage-url`, with `--account-key` or Entra ID,
/// through an HTTP client sized by `--storage-concurrency`.
fn storage(args: &operations::config::Args) -> Result<Storage, ResolveError> {
    let key = args.account_key.clone().map(Secret);
    let url = args
        .storage_url
        .as_deref()
        .ok_or(ResolveError::NoStorageUrl)?;
    let access = StorageAccess::resolve(url, key.as_ref(), args.entra)?;
    let writer = WriterOptions {
        pool_idle_timeout: args.storage_idle_timeout,
        patience: Patience::both(args.storage_stall_timeout),
        max_concurrent_requests: args.storage_concurrency as usize,
        max_idle_per_host: args.storage_concurrency as usize,
        block_checksum: args.block_checksum,
        ..WriterOptions::default()
    };
    Ok(Storage::new(access, &writer)?)
}

fn windows(args: &operations::config::Args) -> Windows {
    Windows {
        stream_window: args.stream_window,
        connection_window: args.connection_window,
        congestion: args.congestion,
        max_rate_mbit: args.max_rate,
        fair: args.fair,
        // What a download may have written and not yet had acknowledged: one
        // stream window (a file's bandwidth-delay product) per connection,
        // counted in the memory bound.
        send_window: Some(args.stream_window),
        ..Windows::default()
    }
}

fn admission_limits(args: &operations::config::Args) -> connection::admission::Limits {
    connection::admission::Limits {
        max_pending: args.max_pending.max(1),
        max_per_address: args.max_per_address.max(1),
        auth_deadline: args.auth_deadline,
        ..connection::admission::Limits::default()
    }
}

/// The block-ID key: random with `--id-key-ephemeral`, else `--id-key-file` or
/// the state directory's, created on the first start. A configuration check
/// writes nothing: without a key file yet it uses a random key (the real start
/// creates and keeps one).
fn id_key(args: &operations::config::Args) -> Result<IdKey, ResolveError> {
    if args.id_key_ephemeral {
        return Ok(IdKey::random());
    }
    let path = match &args.id_key_file {
        Some(p) => p.clone(),
        None => resolve_state_dir(args)?.file(operations::state_dir::ID_KEY_FILE),
    };
    let key = if args.check_config && !path.exists() {
        Ok(IdKey::random())
    } else if args.check_config {
        IdKey::load(&path)
    } else {
        IdKey::load_or_create(&path)
    };
    key.map_err(ResolveError::IdKey)
}

fn resolve_state_dir(
    args: &operations::config::Args,
) -> Result<operations::state_dir::StateDir, operations::state_dir::StateError> {
    operations::state_dir::StateDir::resolve(args.state_dir.as_deref())
}

/// `--tls-cert`/`--tls-key`, else the state directory's self-signed identity:
/// made on the first start and kept, so pinned clients keep working. A
/// configuration check only reads it, and makes a throwaway one if there is none
/// yet (the real start will make and keep one).
fn identity(args: &operations::config::Args) -> Result<connection::tls::Identity, ResolveError> {
    if let (Some(c), Some(k)) = (&args.tls_cert, &args.tls_key) {
        return Ok(connection::tls::Identity::from_pem_files(c, k)?);
    }
    let dir = resolve_state_dir(args)?;
    let kept = if args.check_config {
        dir.load_identity()?
    } else {
        Some(dir.load_or_create_identity(&args.tls_names)?)
    };
    match kept {
        Some(id) => Ok(id),
        None => Ok(connection::tls::Identity::self_signed(
            args.tls_names.clone(),
        )?),
    }
}

/// Code, runtime, TLS state, logging and the health endpoint, with headroom
/// for allocator slack well above what an idle relay holds.
pub const BASE_MEMORY: u64 = 64 << 20;
/// Per connection beyond its receive window and its streams: quinn's
/// connection state, send buffers of control frames.
pub const PER_CONNECTION_OVERHEAD: u64 = 1 << 20;
/// Per open stream: its parsed Offer (within the Offer rules: a name of 1,024
/// characters, 8 KiB of metadata, a 256-byte content type), its task and
/// quinn's stream state.
pub const PER_STREAM_STATE: u64 = 24 << 10;

/// What one connection with at most `streams` open streams may hold beyond
/// its receive window: its state, its half-read control frames (one per turn,
/// `frame_turns`) and its streams' state.
pub fn per_connection_state(streams: u64) -> u64 {
    let turns = (connection::frame_turns::FRAME_READS_PER_CONNECTION as u64).min(streams);
    PER_CONNECTION_OVERHEAD
        + turns * relay_proto::limits::MAX_FRAME_LEN as u64
        + streams * PER_STREAM_STATE
}
/// What quinn may buffer for a connection attempt before it is accepted.
pub const INCOMING_BUFFER: u64 = 64 << 10;

/// The parts of the relay's memory bound.
#[derive(Debug, Clone, Copy)]
pub struct MemoryBound {
    pub base: u64,
    pub budget: u64,
    pub authenticated: u64,
    /// Downloads: what each connection may have written and not yet had
    /// acknowledged (quinn's send buffer, outside the block budget).
    pub sending: u64,
    pub pending: u64,
    /// What one listing page takes from the block budget while it is held
    /// (inside `budget`, not a term of its own).
    pub list_page: u64,
}

impl MemoryBound {
    pub fn total(&self) -> u64 {
        self.base + self.budget + self.authenticated + self.sending + self.pending
    }
}

impl std::fmt::Display for MemoryBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use relay_proto::size::format_size as s;
        write!(
            f,
            "base {} + block budget {} (blocks, download ranges, listing pages of {} each) + authenticated connections {} + their send buffers {} + pending connections {}",
            s(self.base),
            s(self.budget),
            s(self.list_page),
            s(self.authenticated),
            s(self.sending),
            s(self.pending)
        )
    }
}

/// Total memory of this machine (Linux), if it can be read.
fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
