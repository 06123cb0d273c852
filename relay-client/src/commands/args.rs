//! `relay-client upload`'s flags (`watch` takes them all too).

use std::path::PathBuf;

use clap::Args;

use crate::commands::connection_args::ConnectionArgs;
use crate::commands::output_args::OutputArgs;
pub use crate::transfer::overwrite::OverwriteMode;
use crate::ui::units::{block_size, size};

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// Files or directories (directories recursively, keeping their own name).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,

    /// Destination: CONTAINER, CONTAINER/PREFIX, or a blob URL
    /// https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX (or the
    /// profile's `to`).
    #[arg(long)]
    pub to: String,

    /// How to reach the relay or storage (shared with `watch` and `download`).
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Most files in flight at once. Fewer are when large: each file in flight
    /// counts min(its size, --stream-window) against --connection-window, so
    /// many small files fill a long path while large ones never overrun it; the
    /// relay also admits streams by the files' declared sizes.
    #[arg(long, default_value_t = 4096)]
    pub parallel: usize,

    /// When the blob exists: never (refuse; identical files are skipped) |
    /// always (replace) | if-different (skip identical files, replace changed
    /// ones). `--overwrite` alone means always.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_value = "never",
        default_missing_value = "always",
        conflicts_with = "if_match"
    )]
    pub overwrite: OverwriteMode,

    /// Show what would be uploaded, skipped or refused, writing nothing
    /// (the relay is asked; each file is hashed to compare with the blob's record).
    #[arg(long)]
    pub dry_run: bool,

    /// Upload only files whose path below the given directory matches GLOB
    /// (repeatable; `*` also matches `/`, e.g. `*.txt`, `logs/**/2026-*`).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,

    /// Leave out files whose relative path matches GLOB (repeatable; wins over --include).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Follow symbolic links (a link that loops back is skipped). Default: links
    /// and other non-regular files are skipped.
    #[arg(long)]
    pub follow_symlinks: bool,

    /// SHA256SUMS file (as `sha256sum` writes it; paths relative to the file):
    /// each listed file's hash is a precondition of its commit. Files it does not
    /// list are reported and not uploaded.
    #[arg(long, value_name = "FILE")]
    pub checksums: Option<PathBuf>,

    /// Replace an existing blob only if its ETag is still this one.
    #[arg(long, value_name = "ETAG")]
    pub if_match: Option<String>,

    /// --json, --json-lines, --status-interval, --quiet (shared by every
    /// command that moves files).
    #[command(flatten)]
    pub output: OutputArgs,

    /// Block size, 5MiB to 4000MiB (the relay grows it for files over 50,000
    /// blocks). MiB = 1048576 bytes; MB = 1000000 bytes.
    #[arg(long, value_parser = block_size)]
    pub block_size: Option<u64>,

    /// Content type stored on every blob (default: guessed from each file's
    /// extension, application/octet-stream when unknown).
    #[arg(long)]
    pub content_type: Option<String>,

    /// Give every blob a Content-MD5 of its whole content (like AzCopy's
    /// --put-md5), so `azcopy --check-md5` and `rclone check` can verify it.
    /// Computed from the bytes the SHA-256 covers, across resumes; costs an MD5
    /// pass on the relay and one tiny marker request per block.
    #[arg(long)]
    pub put_md5: bool,

    /// Compress on the wire: auto (each 1 MiB chunk that shrinks, at a zstd
    /// level the link leaves time for; already-compressed data goes as it
    /// is), zstd (every chunk that shrinks, level 3), off. Used only with a
    /// relay that announces it; the blob always holds the file's own bytes.
    #[arg(long, value_enum, default_value_t = crate::transfer::compress::Mode::Auto)]
    pub compress: crate::transfer::compress::Mode,

    /// Metadata KEY=VALUE stored on every blob (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,

    /// Attempts per file for retryable failures (lost connection, relay restart, Azure 5xx).
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// Share the bottleneck fairly with TCP flows (back off when a shared queue
    /// drops packets); uses the relay congestion controller.
    #[arg(long)]
    pub fair: bool,

    /// On a cold start, skip the packet train that measures the path (128
    /// packets sent back to back right after the handshake; the controller
    /// then jumps to half the measured bandwidth-delay product): plain slow
    /// start, doubling from 14.7 KB.
    #[arg(long)]
    pub no_probe_train: bool,

    /// Upload straight to Blob Storage over HTTPS (no relay).
    #[arg(long, requires = "storage_url")]
    pub direct: bool,

    /// If the QUIC handshake to the relay fails (e.g. UDP blocked), use direct mode
    /// instead (needs --storage-url and its credentials).
    #[arg(long, value_name = "direct", value_parser = ["direct"], requires = "storage_url")]
    pub fallback: Option<String>,

    /// With --direct: create the container if it does not exist.
    #[arg(long)]
    pub create_container: bool,

    /// With --direct: Put Block requests in flight per file [default: from the
    /// measured round trip to storage and the system's TCP congestion control:
    /// 8 near storage (< 20 ms) or with BBR; with CUBIC and others 16 up to 60
    /// ms, 32 beyond]. Without --block-size, blocks are then 16 MiB near
    /// storage and 8 MiB (AzCopy's) far from it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub connections: Option<u64>,

    /// With --direct: how long a storage request may go without progress before
    /// it is abandoned and retried (no byte of its body accepted for this
    /// long, or no answer this long after its body went). A slow request that
    /// keeps moving is never abandoned.
    #[arg(long, env = "RELAY_STORAGE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_stall_timeout: std::time::Duration,

    /// With --direct: transactional checksum of each Put Block: md5
    /// (Content-MD5) | crc64 (x-ms-content-crc64, Azure's CRC-64: a fraction of
    /// MD5's CPU; Azurite refuses it). Storage refuses a block whose checksum
    /// does not match either way.
    #[arg(long, env = "RELAY_BLOCK_CHECKSUM", default_value = "md5")]
    pub block_checksum: relay_storage::checksum::BlockChecksum,

    /// With --direct: memory for block buffers.
    #[arg(long, default_value = "512MiB", value_parser = size)]
    pub memory_budget: u64,
}

pub const UPLOAD_EXAMPLES: &str = "Examples:
  # Through a relay, pinning its certificate:
  relay-client upload data/ big.iso --relay relay.example.net:4433 --to lab/2026 \\
      --token \"$RELAY_TOKEN\" --relay-cert-sha256 AB:CD:...
  # -> blobs lab: 2026/data/..., 2026/big.iso

  # Signed in with Entra ID (no shared token): the Azure CLI's user, or a code
  # to enter on another device (device-code), a VM's managed identity, a
  # Kubernetes workload identity:
  relay-client upload data/ --relay HOST:4433 --to lab --relay-cert-sha256 AB:CD:... \\
      --entra cli --entra-scope api://blob-relay

  # Straight to storage (baseline, or where UDP is blocked):
  relay-client upload data/ --direct --storage-url https://ACCT.blob.core.windows.net --to lab/2026

  # Sync: upload what is new or changed, skip identical files, only *.csv:
  relay-client upload data/ --relay HOST:4433 --to lab --overwrite=if-different --include '*.csv'

  # For scripts:
  relay-client upload x.bin --relay HOST:4433 --to c --json | jq '.files[] | {blob, sha256, etag}'

Exit status: 0 when every file was committed and verified or skipped; 1 when any
file failed (one line per failed file on stderr); 2 for usage or setup errors (one
message: bad flags, relay unreachable, token or grant refused, missing container);
130 when interrupted (Ctrl-C, or the relay unreachable for longer than
--patience; the message says how to resume).";
