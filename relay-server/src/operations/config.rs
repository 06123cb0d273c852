//! Command-line flags (each also from a `RELAY_<FLAG>` environment variable or
//! the `--config` file), in the groups `--help` shows them in and
//! `configuration` turns into the relay's `Config`: listening, storage,
//! sign-in, memory limits, telemetry.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use relay_proto::limits::DEFAULT_BLOCK_SIZE;
use relay_proto::size::{SizeError, parse_byte_size};
use relay_storage::checksum::BlockChecksum;
use relay_storage::credentials::EntraSource;
use relay_transport::quic::Congestion;

/// Byte sizes: SI (`1GB` = 10^9) and IEC (`1GiB` = 2^30) units.
fn size(s: &str) -> Result<u64, SizeError> {
    parse_byte_size(s)
}

/// Receives files over QUIC and stages them as large blocks into Azure Blob Storage;
/// commits a blob only after its whole-file SHA-256 matches the client's.
#[derive(Debug, Parser)]
#[command(
    name = "relay-server",
    version = crate::telemetry::version::LONG,
    about,
    long_about = None,
    after_long_help = EXAMPLES,
    subcommand_negates_reqs = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<crate::operations::command_args::Command>,

    /// Where the relay keeps what must survive a restart: its self-signed
    /// certificate and key (made once; `relay-server cert rotate` replaces them),
    /// their fingerprint (tls-cert.sha256) and, without --id-key-file, the
    /// block-ID key. Default: $STATE_DIRECTORY (systemd StateDirectory=, e.g.
    /// /var/lib/blob-relay), else $XDG_STATE_HOME/blob-relay, else
    /// ~/.local/state/blob-relay.
    #[arg(long, env = "RELAY_STATE_DIR", global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// TOML file with any of these flags (`storage_url = "..."`); flags and
    /// RELAY_* variables override it.
    #[arg(long, env = "RELAY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Check the configuration (flags, files, certificate, tokens), reach the
    /// storage with it (Get Blob Properties in a container a token grants) and
    /// exit: 0 if all is well, 1 with the cause otherwise.
    #[arg(long)]
    pub check_config: bool,

    #[command(flatten)]
    pub listen: ListenArgs,

    #[command(flatten)]
    pub storage: StorageArgs,

    #[command(flatten)]
    pub sign_in: SignInArgs,

    #[command(flatten)]
    pub limits: LimitsArgs,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

/// Where the relay listens and the connections it takes: address, TLS, QUIC
/// windows, connection limits, shutdown.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Listening")]
pub struct ListenArgs {
    /// UDP address to listen on.
    #[arg(long, env = "RELAY_LISTEN", default_value = "0.0.0.0:4433")]
    pub listen: SocketAddr,

    /// TLS certificate chain (PEM). Without it the relay uses the self-signed
    /// certificate in --state-dir (made on first start).
    #[arg(long, env = "RELAY_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key (PEM).
    #[arg(long, env = "RELAY_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Also write the certificate's SHA-256 fingerprint here (for
    /// --relay-cert-sha256); the state directory always has it in tls-cert.sha256.
    #[arg(long, env = "RELAY_CERT_FINGERPRINT_FILE")]
    pub cert_fingerprint_file: Option<PathBuf>,

    /// Names in a self-signed certificate (repeatable).
    #[arg(
        long = "tls-name",
        env = "RELAY_TLS_NAME",
        value_delimiter = ',',
        default_value = "localhost"
    )]
    pub tls_names: Vec<String>,

    /// QUIC receive window per stream (one file's bytes in flight: 64 MiB
    /// carries 1 Gbit/s over a 300 ms path).
    #[arg(long, env = "RELAY_STREAM_WINDOW", default_value = "64MiB", value_parser = size)]
    pub stream_window: u64,

    /// QUIC receive window per connection (bounds unread data per client).
    #[arg(long, env = "RELAY_CONNECTION_WINDOW", default_value = "256MiB", value_parser = size)]
    pub connection_window: u64,

    /// Kernel UDP socket buffer size.
    #[arg(long, env = "RELAY_UDP_BUFFER", default_value = "16MiB", value_parser = size)]
    pub udp_buffer: u64,

    /// Congestion controller: relay (loss-tolerant, see docs/TRANSPORT.md) | cubic |
    /// bbr | newreno.
    #[arg(long, env = "RELAY_CONGESTION", default_value = "relay")]
    pub congestion: Congestion,

    /// Cap the QUIC sending rate, in Mbit/s; uses the relay congestion controller.
    #[arg(long, env = "RELAY_MAX_RATE", value_name = "MBIT", value_parser = relay_transport::quic::parse_rate_mbit)]
    pub max_rate: Option<f64>,

    /// Share bottlenecks fairly with TCP flows; uses the relay congestion controller.
    #[arg(long, env = "RELAY_FAIR")]
    pub fair: bool,

    /// Most authenticated client connections at once (each may buffer up to
    /// --connection-window; see the memory bound in docs/SECURITY.md).
    #[arg(long, env = "RELAY_MAX_CONNECTIONS", default_value_t = 32)]
    pub max_connections: usize,

    /// Most connections that have not presented a valid Offer yet.
    #[arg(long, env = "RELAY_MAX_PENDING", default_value_t = 128)]
    pub max_pending: usize,

    /// Most connections (pending or authenticated) from one source address
    /// (an IPv4 address, or an IPv6 /64).
    #[arg(long, env = "RELAY_MAX_PER_ADDRESS", default_value_t = 32)]
    pub max_per_address: usize,

    /// How long a new connection has to present a valid Offer (or Fetch or
    /// List), from its first packet (its handshake included).
    #[arg(long, env = "RELAY_AUTH_DEADLINE", value_name = "DURATION", default_value = "10s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub auth_deadline: Duration,

    /// On SIGTERM, how long in-flight transfers may continue.
    #[arg(long, env = "RELAY_SHUTDOWN_GRACE", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_duration)]
    pub shutdown_grace: Duration,
}

/// The storage account and how blobs go to it and come back.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Storage")]
pub struct StorageArgs {
    /// Blob service URL, e.g. https://ACCOUNT.blob.core.windows.net or
    /// http://127.0.0.1:10000/devstoreaccount1 (Azurite). A SAS may be in the query.
    #[arg(
        long,
        env = "RELAY_STORAGE_URL",
        required = true,
        hide_env_values = true
    )]
    pub storage_url: Option<String>,

    /// Storage account key; the relay signs its own short-lived account SAS from it.
    /// Without a key or SAS, Entra ID is used (managed identity by default).
    #[arg(long, env = "RELAY_ACCOUNT_KEY", hide_env_values = true)]
    pub account_key: Option<String>,

    /// Entra ID credential when no key or SAS is given: managed-identity | cli.
    #[arg(long, env = "RELAY_ENTRA", default_value = "managed-identity")]
    pub entra: EntraSource,

    /// Block size for Put Block (grown automatically for files over 50,000 blocks).
    #[arg(long, env = "RELAY_BLOCK_SIZE", default_value_t = DEFAULT_BLOCK_SIZE, value_parser = size)]
    pub block_size: u64,

    /// Put Block requests in flight per file.
    #[arg(long, env = "RELAY_BLOCKS_IN_FLIGHT", default_value_t = 4)]
    pub blocks_in_flight: usize,

    /// Key that signs block IDs and commit seals (64 hex characters), the same on
    /// every relay of a deployment so any relay resumes any transfer. Created
    /// (random, mode 0600) if the file does not exist. Default: id.key in
    /// --state-dir.
    #[arg(long, env = "RELAY_ID_KEY_FILE")]
    pub id_key_file: Option<PathBuf>,

    /// Use a random key for this process only (tests): staged blocks from before
    /// a restart, or from other relays, are ignored and those uploads restart.
    #[arg(long, env = "RELAY_ID_KEY_EPHEMERAL", conflicts_with = "id_key_file")]
    pub id_key_ephemeral: bool,

    /// Ranges of one blob a download reads from storage at once (4 MiB each,
    /// taken from the memory budget like blocks).
    #[arg(long, env = "RELAY_DOWNLOAD_RANGES", default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub download_ranges: u64,

    /// How long a download waits to write to a client that reads nothing
    /// before it drops the download (its memory goes back to the budget); a
    /// listing's page must be written within it in all.
    #[arg(long, env = "RELAY_DOWNLOAD_WRITE_TIMEOUT", value_name = "DURATION", default_value = "60s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub download_write_timeout: Duration,

    /// How long a pooled storage connection may sit idle before the relay closes
    /// it. Keep it below the storage endpoint's own keep-alive timeout (Azurite:
    /// 5 s): a request sent on a connection the server is closing is lost as a
    /// transport error and must be retried (docs/LOAD.md).
    #[arg(long, env = "RELAY_STORAGE_IDLE_TIMEOUT", value_name = "DURATION", default_value = "4s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_idle_timeout: Duration,

    /// How long a storage request may go without progress before it is
    /// abandoned and retried: no byte of its body accepted for this long, no
    /// answer this long after its body went, or (reads) no byte more of its
    /// answer for this long. Never for being slow while it moves
    /// (docs/ARCHITECTURE.md, "Storage requests").
    #[arg(long, env = "RELAY_STORAGE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_stall_timeout: Duration,

    /// Storage requests in flight at once (all transfers together). Bounds the
    /// connections the relay opens to storage, so a burst of small files cannot
    /// overflow the storage endpoint's accept queue (docs/LOAD.md).
    #[arg(long, env = "RELAY_STORAGE_CONCURRENCY", default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub storage_concurrency: u64,

    /// Transactional checksum of each Put Block: md5 (Content-MD5) | crc64
    /// (x-ms-content-crc64, Azure's CRC-64: a fraction of MD5's CPU). Storage
    /// refuses a block whose checksum does not match either way. Azurite does not
    /// check crc64 (docs/PERFORMANCE.md).
    #[arg(long, env = "RELAY_BLOCK_CHECKSUM", default_value = "md5")]
    pub block_checksum: BlockChecksum,
}

/// Who may do what: the tokens file, Entra ID, reserved containers.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Sign-in")]
pub struct SignInArgs {
    /// Tokens file: one token (16-256 visible ASCII characters) per line, optionally
    /// followed by a space and a comma-separated list of containers it may write;
    /// `#` starts a comment. Re-read when it changes; a line that breaks a rule is
    /// skipped and logged with its number and the rule. `relay-server token new`
    /// makes a line.
    #[arg(long, env = "RELAY_TOKENS", required_unless_present = "entra_audience")]
    pub tokens: Option<PathBuf>,

    /// Accept Entra ID access tokens for this audience: the relay app
    /// registration's application ID URI and/or client ID (comma-separated).
    /// Needs --entra-tenant and at least one --entra-grant (or
    /// --entra-reader-roles, --entra-deleter-roles). Beside --tokens or
    /// alone (docs/SECURITY.md, "Entra ID sign-in").
    #[arg(
        long,
        env = "RELAY_ENTRA_AUDIENCE",
        value_delimiter = ',',
        requires = "entra_tenant"
    )]
    pub entra_audience: Vec<String>,

    /// The directory (tenant) ID whose tokens are accepted (the `tid` claim).
    #[arg(long, env = "RELAY_ENTRA_TENANT", requires = "entra_audience")]
    pub entra_tenant: Option<String>,

    /// Accepted issuers (comma-separated). Default: the tenant's v2 issuer
    /// `{authority}/{tenant}/v2.0` and, for the public cloud, its v1 issuer
    /// `https://sts.windows.net/{tenant}/`.
    #[arg(long, env = "RELAY_ENTRA_ISSUER", value_delimiter = ',')]
    pub entra_issuer: Vec<String>,

    /// Where the tenant's OpenID discovery document is:
    /// `{authority}/{tenant}/v2.0/.well-known/openid-configuration`.
    #[arg(
        long,
        env = "RELAY_ENTRA_AUTHORITY",
        default_value = "https://login.microsoftonline.com"
    )]
    pub entra_authority: String,

    /// An app role or group and what it may do with which containers:
    /// `[role:|group:]NAME=CONTAINER[:r|:w|:d|:rw|:wd|:rwd][,...]`
    /// (repeatable, or `;`-separated in the environment), e.g.
    /// `Uploader.lab-a=lab-a` or `group:OBJECT_ID=data:rw,results:r`. A bare
    /// NAME is an app role; a bare container is write only (`:r` reads, `:d`
    /// deletes, each apart; `:rw` both).
    #[arg(long, env = "RELAY_ENTRA_GRANT", value_delimiter = ';')]
    pub entra_grant: Vec<String>,

    /// An app role `Reader.<container>` in a token grants reading that
    /// container (downloads and listings), without an --entra-grant for it.
    #[arg(long, env = "RELAY_ENTRA_READER_ROLES")]
    pub entra_reader_roles: bool,

    /// An app role `Deleter.<container>` in a token grants deleting in that
    /// container (a listed version of a blob, `If-Match` its ETag), without
    /// an --entra-grant for it; it grants nothing else.
    #[arg(long, env = "RELAY_ENTRA_DELETER_ROLES")]
    pub entra_deleter_roles: bool,

    /// Extra trusted root (PEM) for fetching the authority's documents (a
    /// private PKI or the tests' stand-in issuer); the usual roots stay trusted.
    #[arg(long, env = "RELAY_ENTRA_CA_FILE")]
    pub entra_ca_file: Option<PathBuf>,

    /// Clock skew allowed on a token's expiry and not-before.
    #[arg(long, env = "RELAY_ENTRA_SKEW", value_name = "DURATION", default_value = "60s", value_parser = relay_proto::duration::parse_duration)]
    pub entra_skew: Duration,

    /// Most key (JWKS) fetches per minute for tokens naming a key the relay does
    /// not hold; more such tokens are refused as unknown_key without a fetch.
    #[arg(long, env = "RELAY_ENTRA_KEY_REFRESHES", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub entra_key_refreshes: u64,

    /// Containers no upload may write, whatever a token grants: where the
    /// deployment keeps the relay's binary, keys and tokens.
    #[arg(
        long,
        env = "RELAY_RESERVED_CONTAINERS",
        value_delimiter = ',',
        default_value = "relay-boot,bench-boot,relay-artifacts"
    )]
    pub reserved_containers: Vec<String>,
}

/// How much memory transfers may hold.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Memory limits")]
pub struct LimitsArgs {
    /// One budget for block buffers, shared by all transfers.
    #[arg(long, env = "RELAY_MEMORY_BUDGET", default_value = "1GiB", value_parser = size)]
    pub memory_budget: u64,

    /// Largest block a client may ask for (bounds one transfer's memory).
    #[arg(long, env = "RELAY_MAX_BLOCK_SIZE", default_value = "128MiB", value_parser = size)]
    pub max_block_size: u64,

    /// Share of --memory-budget one token's transfers may hold at once (percent).
    #[arg(long, env = "RELAY_TOKEN_SHARE", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub token_share: u64,

    /// How long a transfer waits for block memory before it is refused as busy
    /// (retryable; staged blocks are kept).
    #[arg(long, env = "RELAY_BUDGET_WAIT", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub budget_wait: Duration,

    /// Upper bound for the relay's memory (the bound in docs/SECURITY.md); the
    /// relay refuses to start if its configuration could exceed it. Default: 90 %
    /// of the machine's memory.
    #[arg(long, env = "RELAY_MEMORY_LIMIT", value_parser = size)]
    pub memory_limit: Option<u64>,
}

/// What the relay tells operators: the health endpoint, storage checks, logs.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Telemetry")]
pub struct TelemetryArgs {
    /// HTTP address for /healthz and Prometheus /metrics (off when not given).
    #[arg(long, env = "RELAY_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,

    /// Time between background storage checks (their last result is in
    /// /healthz and blob_relay_storage_reachable).
    #[arg(long, env = "RELAY_STORAGE_CHECK_INTERVAL", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_check_interval: Duration,

    /// Log format: text (colour only on a terminal) | json (one object a line).
    #[arg(long, env = "RELAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Colour in text logs: auto (only when stderr is a terminal and NO_COLOR
    /// is not set) | always | never.
    #[arg(long, env = "RELAY_COLOR", default_value = "auto", value_name = "WHEN")]
    pub color: relay_proto::color::ColorChoice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Lines stay under 60 columns (the key excepted: one word is never split), so
/// help wrapped to a narrow terminal still copies and pastes.
const EXAMPLES: &str = "Examples:
  # Local Azurite with its well-known key; the
  # certificate is kept in ./relay-state:
  AZURITE_KEY=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==
  relay-server --listen 127.0.0.1:4433 \\
    --state-dir ./relay-state \\
    --storage-url http://127.0.0.1:10000/devstoreaccount1 \\
    --account-key \"$AZURITE_KEY\" --tokens tokens.txt

  # Azure VM, managed identity (Storage Blob Data
  # Contributor); check, then serve:
  relay-server --tokens /etc/blob-relay/tokens \\
    --storage-url https://ACCOUNT.blob.core.windows.net \\
    --check-config

  # A token for containers data and scratch (its line
  # on stdout, the client command on stderr):
  relay-server token new --containers data,scratch \\
    >> /etc/blob-relay/tokens

Tokens file: TOKEN [CONTAINER,...] per line; tokens
have 16-256 visible ASCII characters; # comments.
  # this one may write data and scratch:
  s3cr3t-token-for-lab-a data,scratch
  # no list: any container that is not reserved:
  s3cr3t-token-for-ops";

/// Parses the command line with the TOML file of `--config` (or `RELAY_CONFIG`)
/// merged in: a setting from the file is used only where neither a flag nor a
/// `RELAY_*` variable gave one, so flags > environment > file > defaults. The
/// file's settings become flags placed before the user's own; the process
/// environment is never changed.
pub fn parse_with_config_file(argv: Vec<OsString>) -> Result<Args, ConfigError> {
    use clap::CommandFactory;
    use clap::parser::ValueSource;
    // A first, lenient pass only to learn `--config` and where each value came from.
    let lenient = Args::command()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
        .map_err(ConfigError::Usage)?;
    let Some(path) = lenient.get_one::<PathBuf>("config").cloned() else {
        return Args::try_parse_from(argv).map_err(ConfigError::Usage);
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let settings = config_flags(&text).map_err(|source| ConfigError::Setting { path, source })?;
    let given = |id: &str| {
        matches!(
            lenient.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let mut merged: Vec<OsString> = argv.iter().take(1).cloned().collect();
    for (id, flag) in settings {
        if !given(&id) {
            merged.extend(flag);
        }
    }
    merged.extend(argv.into_iter().skip(1));
    Args::try_parse_from(merged).map_err(ConfigError::Usage)
}

/// Why the command line and config file could not be turned into options.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// clap's own error (usage, help, version): it knows how to print and exit.
    #[error(transparent)]
    Usage(clap::Error),
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {}: {source}", path.display())]
    Setting { path: PathBuf, source: SettingError },
}

/// What is wrong in the config file's text; `key` as written there.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error("unknown setting {key:?}")]
    Unknown { key: String },
    #[error("setting {key:?}: expected true or false")]
    NotASwitchValue { key: String },
    #[error("setting {key:?}: list items must be strings")]
    ListItemNotString { key: String },
    #[error("setting {key:?}: unsupported {kind} value")]
    Unsupported { key: String, kind: &'static str },
}

/// `storage_url = "x"` → (`storage_url`, [`--storage-url=x`]); only flags that
/// exist; `true` switches become the bare flag, `false` ones nothing.
pub fn config_flags(text: &str) -> Result<Vec<(String, Vec<OsString>)>, SettingError> {
    use clap::CommandFactory;
    let table: toml::Table = toml::from_str(text)?;
    let cmd = Args::command();
    let mut out = Vec::new();
    for (k, v) in table {
        let key = k.replace('_', "-");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && key != "config")
            .ok_or_else(|| SettingError::Unknown { key: k.clone() })?;
        let id = arg.get_id().to_string();
        let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        let flag = match (v, switch) {
            (toml::Value::Boolean(true), true) => vec![format!("--{key}").into()],
            (toml::Value::Boolean(false), true) => Vec::new(),
            (_, true) => return Err(SettingError::NotASwitchValue { key: k }),
            (toml::Value::String(s), _) => vec![format!("--{key}={s}").into()],
            (toml::Value::Integer(i), _) => vec![format!("--{key}={i}").into()],
            (toml::Value::Boolean(b), _) => vec![format!("--{key}={b}").into()],
            (toml::Value::Array(a), _) => {
                let items = a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| SettingError::ListItemNotString { key: k.clone() })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                vec![format!("--{key}={}", items.join(",")).into()]
            }
            (other, _) => {
                return Err(SettingError::Unsupported {
                    key: k,
                    kind: other.type_str(),
                });
            }
        };
        out.push((id, flag));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn download_limits_have_defaults_and_bounds() {
        let base = ["relay-server", "--storage-url=http://s", "--tokens=/t"];
        let with = |extra: &[&str]| {
            let mut v: Vec<&str> = base.to_vec();
            v.extend_from_slice(extra);
            Args::try_parse_from(argv(&v))
        };
        let a = with(&[]).expect("defaults");
        assert_eq!(
            (a.storage.download_ranges, a.storage.download_write_timeout),
            (6, Duration::from_secs(60))
        );
        let a = with(&["--download-ranges=2", "--download-write-timeout=5"]).expect("set");
        assert_eq!(
            (a.storage.download_ranges, a.storage.download_write_timeout),
            (2, Duration::from_secs(5))
        );
        for bad in [
            "--download-ranges=0",
            "--download-ranges=65",
            "--download-write-timeout=0",
        ] {
            assert!(
                Args::try_parse_from(argv(&["relay-server", bad])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn config_keys_become_flags() {
        let f = config_flags("storage_url = \"https://a.blob.core.windows.net\"\nmemory-budget = \"2GiB\"\nmax_connections = 8\nfair = true\nid_key_ephemeral = false\ntls_name = [\"a\", \"b\"]\n")
            .expect("valid");
        let flat: Vec<String> = f
            .iter()
            .flat_map(|(_, v)| v.iter().map(|x| x.to_string_lossy().into_owned()))
            .collect();
        for want in [
            "--storage-url=https://a.blob.core.windows.net",
            "--memory-budget=2GiB",
            "--max-connections=8",
            "--fair",
            "--tls-name=a,b",
        ] {
            assert!(flat.contains(&want.to_string()), "{want}: {flat:?}");
        }
        assert!(!flat.iter().any(|x| x.contains("ephemeral")));
        assert!(config_flags("no_such_flag = 1").is_err());
        assert!(config_flags("config = \"x\"").is_err());
        assert!(config_flags("fair = \"yes\"").is_err());
        assert!(config_flags("not toml at all = = =").is_err());
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = std::env::temp_dir().join(format!("relay-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("relay.toml");
        std::fs::write(
            &file,
            "storage_url = \"http://file\"\ntokens = \"/t\"\nmax_connections = 7\nblocks_in_flight = 3\n",
        )
        .expect("write");
        let cfg = file.to_string_lossy().into_owned();
        let args = parse_with_config_file(argv(&[
            "relay-server",
            "--config",
            &cfg,
            "--max-connections",
            "9",
        ]))
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(args.storage.storage_url.as_deref(), Some("http://file"));
        assert_eq!(args.listen.max_connections, 9, "flag wins");
        assert_eq!(args.storage.blocks_in_flight, 3, "file beats the default");
        assert_eq!(args.listen.max_pending, 128, "default stays");
        // A required setting may come from the file alone.
        assert!(parse_with_config_file(argv(&["relay-server", "--config", &cfg])).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
