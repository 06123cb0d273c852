//! Blob Relay server: QUIC in, large staged blocks out, commit only after the
//! whole-file SHA-256 matches. The binary is a thin shell over this library so the
//! end-to-end tests can run a real relay in-process.

pub mod auth;
pub mod config;
pub mod health;
pub mod http;
pub mod metrics;
pub mod rejections;
pub mod server;
pub mod tls;
pub mod tokens_file;
pub mod transfer;

use std::time::Duration;

use shared::blob::{Storage, WriterOptions};
use shared::credentials::StorageAccess;
use shared::protocol::Secret;
use shared::quic::Windows;
use shared::staging::Budget;

pub use server::{Config, Relay, TestHooks};

impl Config {
    /// Resolves flags into a runnable configuration (reads files, makes the certificate).
    pub fn from_args(args: &config::Args) -> Result<Self, String> {
        let key = args.account_key.clone().map(Secret);
        let access = StorageAccess::resolve(&args.storage_url, key.as_ref(), args.entra)?;
        let storage = Storage::new(access, &WriterOptions::default())?;
        let tokens = auth::TokenStore::load(&args.tokens).map_err(|e| e.to_string())?;
        let identity = match (&args.tls_cert, &args.tls_key) {
            (Some(c), Some(k)) => tls::Identity::from_pem_files(c, k)?,
            _ => tls::Identity::self_signed(args.tls_names.clone())?,
        };
        shared::plan::BlockPlan::new(0, args.block_size)
            .map_err(|e| format!("--block-size: {e}"))?;
        Ok(Self {
            listen: args.listen,
            storage,
            tokens,
            identity,
            budget: Budget::new(args.memory_budget),
            block_size: args.block_size,
            blocks_in_flight: args.blocks_in_flight.max(1),
            windows: Windows {
                stream_window: args.stream_window,
                connection_window: args.connection_window,
                congestion: args.congestion,
                max_rate_mbit: args.max_rate,
                fair: args.fair,
            },
            udp_buffer: usize::try_from(args.udp_buffer).unwrap_or(usize::MAX),
            max_connections: args.max_connections,
            grace: args.grace(),
            hooks: TestHooks::default(),
        })
    }

    /// Defaults for tests and benchmarks: loopback, self-signed.
    pub fn for_tests(
        storage: Storage,
        tokens: auth::TokenStore,
        memory_budget: u64,
    ) -> Result<Self, String> {
        Ok(Self {
            listen: "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
            storage,
            tokens,
            identity: tls::Identity::self_signed(vec!["localhost".into()])?,
            budget: Budget::new(memory_budget),
            block_size: shared::limits::DEFAULT_BLOCK_SIZE,
            blocks_in_flight: 4,
            windows: Windows::default(),
            udp_buffer: 8 << 20,
            max_connections: 64,
            grace: Duration::from_secs(5),
            hooks: TestHooks::default(),
        })
    }
}
