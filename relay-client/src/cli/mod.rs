//! The command line, top layer: the commands and their one-line help
//! (`Cli`, `Command`), the profile that joins it (`config_file`), and the
//! flags of `config init` and `bench`. Each other command's flags live with
//! it (`commands::args`, `download_args`, `watch_args`); `main.rs` parses
//! here and hands each command its own. May import any module below it;
//! only `main.rs` and `bench` (which parses upload command lines for its
//! runs) import it.

pub mod config_file;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use relay_proto::size::parse_byte_size;

use crate::commands::args::{UPLOAD_EXAMPLES, UploadArgs};
use crate::commands::watch_args::{WATCH_EXAMPLES, WatchArgs};

/// Uploads files to Azure Blob Storage through a Blob Relay (QUIC), or directly.
#[derive(Debug, Parser)]
#[command(name = "relay-client", version = crate::ui::version::LONG, about)]
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
    #[command(after_long_help = crate::commands::download_args::DOWNLOAD_EXAMPLES)]
    Download(Box<crate::commands::download_args::DownloadArgs>),
    /// List blobs (a container, or a prefix's) through the relay: size,
    /// Last-Modified, the SHA-256 the relay vouches for, name.
    #[command(after_long_help = crate::commands::ls_args::LS_EXAMPLES)]
    Ls(Box<crate::commands::ls_args::LsArgs>),
    /// Sync a local folder to CONTAINER[/PREFIX] or back, both ways: only what
    /// changed is read and moved (this machine's index), and --delete removes
    /// what the source no longer has, last and only when both sides were read whole.
    #[command(after_long_help = crate::commands::sync_args::SYNC_EXAMPLES)]
    Sync(Box<crate::commands::sync_args::SyncArgs>),
    /// Watch directories: upload what is there, then every file that appears or
    /// changes once it is complete (closed and unchanged for --settle), until stopped.
    #[command(after_long_help = WATCH_EXAMPLES)]
    Watch(Box<WatchArgs>),
    /// Compare uploads through the relay with direct uploads (and AzCopy) from
    /// here: generated files, alternating runs, verified, deleted afterwards
    /// unless --keep.
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
    #[arg(long, env = "RELAY_STORAGE_URL", hide_env_values = true)]
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
    /// credentials are given: what compression buys on your own data (with
    /// `--download`, on the way back).
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,

    /// Measure downloads instead: the files are put in storage once through
    /// the relay (untimed), then each run downloads them all through the relay
    /// (with `--from`, also with `--compress off`) and, with storage
    /// credentials, straight from storage (`download --direct`), into a fresh
    /// folder, every file checked by its SHA-256.
    #[arg(long)]
    pub download: bool,

    /// Also run AzCopy (this binary) on the same files, its defaults, each run
    /// verified like the others [default: `azcopy` on PATH, if there is one].
    /// Its SAS is signed from --account-key for one container with only the
    /// permissions of the run (or taken from --azcopy-sas or the
    /// --storage-url), and is never printed.
    #[arg(long, value_name = "PATH", conflicts_with = "no_azcopy")]
    pub azcopy: Option<PathBuf>,

    /// The SAS (query string, without `?`) AzCopy runs with, instead of one
    /// signed from the account key: write to upload, read and list to download.
    #[arg(
        long,
        env = "RELAY_AZCOPY_SAS",
        hide_env_values = true,
        value_name = "SAS"
    )]
    pub azcopy_sas: Option<String>,

    /// Do not run AzCopy, even when it is on PATH.
    #[arg(long)]
    pub no_azcopy: bool,
}
