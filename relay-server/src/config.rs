//! Command-line flags (each also from a `RELAY_<FLAG>` environment variable) and the
//! resolved configuration the server runs with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use relay_proto::limits::DEFAULT_BLOCK_SIZE;
use relay_proto::size::parse_size;
use relay_storage::credentials::EntraSource;
use relay_transport::quic::Congestion;

fn size(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// Receives files over QUIC and stages them as large blocks into Azure Blob Storage;
/// commits a blob only after its whole-file SHA-256 matches the client's.
#[derive(Debug, Parser)]
#[command(name = "relay-server", version, about, long_about = None, after_long_help = EXAMPLES)]
pub struct Args {
    /// UDP address to listen on.
    #[arg(long, env = "RELAY_LISTEN", default_value = "0.0.0.0:4433")]
    pub listen: SocketAddr,

    /// Blob service URL, e.g. https://ACCOUNT.blob.core.windows.net or
    /// http://127.0.0.1:10000/devstoreaccount1 (Azurite). A SAS may be in the query.
    #[arg(long, env = "RELAY_STORAGE_URL")]
    pub storage_url: String,

    /// Storage account key; the relay signs its own short-lived account SAS from it.
    /// Without a key or SAS, Entra ID is used (managed identity by default).
    #[arg(long, env = "RELAY_ACCOUNT_KEY", hide_env_values = true)]
    pub account_key: Option<String>,

    /// Entra ID credential when no key or SAS is given: managed-identity | cli.
    #[arg(long, env = "RELAY_ENTRA", default_value = "managed-identity")]
    pub entra: EntraSource,

    /// TLS certificate chain (PEM). Without it a self-signed certificate is made at start.
    #[arg(long, env = "RELAY_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key (PEM).
    #[arg(long, env = "RELAY_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Write the certificate's SHA-256 fingerprint here (for --relay-cert-sha256).
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

    /// Tokens file: one token (16-256 visible ASCII characters) per line, optionally
    /// followed by a space and a comma-separated list of containers it may write.
    /// Re-read when it changes; invalid lines are skipped and logged.
    #[arg(long, env = "RELAY_TOKENS")]
    pub tokens: PathBuf,

    /// One budget for block buffers, shared by all transfers.
    #[arg(long, env = "RELAY_MEMORY_BUDGET", default_value = "1GiB", value_parser = size)]
    pub memory_budget: u64,

    /// Block size for Put Block (grown automatically for files over 50,000 blocks).
    #[arg(long, env = "RELAY_BLOCK_SIZE", default_value_t = DEFAULT_BLOCK_SIZE, value_parser = size)]
    pub block_size: u64,

    /// Put Block requests in flight per file.
    #[arg(long, env = "RELAY_BLOCKS_IN_FLIGHT", default_value_t = 4)]
    pub blocks_in_flight: usize,

    /// QUIC receive window per stream.
    #[arg(long, env = "RELAY_STREAM_WINDOW", default_value = "32MiB", value_parser = size)]
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

    /// Most connections (pending or authenticated) from one source address.
    #[arg(long, env = "RELAY_MAX_PER_ADDRESS", default_value_t = 32)]
    pub max_per_address: usize,

    /// Seconds a new connection has to present a valid Offer.
    #[arg(long, env = "RELAY_AUTH_DEADLINE", default_value_t = 10)]
    pub auth_deadline: u64,

    /// Key that signs block IDs and commit seals (64 hex characters), the same on
    /// every relay of a deployment so any relay resumes any transfer. Created
    /// (random, mode 0600) if the file does not exist.
    #[arg(
        long,
        env = "RELAY_ID_KEY_FILE",
        required_unless_present = "id_key_ephemeral"
    )]
    pub id_key_file: Option<PathBuf>,

    /// Use a random key for this process only (tests): staged blocks from before
    /// a restart, or from other relays, are ignored and those uploads restart.
    #[arg(long, env = "RELAY_ID_KEY_EPHEMERAL", conflicts_with = "id_key_file")]
    pub id_key_ephemeral: bool,

    /// Containers no upload may write, whatever a token grants: where the
    /// deployment keeps the relay's binary, keys and tokens.
    #[arg(
        long,
        env = "RELAY_RESERVED_CONTAINERS",
        value_delimiter = ',',
        default_value = "relay-boot,bench-boot,relay-artifacts"
    )]
    pub reserved_containers: Vec<String>,

    /// Largest block a client may ask for (bounds one transfer's memory).
    #[arg(long, env = "RELAY_MAX_BLOCK_SIZE", default_value = "128MiB", value_parser = size)]
    pub max_block_size: u64,

    /// Share of --memory-budget one token's transfers may hold at once (percent).
    #[arg(long, env = "RELAY_TOKEN_SHARE", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub token_share: u64,

    /// Seconds a transfer waits for block memory before it is refused as busy
    /// (retryable; staged blocks are kept).
    #[arg(long, env = "RELAY_BUDGET_WAIT", default_value_t = 30)]
    pub budget_wait: u64,

    /// Upper bound for the relay's memory (the bound in docs/SECURITY.md); the
    /// relay refuses to start if its configuration could exceed it. Default: 90 %
    /// of the machine's memory.
    #[arg(long, env = "RELAY_MEMORY_LIMIT", value_parser = size)]
    pub memory_limit: Option<u64>,

    /// On SIGTERM, how long in-flight transfers may continue (seconds).
    #[arg(long, env = "RELAY_SHUTDOWN_GRACE", default_value_t = 30)]
    pub shutdown_grace: u64,

    /// HTTP address for /healthz and Prometheus /metrics (off when not given).
    #[arg(long, env = "RELAY_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,

    /// TOML file with any of these flags (`storage_url = "..."`); flags and
    /// RELAY_* variables override it.
    #[arg(long, env = "RELAY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Check the configuration (flags, files, certificate, tokens) and exit.
    #[arg(long)]
    pub check_config: bool,

    /// Log format: text | json.
    #[arg(long, env = "RELAY_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

const EXAMPLES: &str = "Examples:
  # Local Azurite, self-signed certificate, fingerprint written for clients:
  relay-server --listen 127.0.0.1:4433 \\
    --storage-url http://127.0.0.1:10000/devstoreaccount1 \\
    --account-key Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw== \\
    --tokens tokens.txt --cert-fingerprint-file relay.sha256

  # On an Azure VM with a managed identity (Storage Blob Data Contributor):
  relay-server --storage-url https://ACCOUNT.blob.core.windows.net \\
    --tokens /etc/blob-relay/tokens --tls-cert cert.pem --tls-key key.pem

Tokens file:
  s3cr3t-token-for-lab-a   data,scratch
  s3cr3t-token-for-ops     (no list: any container)";

/// Reads a TOML config file into `RELAY_*` environment variables that are not set
/// yet, before the flags are parsed: so flags > environment > file.
pub fn load_config_file(argv: &[std::ffi::OsString]) -> Result<(), String> {
    let mut path = std::env::var_os("RELAY_CONFIG").map(PathBuf::from);
    for (i, a) in argv.iter().enumerate() {
        let a = a.to_string_lossy();
        if let Some(v) = a.strip_prefix("--config=") {
            path = Some(PathBuf::from(v));
        } else if a == "--config" {
            path = argv.get(i + 1).map(PathBuf::from);
        }
    }
    let Some(path) = path else { return Ok(()) };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
    for (key, value) in config_env(&text).map_err(|e| format!("config {}: {e}", path.display()))? {
        if std::env::var_os(&key).is_none() {
            // Single-threaded at this point (before the runtime starts).
            unsafe { std::env::set_var(&key, value) };
        }
    }
    Ok(())
}

/// `storage_url = "x"` → (`RELAY_STORAGE_URL`, `x`); only flags that exist.
pub fn config_env(text: &str) -> Result<Vec<(String, String)>, String> {
    use clap::CommandFactory;
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let cmd = Args::command();
    let known: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
        .collect();
    let mut out = Vec::new();
    for (k, v) in table {
        let key = k.replace('-', "_");
        if !known.contains(&key) || key == "config" {
            return Err(format!("unknown setting {k:?}"));
        }
        let value = match v {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| format!("setting {k:?}: list items must be strings"))
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            other => return Err(format!("setting {k:?}: unsupported value {other:?}")),
        };
        out.push((format!("RELAY_{}", key.to_ascii_uppercase()), value));
    }
    Ok(out)
}

impl Args {
    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_map_to_env() {
        let env = config_env("storage_url = \"https://a.blob.core.windows.net\"\nmemory-budget = \"2GiB\"\nmax_connections = 8\n")
            .expect("valid");
        assert!(env.contains(&(
            "RELAY_STORAGE_URL".into(),
            "https://a.blob.core.windows.net".into()
        )));
        assert!(env.contains(&("RELAY_MEMORY_BUDGET".into(), "2GiB".into())));
        assert!(env.contains(&("RELAY_MAX_CONNECTIONS".into(), "8".into())));
        assert!(config_env("no_such_flag = 1").is_err());
        assert!(config_env("not toml at all = = =").is_err());
    }
}
