//! `relay-client download`'s flags. The connection flags are upload's own
//! (`ConnectionArgs`), and the relay connection is made by the same code
//! (`setup::mode`) from an `UploadArgs` that carries them (`connection`).

use clap::{Args, FromArgMatches};
use std::path::PathBuf;

use crate::commands::args::{OverwriteMode, UploadArgs};
use crate::commands::connection_args::ConnectionArgs;

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

    /// How to reach the relay or storage (as for `upload`).
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Download straight from Blob Storage over HTTPS (no relay): ranged
    /// reads, checked as through the relay (the seal's SHA-256, the
    /// Content-MD5, else storage's MD5 of each range).
    #[arg(long, requires = "storage_url", conflicts_with = "relay_connections")]
    pub direct: bool,

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
    u.connection = a.connection.clone();
    u.direct = a.direct;
    u.quiet = a.quiet;
    // Nothing is compressed on the way back yet: do not announce it.
    u.compress = crate::transfer::compress::Mode::Off;
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
        let c = &u.connection;
        assert_eq!(c.relay.as_deref(), Some("127.0.0.1:4433"));
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert!(c.insecure);
        assert_eq!(c.patience, std::time::Duration::from_secs(90));
        assert_eq!(c.relay_connections, 3);
        assert_eq!(c.max_rate, Some(50.0));
        assert!(!u.direct);
    }
}
