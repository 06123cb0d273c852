//! `relay-client download`'s flags, and the plan the run takes from them
//! once (`DownloadPlan`). The connection flags are upload's own
//! (`ConnectionArgs`), and the relay connection is made by the same code
//! (`setup::mode`), with what else shapes it (`mode_flags`).

use clap::Args;
use std::path::PathBuf;

use relay_proto::logsafe::hide_sas_signatures;

use crate::commands::args::OverwriteMode;
use crate::commands::connection_args::ConnectionArgs;
use crate::commands::output_args::OutputArgs;
use crate::commands::setup::{DirectFlags, ModeFlags, SetupError};
use crate::download::job::JobPlan;
use crate::transfer::destination::{Destination, parse_destination};
use crate::transfer::filter::Filter;

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

    /// --json, --json-lines, --status-interval, --quiet (shared by every
    /// command that moves files).
    #[command(flatten)]
    pub output: OutputArgs,

    /// Attempts per file for retryable failures (lost connection, relay
    /// restart, storage 5xx, bytes that fail their check); each resumes from
    /// what is on disk.
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// The mask for the files and folders the download makes, in octal
    /// (077: private to you; 002: writable by your group) [default: the
    /// process's umask, as cp and rclone]. Partial files are always private.
    #[arg(long, value_name = "OCTAL", value_parser = parse_umask)]
    pub umask: Option<u32>,

    /// This machine's index of what it placed in DIR (SQLite), with which a
    /// rerun compares a file whose blob carries no checksum [default:
    /// $XDG_STATE_HOME/blob-relay/download-index-HASH.sqlite, one per DIR].
    /// Safe to delete.
    #[arg(long, value_name = "FILE")]
    pub index: Option<PathBuf>,

    /// Keep no index: a rerun cannot compare a file whose blob carries no
    /// SHA-256 or MD5 (it is refused as `exists` without --overwrite).
    #[arg(long, conflicts_with = "index")]
    pub no_index: bool,

    /// Compressed on the wire: auto (the relay compresses each 1 MiB chunk
    /// that shrinks, at a zstd level the link leaves time for; already
    /// compressed data goes as it is), zstd (every chunk that shrinks, level
    /// 3), off. Used only with a relay that announces it; the file always
    /// holds the blob's own bytes.
    #[arg(long, value_enum, default_value_t = crate::transfer::compress::Mode::Auto)]
    pub compress: crate::transfer::compress::Mode,

    /// With --direct: how long a storage read may go without progress before
    /// it is abandoned and sent again: no answer this long after it was sent,
    /// or no byte more of its answer for this long. A slow read that keeps
    /// moving is never abandoned. (Through a relay, the relay's own
    /// --storage-stall-timeout applies.)
    #[arg(long, env = "RELAY_STORAGE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_stall_timeout: std::time::Duration,

    /// With --direct: ranges (of 4 MiB) read at once per file [default: from
    /// the measured round trip to storage, storage's TCP taken as loss-based:
    /// 8 near storage (< 20 ms), 16 up to 60 ms, 32 beyond].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024), requires = "direct")]
    pub connections: Option<u64>,

    /// With --direct: memory for ranges read and not yet written, all files
    /// together (each range takes its 4 MiB before it is asked for).
    #[arg(long, default_value = "512MiB", value_parser = range_budget, requires = "direct")]
    pub memory_budget: u64,
}

/// `--umask`: an octal mask of permission bits (`022`, `0077`).
fn parse_umask(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?}: an octal mask from 000 to 777, e.g. 022 or 077"))
}

/// `--memory-budget`: a size that holds at least one range.
fn range_budget(text: &str) -> Result<u64, String> {
    let bytes = crate::ui::units::size(text).map_err(|e| e.to_string())?;
    if bytes < relay_storage::read::MAX_CHECKED_RANGE {
        return Err("must hold one 4 MiB range".into());
    }
    Ok(bytes)
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

Each file is written to a private partial file (DIR/.../.relay-HEX.relay-partial,
one writer at a time) and renamed into place only after its bytes are verified:
a blob the relay sealed on upload by its SHA-256, another by its Content-MD5,
else by storage's checksum of every range read (the report's `check` says
which); never over a file that appeared meanwhile. A rerun skips files it can
tell are identical (`compared`: sha256, md5, or this machine's index of what it
placed). Blob names that would leave DIR (`..`, a leading `/`, backslashes,
control characters, empty segments) are refused per file, and no symbolic link
inside DIR is followed.

Exit status: 0 when every file was downloaded and verified or skipped; 1 when
any file failed; 2 for usage or setup errors (bad flags, relay unreachable,
token or grant refused); 130 when interrupted (Ctrl-C, or the relay unreachable
for longer than --patience; the message says how to resume).";

/// The sources as given: `CONTAINER[/PREFIX]` or blob URLs (percent-decoded,
/// `transfer::destination`). One that names nothing is a usage error (exit 2),
/// quoted without its SAS signature.
pub fn sources(given: &[String]) -> Result<Vec<Destination>, SetupError> {
    given
        .iter()
        .map(|s| {
            parse_destination(s).map_err(|e| {
                SetupError::Refused(format!("source {:?}: {e}", hide_sas_signatures(s)))
            })
        })
        .collect()
}

/// With `--direct`, every source given as a blob URL must be of
/// `--storage-url`'s account, not only the first: each is read with that
/// account's credentials.
pub fn same_account(
    a: &DownloadArgs,
    given: &[String],
    sources: &[Destination],
) -> Result<(), SetupError> {
    for (text, dest) in given.iter().zip(sources) {
        let what = format!("source {:?}", hide_sas_signatures(text));
        crate::commands::setup::same_account(&a.connection, a.direct, dest, &what)?;
    }
    Ok(())
}

/// What shapes the connection besides the connection flags: ranged reads in
/// direct mode, `--compress` announced in the handshake (then asked for in
/// each Fetch); the rest as an upload without those flags has them.
pub fn mode_flags(a: &DownloadArgs) -> ModeFlags {
    ModeFlags {
        direct: a.direct,
        fallback: false,
        compress: a.compress,
        fair: false,
        no_probe_train: false,
        direct_flags: DirectFlags {
            create_container: false,
            dry_run: false,
            quiet: a.output.quiet,
            block_checksum: Default::default(),
            storage_stall_timeout: a.storage_stall_timeout,
            connections: a.connections,
            memory_budget: a.memory_budget,
            block_size: None,
            requests: crate::transfer::direct_sizing::Requests::Ranges,
        },
    }
}

/// A download as the run takes it, from its arguments checked once: the
/// sources, the filter, how to connect, what every blob shares (`JobPlan`)
/// and how many at once.
pub struct DownloadPlan {
    /// The sources as given, for their report lines.
    pub given: Vec<String>,
    pub sources: Vec<Destination>,
    pub filter: Filter,
    pub connection: ConnectionArgs,
    pub flags: ModeFlags,
    pub job: JobPlan,
    pub parallel: usize,
    pub status_interval: std::time::Duration,
}

impl DownloadPlan {
    /// The plan of `args`, or the first setup error they hold.
    pub fn new(args: DownloadArgs) -> Result<Self, SetupError> {
        let sources = sources(&args.sources)?;
        let filter = Filter::new(&args.include, &args.exclude)?;
        same_account(&args, &args.sources, &sources)?;
        let job = JobPlan {
            container: sources[0].container.clone(),
            compress: args.compress,
            to: args.to.clone(),
            umask: args.umask,
            dry_run: args.dry_run,
            index: args.index.clone(),
            no_index: args.no_index,
            overwrite: args.overwrite,
            attempts: args.attempts,
            patience: args.connection.patience,
        };
        // Direct mode: at most 16 files at once, their ranges held within
        // --memory-budget (`direct::Ranges`).
        let parallel = if args.direct {
            args.parallel.clamp(1, 16)
        } else {
            args.parallel
        };
        Ok(Self {
            flags: mode_flags(&args),
            given: args.sources,
            sources,
            filter,
            connection: args.connection,
            job,
            parallel,
            status_interval: args.output.status_interval,
        })
    }
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
    fn every_sources_account_is_checked_in_direct_mode() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "x",
                "--to",
                "out",
                "--relay",
                "h:1",
                "--storage-url",
                "https://acct.blob.core.windows.net",
            ];
            argv.extend_from_slice(extra);
            T::try_parse_from(argv).expect("parse").d
        };
        let check = |d: &DownloadArgs| {
            let srcs = sources(&d.sources)?;
            same_account(d, &d.sources, &srcs)
        };
        let ours = "https://acct.blob.core.windows.net/c1x/a";
        let theirs = "https://other.blob.core.windows.net/c1x/b";
        let d = parse(&[ours, "c1x/p", theirs, "--direct"]);
        let e = check(&d).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            e,
            format!("source {theirs:?} names account \"other\" but --storage-url is account acct")
        );
        assert!(check(&parse(&[ours, "c1x/p", "--direct"])).is_ok());
        // Through the relay the relay's own account is read: nothing to compare.
        assert!(check(&parse(&[ours, theirs])).is_ok());
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
            "--storage-stall-timeout",
            "2s",
        ])
        .expect("parse");
        let u = mode_flags(&t.d);
        let c = &t.d.connection;
        assert_eq!(c.relay.as_deref(), Some("127.0.0.1:4433"));
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert!(c.insecure);
        assert_eq!(c.patience, std::time::Duration::from_secs(90));
        assert_eq!(c.relay_connections, 3);
        assert_eq!(c.max_rate, Some(50.0));
        assert!(!u.direct);
        assert_eq!(
            u.direct_flags.storage_stall_timeout,
            std::time::Duration::from_secs(2)
        );
    }

    /// `--compress` reaches the connection's setup (which announces it in
    /// the handshake only when it is not `off`), `auto` unless given.
    #[test]
    fn compress_is_upload_s_flag_and_reaches_the_setup() {
        use crate::transfer::compress::Mode;
        for (given, want) in [
            (None, Mode::Auto),
            (Some("zstd"), Mode::Zstd),
            (Some("off"), Mode::Off),
        ] {
            let mut argv = vec!["x", "c/p", "--to", "out", "--relay", "h:1"];
            if let Some(g) = given {
                argv.extend(["--compress", g]);
            }
            let t = T::try_parse_from(argv).expect("parse");
            assert_eq!(t.d.compress, want, "{given:?}");
            assert_eq!(mode_flags(&t.d).compress, want);
        }
        assert!(T::try_parse_from(["x", "c", "--to", "o", "--compress", "gzip"]).is_err());
    }
}
