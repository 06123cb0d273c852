//! Command-line interface: short help for the common case, long help with examples.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use relay_proto::size::parse_size;
use relay_storage::credentials::EntraSource;
use relay_transport::quic::Congestion;

fn size(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// Uploads files to Azure Blob Storage through a Blob Relay (QUIC), or directly.
#[derive(Debug, Parser)]
#[command(name = "relay-client", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Upload files and directories; each blob is committed only after its SHA-256 is verified.
    #[command(after_long_help = UPLOAD_EXAMPLES)]
    Upload(UploadArgs),
    /// Compare uploads through the relay with direct uploads from here: generated
    /// files, alternating runs, verified, deleted afterwards unless --keep.
    Bench(crate::bench::BenchArgs),
}

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// Files or directories (directories recursively, keeping their own name).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,

    /// Destination: CONTAINER or CONTAINER/PREFIX.
    #[arg(long)]
    pub to: String,

    /// Relay address HOST:PORT.
    #[arg(long, env = "RELAY_ADDR", required_unless_present = "direct")]
    pub relay: Option<String>,

    /// Bearer token for the relay.
    #[arg(long, env = "RELAY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Trust the relay whose certificate has this SHA-256 fingerprint (hex, colons optional).
    #[arg(long, env = "RELAY_CERT_SHA256")]
    pub relay_cert_sha256: Option<String>,

    /// Trust relay certificates issued by this CA (PEM).
    #[arg(long, env = "RELAY_CA")]
    pub relay_ca: Option<PathBuf>,

    /// TLS name to verify with --relay-ca (default: the host in --relay).
    #[arg(long)]
    pub server_name: Option<String>,

    /// Do not verify the relay at all. Labs only: anyone on the path can read your data.
    #[arg(long)]
    pub insecure: bool,

    /// Most files in flight at once. Fewer are when large: each file in flight
    /// counts min(its size, --stream-window) against --connection-window, so
    /// many small files fill a long path while large ones never overrun it.
    #[arg(long, default_value_t = 128)]
    pub parallel: usize,

    /// Replace existing blobs unconditionally (default: never overwrite).
    #[arg(long, conflicts_with = "if_match")]
    pub overwrite: bool,

    /// Replace an existing blob only if its ETag is still this one.
    #[arg(long, value_name = "ETAG")]
    pub if_match: Option<String>,

    /// Print one JSON summary on stdout instead of text.
    #[arg(long)]
    pub json: bool,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,

    /// Block size (the relay grows it for files over 50,000 blocks).
    #[arg(long, value_parser = size)]
    pub block_size: Option<u64>,

    /// Content type stored on every blob.
    #[arg(long)]
    pub content_type: Option<String>,

    /// Metadata KEY=VALUE stored on every blob (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,

    /// Attempts per file for retryable failures (lost connection, relay restart, Azure 5xx).
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// Seconds to wait for the QUIC handshake.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,

    /// QUIC congestion controller: relay (loss-tolerant, see docs/TRANSPORT.md) |
    /// cubic | bbr | newreno.
    #[arg(long, default_value = "relay")]
    pub congestion: Congestion,

    /// Cap the QUIC sending rate, in Mbit/s (like AzCopy's --cap-mbps); uses the
    /// relay congestion controller.
    #[arg(long, value_name = "MBIT", value_parser = relay_transport::quic::parse_rate_mbit)]
    pub max_rate: Option<f64>,

    /// Share the bottleneck fairly with TCP flows (back off when a shared queue
    /// drops packets); uses the relay congestion controller.
    #[arg(long)]
    pub fair: bool,

    /// Where measured path bandwidth and RTT are kept between runs, so the next
    /// connection to the same relay starts warm [default:
    /// ~/.cache/blob-relay/paths.json].
    #[arg(long, value_name = "FILE", env = "RELAY_PATH_CACHE")]
    pub path_cache: Option<std::path::PathBuf>,

    /// Start cold: ignore the path cache's estimate (this run's is still saved).
    #[arg(long)]
    pub no_warm_start: bool,

    /// QUIC send/receive window per stream.
    #[arg(long, default_value = "32MiB", value_parser = size)]
    pub stream_window: u64,

    /// QUIC window per connection.
    #[arg(long, default_value = "256MiB", value_parser = size)]
    pub connection_window: u64,

    /// Upload straight to Blob Storage over HTTPS (no relay).
    #[arg(long, requires = "storage_url")]
    pub direct: bool,

    /// If the QUIC handshake to the relay fails (e.g. UDP blocked), use direct mode
    /// instead (needs --storage-url and its credentials).
    #[arg(long, value_name = "direct", value_parser = ["direct"], requires = "storage_url")]
    pub fallback: Option<String>,

    /// With --direct: blob service URL (a SAS may be in the query).
    #[arg(long, env = "RELAY_STORAGE_URL")]
    pub storage_url: Option<String>,

    /// With --direct: storage account key (a short-lived SAS is signed from it).
    #[arg(long, env = "RELAY_ACCOUNT_KEY", hide_env_values = true)]
    pub account_key: Option<String>,

    /// With --direct: Entra ID credential when no key or SAS is given: cli | managed-identity.
    #[arg(long, default_value = "cli")]
    pub entra: EntraSource,

    /// With --direct: Put Block requests in flight per file.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,

    /// With --direct: memory for block buffers.
    #[arg(long, default_value = "512MiB", value_parser = size)]
    pub memory_budget: u64,

    /// With --direct: the key that signs this user's block IDs and commit seals
    /// (64 hex characters; created if missing). Direct mode resumes, and
    /// recognises as already uploaded, only what this key signed. Default:
    /// $XDG_STATE_HOME/blob-relay/direct-id.key (~/.local/state/...).
    #[arg(long, env = "RELAY_ID_KEY_FILE")]
    pub id_key_file: Option<std::path::PathBuf>,
}

const UPLOAD_EXAMPLES: &str = "Examples:
  # Through a relay, pinning its certificate:
  relay-client upload data/ big.iso --relay relay.example.net:4433 --to lab/2026 \\
      --token \"$RELAY_TOKEN\" --relay-cert-sha256 AB:CD:...
  # -> blobs lab: 2026/data/..., 2026/big.iso

  # Straight to storage (baseline, or where UDP is blocked):
  relay-client upload data/ --direct --storage-url https://ACCT.blob.core.windows.net --to lab/2026

  # For scripts:
  relay-client upload x.bin --relay HOST:4433 --to c --json | jq '.files[] | {blob, sha256, etag}'

Exit status: 0 when every file was committed and verified; 1 when any file failed
(one line per failed file on stderr); 2 for usage or setup errors.";
