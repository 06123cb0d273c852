//! Command-line interface: short help for the common case, long help with examples.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use relay_proto::size::parse_byte_size;
use relay_transport::quic::Congestion;

use crate::units::{block_size, size};

/// Uploads files to Azure Blob Storage through a Blob Relay (QUIC), or directly.
#[derive(Debug, Parser)]
#[command(name = "relay-client", version = crate::version::LONG, about)]
pub struct Cli {
    /// More detail on stderr (-v: info, -vv: debug); RELAY_LOG overrides.
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Colour in logs: auto (only on a terminal, and not with NO_COLOR set) |
    /// always | never.
    #[arg(long, global = true, default_value = "auto", value_name = "WHEN")]
    pub color: relay_proto::color::ColorChoice,

    /// Configuration file of named profiles (relay, pin, sign-in, destination)
    /// [default: $XDG_CONFIG_HOME/blob-relay/client.toml, if it exists].
    /// Flags and environment variables win over it.
    #[arg(long, global = true, env = "RELAY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The profile of the configuration file to use [default: default].
    #[arg(long, global = true, env = "RELAY_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Upload files and directories; each blob is committed only after its SHA-256 is verified.
    #[command(after_long_help = UPLOAD_EXAMPLES)]
    Upload(Box<UploadArgs>),
    /// Download blobs (one, a prefix, a container) into a folder through the
    /// relay; each file is verified before it takes its name, and a rerun resumes.
    #[command(after_long_help = crate::download::args::DOWNLOAD_EXAMPLES)]
    Download(Box<crate::download::args::DownloadArgs>),
    /// Watch directories: upload what is there, then every file that appears or
    /// changes once it is complete (closed and unchanged for --settle), until stopped.
    #[command(after_long_help = WATCH_EXAMPLES)]
    Watch(Box<WatchArgs>),
    /// Compare uploads through the relay with direct uploads from here: generated
    /// files, alternating runs, verified, deleted afterwards unless --keep.
    Bench(Box<BenchArgs>),
    /// Print a shell completion script (e.g. `relay-client completions bash >
    /// /etc/bash_completion.d/relay-client`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout: `relay-client man | man -l -`.
    Man,
    /// The configuration file: `config init` writes a profile.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Write a profile (--profile, default `default`) into the configuration
    /// file (--config, default $XDG_CONFIG_HOME/blob-relay/client.toml; made
    /// with mode 0600), so later commands need only their paths (and --to if
    /// the profile has none). A token is referenced by its file, never copied in.
    Init(Box<ConfigInitArgs>),
}

#[derive(Debug, Args)]
pub struct ConfigInitArgs {
    /// Relay address HOST:PORT.
    #[arg(long)]
    pub relay: String,
    /// The relay certificate's SHA-256 fingerprint to pin.
    #[arg(long, required_unless_present = "relay_ca")]
    pub relay_cert_sha256: Option<String>,
    /// Or a CA (PEM) that issued the relay's certificate.
    #[arg(long, conflicts_with = "relay_cert_sha256")]
    pub relay_ca: Option<PathBuf>,
    /// A file whose first line is the relay token (read at each run).
    #[arg(long, value_name = "PATH", conflicts_with = "entra")]
    pub token_file: Option<PathBuf>,
    /// Sign in with Entra ID instead: cli | device-code | managed-identity | workload-identity.
    #[arg(long, value_enum, value_name = "FLOW", requires = "entra_scope")]
    pub entra: Option<crate::sign_in::Flow>,
    /// With --entra: the relay's application ID URI.
    #[arg(long, value_name = "APP_ID_URI")]
    pub entra_scope: Option<String>,
    /// Default destination (CONTAINER[/PREFIX]).
    #[arg(long)]
    pub to: Option<String>,
}

/// What to do when the destination blob exists (`--overwrite[=MODE]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OverwriteMode {
    /// Refuse the file (exit 1); a file identical to the blob the relay sealed is skipped.
    #[value(alias = "false")]
    Never,
    /// Replace the blob.
    #[value(alias = "true")]
    Always,
    /// Skip the file when the relay's verified record says the blob holds exactly
    /// these bytes (size and SHA-256); replace it otherwise.
    #[value(alias = "ifSourceDifferent")]
    IfDifferent,
    /// Skip the file when identical or when the blob was committed after the
    /// source's last modification (the blob's Last-Modified, set by storage);
    /// replace it otherwise. Like AzCopy's ifSourceNewer.
    #[value(alias = "ifSourceNewer")]
    IfNewer,
}

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

    /// Relay address HOST:PORT.
    #[arg(long, env = "RELAY_ADDR", required_unless_present = "direct")]
    pub relay: Option<String>,

    /// Bearer token for the relay (or sign in with --entra instead).
    #[arg(long, env = "RELAY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Sign in with Entra ID: cli (az login) | device-code (a code to enter on
    /// another device) | managed-identity (an Azure VM) | workload-identity
    /// (Kubernetes, federated). Through a relay: instead of --token, a token
    /// for the relay's application (--entra-scope), renewed before it expires.
    /// With --direct: the storage credential when no key or SAS is given
    /// [default there: cli].
    #[arg(long, value_enum, value_name = "FLOW")]
    pub entra: Option<crate::sign_in::Flow>,

    /// With --entra through a relay: the relay's application ID URI (e.g.
    /// api://blob-relay; `/.default` is added) or client ID.
    #[arg(long, env = "RELAY_ENTRA_SCOPE", value_name = "APP_ID_URI")]
    pub entra_scope: Option<String>,

    /// With --entra: the directory (tenant) ID or domain [device-code default:
    /// organizations; cli: the CLI's default tenant].
    #[arg(long, env = "AZURE_TENANT_ID", value_name = "TENANT")]
    pub entra_tenant: Option<String>,

    /// With --entra: device-code's public client [default: the Azure CLI's],
    /// managed-identity's user-assigned identity, workload-identity's
    /// application.
    #[arg(long, env = "AZURE_CLIENT_ID", value_name = "CLIENT_ID")]
    pub entra_client_id: Option<String>,

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

    /// Print one JSON summary on stdout instead of text (setup errors too).
    #[arg(long, conflicts_with = "json_lines")]
    pub json: bool,

    /// Print one JSON event per line on stdout as things happen (file results,
    /// periodic status, the summary last), for tools that follow progress.
    #[arg(long)]
    pub json_lines: bool,

    /// Time between status lines when stderr is not a terminal (0: none).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = relay_proto::duration::parse_duration)]
    pub status_interval: std::time::Duration,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,

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
    #[arg(long, value_enum, default_value_t = crate::compress::Mode::Auto)]
    pub compress: crate::compress::Mode,

    /// Metadata KEY=VALUE stored on every blob (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,

    /// Attempts per file for retryable failures (lost connection, relay restart, Azure 5xx).
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// How long to wait for the QUIC handshake.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub connect_timeout: std::time::Duration,

    /// How long to wait for a relay that cannot be reached or a connection
    /// that was lost (a VPN reconnecting, a route flap, a lid closed) before
    /// stopping with exit 130 and the command that resumes; meanwhile it is
    /// asked again with capped backoff and the wait is reported. Attempts
    /// spent waiting do not count against --attempts. 0: fail at once.
    /// e.g. 90s, 30m, 2h.
    #[arg(long, default_value = "10m", value_parser = relay_proto::duration::parse_duration, value_name = "DURATION")]
    pub patience: std::time::Duration,

    /// A relay that acknowledges nothing for this long is taken as gone: the
    /// connection is closed and a new one tried (files resume on it).
    #[arg(long, default_value = "10s", value_parser = relay_proto::duration::parse_duration, value_name = "DURATION")]
    pub idle_timeout: std::time::Duration,

    /// How long to keep asking a relay that is at its connection limit (it says
    /// "busy": later, not no) before giving up with exit 2.
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = relay_proto::duration::parse_duration)]
    pub busy_wait: std::time::Duration,

    /// QUIC congestion controller: relay (loss-tolerant, see docs/TRANSPORT.md) |
    /// cubic | bbr | newreno.
    #[arg(long, default_value = "relay")]
    pub congestion: Congestion,

    /// Cap the QUIC sending rate, in Mbit/s (like AzCopy's --cap-mbps); uses the
    /// relay congestion controller.
    #[arg(long, alias = "cap-mbps", value_name = "MBIT", value_parser = relay_transport::quic::parse_rate_mbit)]
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

    /// On a cold start, skip the packet train that measures the path (128
    /// packets sent back to back right after the handshake; the controller
    /// then jumps to half the measured bandwidth-delay product): plain slow
    /// start, doubling from 14.7 KB.
    #[arg(long)]
    pub no_probe_train: bool,

    /// QUIC send/receive window per stream (one file's bytes in flight: 64 MiB
    /// carries 1 Gbit/s over a 300 ms path).
    #[arg(long, default_value = "64MiB", value_parser = size)]
    pub stream_window: u64,

    /// QUIC window per connection.
    #[arg(long, default_value = "256MiB", value_parser = size)]
    pub connection_window: u64,

    /// QUIC connections to the relay, each from its own UDP port: files are
    /// spread over them (the least loaded takes the next file), so a load
    /// balancer that spreads flows by address and port, as Azure's does, can
    /// send them to several relays. Each has its own windows and congestion
    /// control: up to N × --connection-window bytes in flight.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64), conflicts_with = "direct")]
    pub relay_connections: u64,

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

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Every `upload` option; PATHS are the directories to watch.
    #[command(flatten)]
    pub upload: UploadArgs,

    /// How long a file must stay closed and unchanged (size and modification
    /// time) before it is uploaded.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = relay_proto::duration::parse_duration)]
    pub settle: std::time::Duration,

    /// Poll every DURATION (at least 100ms) instead of file-system events
    /// (NFS, SMB; chosen automatically, every 30 s, on such mounts).
    #[arg(long, value_name = "DURATION", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub poll: Option<std::time::Duration>,

    /// Leave out files whose name matches GLOB (repeatable), besides the
    /// temporary names *.part, ~*, .*.swp, *.tmp, .~lock.*.
    #[arg(long, value_name = "GLOB")]
    pub ignore: Vec<String>,

    /// Do not leave out the default temporary names.
    #[arg(long)]
    pub no_default_ignore: bool,

    /// The journal of committed files (SQLite) [default:
    /// $XDG_STATE_HOME/blob-relay/watch-HASH.sqlite, one per folders and destination].
    #[arg(long, value_name = "FILE", env = "RELAY_WATCH_JOURNAL")]
    pub journal: Option<PathBuf>,

    /// Keep no journal: a restart asks the relay about every file (slower).
    #[arg(long, conflicts_with = "journal")]
    pub no_journal: bool,

    /// What to do with a source file once its blob is committed and verified:
    /// keep | delete | move DIR (DIR outside the watched folders).
    #[arg(long, num_args = 1..=2, value_names = ["ACTION", "DIR"], default_values = ["keep"])]
    pub after_upload: Vec<String>,

    /// Most files waiting to settle; beyond it, files are picked up by a
    /// reconcile scan once there is room (memory stays bounded).
    #[arg(long, default_value_t = 10_000)]
    pub max_pending: usize,

    /// Time between reconcile scans that catch what events missed (0: only
    /// when events were lost).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = relay_proto::duration::parse_duration)]
    pub reconcile: std::time::Duration,
}

const WATCH_EXAMPLES: &str = "Examples:
  # Upload what appears in /data/runs, replacing blobs whose file changed:
  relay-client watch /data/runs --relay relay.example.net:4433 --to lab/runs \\
      --relay-cert-sha256 AB:CD:... --overwrite=if-different

  # Move each file away once its blob is committed and verified:
  relay-client watch /srv/scans --relay HOST:4433 --to scans --after-upload move /srv/scans-done

Exit status: 0 after a clean stop (SIGTERM or Ctrl-C: commits under way are
finished first); 2 for usage or setup errors; 3 when the relay or storage refused
what every file needs (a revoked token, a deleted container) while watching.";

/// `relay-client bench`'s flags (the command itself: `crate::bench`).
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Relay address HOST:PORT.
    #[arg(long, env = "RELAY_ADDR")]
    pub relay: String,

    /// Bearer token for the relay.
    #[arg(long, env = "RELAY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Trust the relay whose certificate has this SHA-256 fingerprint.
    #[arg(long, env = "RELAY_CERT_SHA256")]
    pub relay_cert_sha256: Option<String>,

    /// Trust relay certificates issued by this CA (PEM).
    #[arg(long, env = "RELAY_CA")]
    pub relay_ca: Option<PathBuf>,

    /// Destination CONTAINER or CONTAINER/PREFIX; each run writes under
    /// PREFIX/bench-UNIXTIME/run-N/METHOD/.
    #[arg(long)]
    pub to: String,

    /// Size of each large file (SI or IEC units: 1GB, 1GiB).
    #[arg(long, default_value = "256MiB", value_parser = parse_byte_size)]
    pub large_size: u64,

    /// Number of large files.
    #[arg(long, default_value_t = 1)]
    pub large_count: usize,

    /// Size of each small file.
    #[arg(long, default_value = "1MiB", value_parser = parse_byte_size)]
    pub small_size: u64,

    /// Number of small files.
    #[arg(long, default_value_t = 64)]
    pub small_count: usize,

    /// Uploads per method; the first method alternates between runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,

    /// Blob service URL for the direct runs, verification and clean-up; without
    /// it only the relay is measured and the blobs stay.
    #[arg(long, env = "RELAY_STORAGE_URL")]
    pub storage_url: Option<String>,

    /// Storage account key (a short-lived SAS is signed from it).
    #[arg(long, env = "RELAY_ACCOUNT_KEY", hide_env_values = true)]
    pub account_key: Option<String>,

    /// Entra ID credential when no key or SAS is given: cli | managed-identity.
    #[arg(long, default_value = "cli")]
    pub entra: String,

    /// Relay runs: sign in to the relay with Entra ID instead of --token (cli |
    /// managed-identity | workload-identity; device-code would ask at every
    /// run), for the application --entra-scope names.
    #[arg(long, value_name = "FLOW")]
    pub relay_entra: Option<String>,

    /// With --relay-entra: the relay's application ID URI.
    #[arg(long, env = "RELAY_ENTRA_SCOPE", value_name = "APP_ID_URI")]
    pub entra_scope: Option<String>,

    /// Relay runs: QUIC connections to the relay, each from its own UDP port
    /// (upload's --relay-connections).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub relay_connections: u64,

    /// Direct mode: Put Block requests in flight per file (TCP connections)
    /// [default: direct mode's own choice from the measured path].
    #[arg(long)]
    pub connections: Option<usize>,

    /// Keep the uploaded blobs (default: delete them when storage credentials
    /// are given).
    #[arg(long)]
    pub keep: bool,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// Where to generate the files (default: a new directory in the system's
    /// temporary directory, removed afterwards).
    #[arg(long)]
    pub workdir: Option<PathBuf>,

    /// Upload the files of this directory (only read, never changed) instead
    /// of generated random ones, through the relay with compression
    /// (`--compress auto`) and without (`relay-off`), and direct when storage
    /// credentials are given: what compression buys on your own data.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,

    /// Measure downloads instead: the files are put in storage once through
    /// the relay (untimed), then each run downloads them all through the relay
    /// and, with storage credentials, straight from storage (`download
    /// --direct`), into a fresh folder, every file checked by its SHA-256.
    #[arg(long)]
    pub download: bool,
}
