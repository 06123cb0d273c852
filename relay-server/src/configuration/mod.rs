//! The flags (`operations::config::Args`) into the one typed configuration the
//! relay runs with (`state::Config`), once, at the top: reads the files the
//! flags name, makes or loads what the state directory keeps (`kept`), and
//! refuses a configuration whose memory bound exceeds `--memory-limit`.
//! Nothing below imports this module.

mod kept;

use std::time::Duration;

use relay_proto::id_key::IdKeyError;
use relay_proto::plan::PlanError;
use relay_proto::protocol::Secret;
use relay_proto::size::format_size;
use relay_storage::account::{ClientBuildError, Storage};
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{CredentialError, StorageAccess};
use relay_storage::staging::Budget;
use relay_storage::watch::Patience;
use relay_transport::quic::Windows;

use crate::connection;
use crate::operations::config::{Args, ListenArgs, SignInArgs, StorageArgs};
use crate::operations::entra_config::EntraConfigError;
use crate::operations::state_dir::StateError;
use crate::sign_in::auth::{TokenStore, TokensError};
use crate::state::{
    BlockFill, Config, DownloadLimits, Limits, Listen, MemoryBound, SignIn, StorageConfig,
    Telemetry, TestHooks,
};

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
    Entra(#[from] EntraConfigError),
    #[error(transparent)]
    Tokens(#[from] TokensError),
    #[error("--block-size: {0}")]
    BlockSize(#[source] PlanError),
    #[error(transparent)]
    State(#[from] StateError),
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
    pub fn from_args(args: &Args) -> Result<Self, ResolveError> {
        // In this order, so the first of several mistakes is the one reported.
        let account = storage_account(&args.storage)?;
        let sign_in = sign_in(&args.sign_in, args.listen.auth_deadline)?;
        relay_proto::plan::BlockPlan::new(0, args.storage.block_size)
            .map_err(ResolveError::BlockSize)?;
        let identity = kept::identity(args)?;
        let id_key = kept::id_key(args)?;
        let cfg = Self {
            storage: StorageConfig {
                account,
                id_key,
                block_size: args.storage.block_size,
                blocks_in_flight: args.storage.blocks_in_flight.max(1),
                download: DownloadLimits {
                    ranges_in_flight: usize::try_from(args.storage.download_ranges).unwrap_or(1),
                    write_timeout: args.storage.download_write_timeout,
                    ..DownloadLimits::default()
                },
            },
            sign_in,
            listen: Listen {
                addr: args.listen.listen,
                identity,
                windows: windows(&args.listen),
                udp_buffer: usize::try_from(args.listen.udp_buffer).unwrap_or(usize::MAX),
                max_connections: args.listen.max_connections,
                admission: admission_limits(&args.listen),
                grace: args.listen.shutdown_grace,
            },
            limits: Limits {
                budget: Budget::new(args.limits.memory_budget),
                token_share_percent: args.limits.token_share,
                max_block_size: args.limits.max_block_size,
                budget_wait: args.limits.budget_wait,
                block_fill: BlockFill::default(),
            },
            telemetry: Telemetry {
                health_listen: args.telemetry.health_listen,
                storage_check_interval: args.telemetry.storage_check_interval,
            },
            hooks: TestHooks::default(),
        };
        cfg.check_memory_limit(args.limits.memory_limit)?;
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
fn storage_account(args: &StorageArgs) -> Result<Storage, ResolveError> {
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

/// The tokens file and Entra ID; at least one of them.
fn sign_in(args: &SignInArgs, auth_deadline: Duration) -> Result<SignIn, ResolveError> {
    let entra = crate::operations::entra_config::entra(args, auth_deadline)?;
    let tokens = match (args.tokens.as_deref(), &entra) {
        (Some(path), _) => TokenStore::load(path)?,
        (None, Some(_)) => TokenStore::none(),
        (None, None) => return Err(ResolveError::NoTokens),
    };
    Ok(SignIn {
        tokens,
        entra,
        reserved_containers: args.reserved_containers.clone(),
    })
}

fn windows(args: &ListenArgs) -> Windows {
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

fn admission_limits(args: &ListenArgs) -> connection::admission::Limits {
    connection::admission::Limits {
        max_pending: args.max_pending.max(1),
        max_per_address: args.max_per_address.max(1),
        auth_deadline: args.auth_deadline,
        ..connection::admission::Limits::default()
    }
}

/// Total memory of this machine (Linux), if it can be read.
fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
