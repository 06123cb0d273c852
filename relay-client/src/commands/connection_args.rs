//! The flags that say how to reach the relay (or, with `--direct`, storage):
//! its address, how to sign in, how to trust it, how long to wait for it and
//! how the QUIC connections behave. `upload`, `watch` and `download` take
//! them all (flattened), so each flag means the same in every command and the
//! relay connection is made by one code path (`setup::mode`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use relay_transport::quic::Congestion;

use crate::ui::units::size;

#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Relay address HOST:PORT.
    #[arg(long, env = "RELAY_ADDR", required_unless_present = "direct")]
    pub relay: Option<String>,

    /// Bearer token for the relay (or sign in with --entra instead); to
    /// download, it needs read access (`CONTAINER:r` or `:rw` in the relay's
    /// tokens file).
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

    /// How long to wait for the QUIC handshake.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub connect_timeout: Duration,

    /// How long to wait for a relay that cannot be reached or a connection
    /// that was lost (a VPN reconnecting, a route flap, a lid closed) before
    /// stopping with exit 130 and the command that resumes; meanwhile it is
    /// asked again with capped backoff and the wait is reported. Attempts
    /// spent waiting do not count against --attempts. 0: fail at once.
    /// e.g. 90s, 30m, 2h.
    #[arg(long, default_value = "10m", value_parser = relay_proto::duration::parse_duration, value_name = "DURATION")]
    pub patience: Duration,

    /// A relay that acknowledges nothing for this long is taken as gone: the
    /// connection is closed and a new one tried (files resume on it).
    #[arg(long, default_value = "10s", value_parser = relay_proto::duration::parse_duration, value_name = "DURATION")]
    pub idle_timeout: Duration,

    /// How long to keep asking a relay that is at its connection limit (it says
    /// "busy": later, not no) before giving up with exit 2.
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = relay_proto::duration::parse_duration)]
    pub busy_wait: Duration,

    /// QUIC congestion controller of this end: relay (loss-tolerant, see
    /// docs/TRANSPORT.md) | cubic | bbr | newreno. A download's bytes are
    /// sent, and paced, by the relay's.
    #[arg(long, default_value = "relay")]
    pub congestion: Congestion,

    /// Cap this end's QUIC sending rate, in Mbit/s (like AzCopy's --cap-mbps);
    /// uses the relay congestion controller.
    #[arg(long, alias = "cap-mbps", value_name = "MBIT", value_parser = relay_transport::quic::parse_rate_mbit)]
    pub max_rate: Option<f64>,

    /// Where measured path bandwidth and RTT are kept between runs, so the next
    /// connection to the same relay starts warm [default:
    /// ~/.cache/blob-relay/paths.json].
    #[arg(long, value_name = "FILE", env = "RELAY_PATH_CACHE")]
    pub path_cache: Option<PathBuf>,

    /// Start cold: ignore the path cache's estimate (this run's is still saved).
    #[arg(long)]
    pub no_warm_start: bool,

    /// QUIC send/receive window per stream (one file's bytes in flight: 64 MiB
    /// carries 1 Gbit/s over a 300 ms path).
    #[arg(long, default_value = "64MiB", value_parser = size)]
    pub stream_window: u64,

    /// QUIC send/receive window per connection.
    #[arg(long, default_value = "256MiB", value_parser = size)]
    pub connection_window: u64,

    /// QUIC connections to the relay, each from its own UDP port: files are
    /// spread over them (the least loaded takes the next file), so a load
    /// balancer that spreads flows by address and port, as Azure's does, can
    /// send them to several relays. Each has its own windows and congestion
    /// control: up to N × --connection-window bytes in flight.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64), conflicts_with = "direct")]
    pub relay_connections: u64,

    /// With --direct: blob service URL (a SAS may be in the query).
    #[arg(long, env = "RELAY_STORAGE_URL", hide_env_values = true)]
    pub storage_url: Option<String>,

    /// With --direct: storage account key (a short-lived SAS is signed from it).
    #[arg(long, env = "RELAY_ACCOUNT_KEY", hide_env_values = true)]
    pub account_key: Option<String>,

    /// With --direct: the key that signs this user's block IDs and commit seals
    /// (64 hex characters; created if missing). Direct mode resumes, and
    /// recognises as already uploaded, only what this key signed; a download
    /// checks a blob it sealed by its SHA-256. Default:
    /// $XDG_STATE_HOME/blob-relay/direct-id.key (~/.local/state/...).
    #[arg(long, env = "RELAY_ID_KEY_FILE")]
    pub id_key_file: Option<PathBuf>,
}
