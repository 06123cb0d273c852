//! `relay-client download`'s flags. The connection flags mean what they mean
//! for `upload`, and the relay connection is made by the same code
//! (`setup::mode`) from an `UploadArgs` that carries them (`connection`).

use std::path::PathBuf;

use clap::{Args, FromArgMatches};
use relay_transport::quic::Congestion;

use crate::cli::{OverwriteMode, UploadArgs};
use crate::units::size;

#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// What to download: CONTAINER/BLOB, CONTAINER/PREFIX (every blob under
    /// it), CONTAINER (all of it), or a blob URL
    /// https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME.
    #[arg(required = true, value_name = "SOURCE")]
    pub sources: Vec<String>,

    /// Local folder the files go into (created if missing). The source's last
    /// segment keeps its name: `c/2026/run1` gives DIR/run1/...
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,

    /// With --direct: the key of this user's direct uploads (see upload
    /// --help): a blob it sealed is checked by its SHA-256.
    #[arg(long, env = "RELAY_ID_KEY_FILE")]
    pub id_key_file: Option<PathBuf>,

    /// Relay address HOST:PORT.
    #[arg(long, env = "RELAY_ADDR", required_unless_present = "direct")]
    pub relay: Option<String>,

    /// Download straight from Blob Storage over HTTPS (no relay): ranged
    /// reads, each checked against storage's MD5 of the range.
    #[arg(long, requires = "storage_url", conflicts_with = "relay_connections")]
    pub direct: bool,

    /// With --direct: blob service URL (a SAS may be in the query).
    #[arg(long, env = "RELAY_STORAGE_URL")]
    pub storage_url: Option<String>,

    /// With --direct: storage account key (a short-lived SAS is signed from it).
    #[arg(long, env = "RELAY_ACCOUNT_KEY", hide_env_values = true)]
    pub account_key: Option<String>,

    /// Bearer token for the relay (it needs read access: `CONTAINER:r` or
    /// `:rw` in the relay's tokens file), or sign in with --entra.
    #[arg(long, env = "RELAY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Sign in with Entra ID instead of --token: cli | device-code |
    /// managed-identity | workload-identity (as for upload).
    #[arg(long, value_enum, value_name = "FLOW")]
    pub entra: Option<crate::sign_in::Flow>,

    /// With --entra: the relay's application ID URI or client ID.
    #[arg(long, env = "RELAY_ENTRA_SCOPE", value_name = "APP_ID_URI")]
    pub entra_scope: Option<String>,

    /// With --entra: the directory (tenant) ID or domain.
    #[arg(long, env = "AZURE_TENANT_ID", value_name = "TENANT")]
    pub entra_tenant: Option<String>,

    /// With --entra: the client ID (see upload --help).
    #[arg(long, env = "AZURE_CLIENT_ID", value_name = "CLIENT_ID")]
    pub entra_client_id: Option<String>,

    /// Trust the relay whose certificate has this SHA-256 fingerprint.
    #[arg(long, env = "RELAY_CERT_SHA256")]
    pub relay_cert_sha256: Option<String>,

    /// Trust relay certificates issued by this CA (PEM).
    #[arg(long, env = "RELAY_CA")]
    pub relay_ca: Option<PathBuf>,

    /// TLS name to verify with --relay-ca (default: the host in --relay).
    #[arg(long)]
    pub server_name: Option<String>,

    /// Do not verify the relay at all. Labs only.
    #[arg(long)]
    pub insecure: bool,

    /// Most files in flight at once.
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,

    /// When a local file of the name exists: never (refuse it; a file
    /// identical to the blob is skipped) | always (replace) | if-different
    /// (skip identical files, replace others) | if-newer (keep a local file
    /// modified after the blob, replace others). `--overwrite` alone: always.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_value = "never",
        default_missing_value = "always"
    )]
    pub overwrite: OverwriteMode,

    /// Show what would be downloaded, skipped or refused, writing nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Download only blobs whose name below the source matches GLOB (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,

    /// Leave out blobs whose name below the source matches GLOB (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Print one JSON summary on stdout instead of text.
    #[arg(long, conflicts_with = "json_lines")]
    pub json: bool,

    /// Print one JSON event per line on stdout as things happen.
    #[arg(long)]
    pub json_lines: bool,

    /// Time between status lines when stderr is not a terminal (0: none).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = relay_proto::duration::parse_duration)]
    pub status_interval: std::time::Duration,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,

    /// Attempts per file for retryable failures (lost connection, relay
    /// restart, storage 5xx); each resumes from what is on disk.
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// How long to wait for the QUIC handshake.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub connect_timeout: std::time::Duration,

    /// How long to wait for a relay that cannot be reached before stopping
    /// with exit 130 and the command that resumes (as for upload).
    #[arg(long, default_value = "10m", value_parser = relay_proto::duration::parse_duration, value_name = "DURATION")]
    pub patience: std::time::Duration,

    /// A relay that acknowledges nothing for this long is taken as gone.
    #[arg(long, default_value = "10s", value_parser = relay_proto::duration::parse_duration, value_name = "DURATION")]
    pub idle_timeout: std::time::Duration,

    /// How long to keep asking a relay that says "busy".
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = relay_proto::duration::parse_duration)]
    pub busy_wait: std::time::Duration,

    /// QUIC congestion controller of this end (the relay's sends the bytes).
    #[arg(long, default_value = "relay")]
    pub congestion: Congestion,

    /// Cap this end's QUIC sending rate, in Mbit/s.
    #[arg(long, alias = "cap-mbps", value_name = "MBIT", value_parser = relay_transport::quic::parse_rate_mbit)]
    pub max_rate: Option<f64>,

    /// Where measured path bandwidth and RTT are kept between runs.
    #[arg(long, value_name = "FILE", env = "RELAY_PATH_CACHE")]
    pub path_cache: Option<PathBuf>,

    /// Start cold: ignore the path cache's estimate.
    #[arg(long)]
    pub no_warm_start: bool,

    /// QUIC receive window per stream (one file's bytes in flight).
    #[arg(long, default_value = "64MiB", value_parser = size)]
    pub stream_window: u64,

    /// QUIC receive window per connection.
    #[arg(long, default_value = "256MiB", value_parser = size)]
    pub connection_window: u64,

    /// QUIC connections to the relay, each from its own UDP port; files are
    /// spread over them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub relay_connections: Option<u64>,
}

pub const DOWNLOAD_EXAMPLES: &str = "Examples:
  # A folder of results back (restore/run1/...), pinning the relay's certificate:
  relay-client download results/2026/run1 --to restore --relay relay.example.net:4433 \\
      --token \"$RELAY_TOKEN\" --relay-cert-sha256 AB:CD:...

  # One blob, then everything under a prefix except logs:
  relay-client download results/2026/big.bin --to restore --relay HOST:4433 ...
  relay-client download results/2026 --to restore --exclude '*.log' --relay HOST:4433 ...

  # Rerun after an interruption: finished files are skipped as identical,
  # partial ones resume where they stopped:
  relay-client download results/2026/run1 --to restore --relay HOST:4433 ...

Each file is written as DIR/.../.NAME.relay-partial and renamed into place only
after its bytes are verified: a blob the relay sealed on upload by its SHA-256,
another by its Content-MD5, else by storage's checksum of every range read (the
report's `check` says which). Blob names that would leave DIR (`..`, a leading
`/`, backslashes, control characters, empty segments) are refused per file, and
no symbolic link inside DIR is followed.

Exit status: 0 when every file was downloaded and verified or skipped; 1 when
any file failed; 2 for usage or setup errors (bad flags, relay unreachable,
token or grant refused); 130 when interrupted (Ctrl-C, or the relay unreachable
for longer than --patience; the message says how to resume).";

/// The `UploadArgs` that carry these connection flags, for `setup::mode`:
/// parsed from a minimal command line (so options `download` does not have
/// take upload's defaults), then the flags given here set on it.
pub fn connection(a: &DownloadArgs, container: &str) -> Result<UploadArgs, clap::Error> {
    let cmd = UploadArgs::augment_args(clap::Command::new("upload").no_binary_name(true));
    let matches = cmd.try_get_matches_from(["-", "--to", container, "--relay", "-"])?;
    let mut u = UploadArgs::from_arg_matches(&matches)?;
    u.paths.clear();
    u.relay = a.relay.clone();
    u.direct = a.direct;
    u.storage_url = a.storage_url.clone();
    u.account_key = a.account_key.clone();
    u.id_key_file = a.id_key_file.clone();
    u.token = a.token.clone();
    u.entra = a.entra;
    u.entra_scope = a.entra_scope.clone();
    u.entra_tenant = a.entra_tenant.clone();
    u.entra_client_id = a.entra_client_id.clone();
    u.relay_cert_sha256 = a.relay_cert_sha256.clone();
    u.relay_ca = a.relay_ca.clone();
    u.server_name = a.server_name.clone();
    u.insecure = a.insecure;
    u.connect_timeout = a.connect_timeout;
    u.patience = a.patience;
    u.idle_timeout = a.idle_timeout;
    u.busy_wait = a.busy_wait;
    u.congestion = a.congestion;
    u.max_rate = a.max_rate;
    u.path_cache = a.path_cache.clone();
    u.no_warm_start = a.no_warm_start;
    u.stream_window = a.stream_window;
    u.connection_window = a.connection_window;
    u.relay_connections = a.relay_connections.unwrap_or(1);
    u.quiet = a.quiet;
    // Nothing is compressed on the way back yet: do not announce it.
    u.compress = crate::compress::Mode::Off;
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        d: DownloadArgs,
    }

    #[test]
    fn the_connection_flags_reach_the_upload_setup() {
        let t = T::try_parse_from([
            "x",
            "c/p",
            "--to",
            "out",
            "--relay",
            "127.0.0.1:4433",
            "--token",
            "tok",
            "--insecure",
            "--patience",
            "90s",
            "--relay-connections",
            "3",
            "--max-rate",
            "50",
        ])
        .expect("parse");
        let u = connection(&t.d, "c").expect("upload args");
        assert_eq!(u.relay.as_deref(), Some("127.0.0.1:4433"));
        assert_eq!(u.token.as_deref(), Some("tok"));
        assert!(u.insecure);
        assert_eq!(u.patience, std::time::Duration::from_secs(90));
        assert_eq!(u.relay_connections, 3);
        assert_eq!(u.max_rate, Some(50.0));
        assert!(!u.direct);
    }
}
