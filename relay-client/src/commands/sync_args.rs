//! `relay-client sync`'s flags, which way a sync goes (`Way`: which of
//! SOURCE and DEST is the local folder), and the plan the run takes from
//! them once (`SyncPlan`). The connection flags are upload's own
//! (`ConnectionArgs`).

use std::path::{Path, PathBuf};

use clap::Args;
use relay_proto::logsafe::hide_sas_signatures;
use relay_proto::sync::delete::{DEFAULT_MAX_DELETE, DeleteRules, MaxDelete};
use relay_proto::sync::plan::CompareFlags;

use crate::commands::connection_args::ConnectionArgs;
use crate::commands::output_args::OutputArgs;
use crate::commands::setup::{DirectFlags, ModeFlags, SetupError};
use crate::transfer::destination::{Destination, parse_destination};
use crate::transfer::direct_sizing::Requests;
use crate::transfer::filter::Filter;

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// What to sync from: a local folder, or CONTAINER[/PREFIX] (or a blob
    /// URL https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX).
    #[arg(value_name = "SOURCE")]
    pub source: String,

    /// What to sync to: CONTAINER[/PREFIX] (or a blob URL), or a local
    /// folder (created if missing). Exactly one side is local; write a local
    /// folder whose name could be a container as ./NAME.
    #[arg(value_name = "DEST")]
    pub dest: String,

    /// How to reach the relay or storage (as for `upload`).
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Straight to (or from) Blob Storage over HTTPS, no relay.
    #[arg(long, requires = "storage_url", conflicts_with = "relay_connections")]
    pub direct: bool,

    /// Most files in flight at once.
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,

    /// Read and hash every file present on both sides, whatever the index
    /// says (the paranoid run; rclone's --checksum).
    #[arg(long)]
    pub checksum: bool,

    /// Show what would be sent, fetched, compared and deleted, moving and
    /// deleting nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Downloading: replace a local file that changed since this machine
    /// placed it (without it, such a file is a conflict and is kept).
    #[arg(long)]
    pub overwrite: bool,

    /// This machine's index of what it sent or placed (SQLite), one per
    /// destination [default: $XDG_STATE_HOME/blob-relay/sync-index-HASH.sqlite
    /// for a folder downloaded to, sync-upload-index-HASH.sqlite for a prefix
    /// uploaded to]. Safe to delete: the next run only reads more.
    #[arg(long, value_name = "FILE")]
    pub index: Option<PathBuf>,

    /// Remove what is on DEST and not on SOURCE: last, and only when both
    /// sides were read whole and within --max-delete.
    #[arg(long)]
    pub delete: bool,

    /// With --delete: the most deletes a run makes, as a number or a
    /// percentage of DEST's entries (5%); a run over it deletes nothing.
    #[arg(long, value_name = "N|N%", default_value = "1000")]
    pub max_delete: MaxDelete,

    /// With --delete, downloading: also delete local files this machine did
    /// not place (or that changed since it placed them).
    #[arg(long, requires = "delete")]
    pub delete_unknown: bool,

    /// Sync only files whose name below SOURCE/DEST matches GLOB (repeatable;
    /// applied to both sides).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,

    /// Leave out names matching GLOB on both sides (repeatable; wins over
    /// --include). An excluded name is never deleted.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// --json, --json-lines, --status-interval, --quiet (shared by every
    /// command that moves files).
    #[command(flatten)]
    pub output: OutputArgs,

    /// Attempts per file for retryable failures.
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// Compressed on the wire: auto | zstd | off (as for `upload`/`download`).
    #[arg(long, value_enum, default_value_t = crate::transfer::compress::Mode::Auto)]
    pub compress: crate::transfer::compress::Mode,

    /// With --direct: how long a storage request may go without progress.
    #[arg(long, env = "RELAY_STORAGE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_stall_timeout: std::time::Duration,

    /// With --direct: requests in flight per file [default: from the
    /// measured round trip to storage].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024), requires = "direct")]
    pub connections: Option<u64>,

    /// With --direct: memory for blocks or ranges in flight, all files together.
    #[arg(long, default_value = "512MiB", value_parser = crate::ui::units::size, requires = "direct")]
    pub memory_budget: u64,
}

pub const SYNC_EXAMPLES: &str = "Examples:
  # Push a folder every night; a re-run reads and sends only what changed:
  relay-client sync runs/ lab/runs --relay relay.example.net:4433 --token \"$RELAY_TOKEN\" ...

  # Pull results back; a local file edited since it was placed is a conflict:
  relay-client sync results/2026 ./results --relay HOST:4433 ...

  # See what a mirror with deletes would do, then do it:
  relay-client sync runs/ lab/runs --delete --dry-run --relay HOST:4433 ...
  relay-client sync runs/ lab/runs --delete --max-delete 5% --relay HOST:4433 ...

A file whose size, modification time, inode and change time match what this
machine last moved (its index) is neither read nor offered. Exit status: 0 when
everything was synced; 1 when a file failed, a conflict remains, part of a side
could not be read, or --delete was refused; 2 for usage or setup errors; 130
when interrupted (the same command resumes).";

/// Which way a sync goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Way {
    /// A local folder to blobs.
    Upload { folder: PathBuf, dest: Destination },
    /// Blobs to a local folder.
    Download {
        source: Destination,
        folder: PathBuf,
    },
}

/// What one argument can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Written as a path (`/x`, `./x`, `../x`, `.`, `~/x`).
    Local,
    /// A blob URL.
    Remote,
    /// A bare name: a container (prefix), or a folder that exists.
    Either { exists: bool },
}

fn kind(arg: &str, exists: &impl Fn(&str) -> bool) -> Kind {
    if arg.contains("://") {
        Kind::Remote
    } else if arg == "."
        || arg == ".."
        || ["/", "./", "../", "~/"].iter().any(|p| arg.starts_with(p))
    {
        Kind::Local
    } else {
        Kind::Either {
            exists: exists(arg),
        }
    }
}

/// The way `source` → `dest` goes, `exists` saying whether a path is on
/// disk; a pair where it is not clear which side is local is refused.
pub fn way(source: &str, dest: &str, exists: impl Fn(&str) -> bool) -> Result<Way, SetupError> {
    use Kind::*;
    let upload = match (kind(source, &exists), kind(dest, &exists)) {
        (Local, Local) => {
            return Err(refused(
                "both SOURCE and DEST are local paths; one must be CONTAINER[/PREFIX]",
            ));
        }
        (Remote, Remote) => {
            return Err(refused(
                "both SOURCE and DEST are blob URLs; one must be a local folder",
            ));
        }
        (Local, _) | (Either { exists: true }, Remote) => true,
        (_, Local) | (Remote, Either { exists: true }) => false,
        (Either { exists: true }, Either { exists: false }) => true,
        (Either { exists: false }, Either { exists: true }) => false,
        (Remote, Either { exists: false }) => false,
        (Either { exists: false }, Remote) => {
            return Err(refused(&format!(
                "SOURCE {source:?} is not a local folder here (write a local path as ./NAME or /path)"
            )));
        }
        (Either { .. }, Either { .. }) => {
            return Err(refused(&format!(
                "cannot tell which of {source:?} and {dest:?} is the local folder: write it as ./NAME (or an absolute path)"
            )));
        }
    };
    let remote = |text: &str, what: &str| {
        parse_destination(text).map_err(|e| {
            SetupError::Refused(format!("{what} {:?}: {e}", hide_sas_signatures(text)))
        })
    };
    Ok(if upload {
        Way::Upload {
            folder: PathBuf::from(source),
            dest: remote(dest, "DEST")?,
        }
    } else {
        Way::Download {
            source: remote(source, "SOURCE")?,
            folder: PathBuf::from(dest),
        }
    })
}

fn refused(why: &str) -> SetupError {
    SetupError::Refused(format!("sync: {why}"))
}

/// A sync as the run takes it, from its arguments checked once.
pub struct SyncPlan {
    pub way: Way,
    pub filter: Filter,
    pub flags: CompareFlags,
    pub rules: DeleteRules,
    pub mode_flags: ModeFlags,
    pub args: SyncArgs,
}

impl SyncPlan {
    pub fn new(args: SyncArgs) -> Result<Self, SetupError> {
        let way = way(&args.source, &args.dest, |p| Path::new(p).exists())?;
        let (container_side, what) = match &way {
            Way::Upload { folder, dest } => {
                if !folder.is_dir() {
                    return Err(refused(&format!("{}: not a folder", folder.display())));
                }
                (dest, "DEST")
            }
            Way::Download { source, .. } => (source, "SOURCE"),
        };
        crate::commands::setup::same_account(&args.connection, args.direct, container_side, what)?;
        let filter = Filter::new(&args.include, &args.exclude)?;
        let requests = match way {
            Way::Upload { .. } => Requests::Blocks,
            Way::Download { .. } => Requests::Ranges,
        };
        let max = if args.delete {
            args.max_delete
        } else {
            DEFAULT_MAX_DELETE
        };
        Ok(Self {
            flags: CompareFlags {
                checksum: args.checksum,
                overwrite: args.overwrite,
            },
            rules: DeleteRules {
                delete: args.delete,
                max,
                delete_unknown: args.delete_unknown,
            },
            mode_flags: mode_flags(&args, requests),
            way,
            filter,
            args,
        })
    }
}

fn mode_flags(a: &SyncArgs, requests: Requests) -> ModeFlags {
    ModeFlags {
        direct: a.direct,
        fallback: false,
        compress: a.compress,
        fair: false,
        no_probe_train: false,
        direct_flags: DirectFlags {
            create_container: false,
            dry_run: a.dry_run,
            quiet: a.output.quiet,
            block_checksum: Default::default(),
            storage_stall_timeout: a.storage_stall_timeout,
            connections: a.connections,
            memory_budget: a.memory_budget,
            block_size: None,
            requests,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str, d: &str, on_disk: &[&str]) -> Result<Way, String> {
        way(s, d, |p| on_disk.contains(&p)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_local_side_decides_the_way_and_an_unclear_pair_is_refused() {
        let up = |f: &str, c: &str, p: &str| {
            Ok(Way::Upload {
                folder: f.into(),
                dest: Destination {
                    account: None,
                    container: c.into(),
                    prefix: p.into(),
                },
            })
        };
        let down = |c: &str, p: &str, f: &str| {
            Ok(Way::Download {
                source: Destination {
                    account: None,
                    container: c.into(),
                    prefix: p.into(),
                },
                folder: f.into(),
            })
        };
        assert_eq!(w("./runs", "lab/runs", &[]), up("./runs", "lab", "runs"));
        assert_eq!(w("runs", "lab/runs", &["runs"]), up("runs", "lab", "runs"));
        assert_eq!(
            w("lab/runs", "/tmp/out", &[]),
            down("lab", "runs", "/tmp/out")
        );
        assert_eq!(w("lab/runs", "out", &[]), Err(
            "sync: cannot tell which of \"lab/runs\" and \"out\" is the local folder: write it as ./NAME (or an absolute path)".into()
        ));
        assert_eq!(
            w("lab", "out", &["lab", "out"]).map(|_| ()),
            w("lab", "out", &[]).map(|_| ())
        );
        assert!(w("./a", "./b", &[]).is_err());
        assert!(
            w(
                "https://a.blob.core.windows.net/c/p",
                "https://a.blob.core.windows.net/c/q",
                &[]
            )
            .is_err()
        );
        assert!(w("./a", "NOT_A_CONTAINER", &[]).is_err());
        assert_eq!(
            w("https://acct.blob.core.windows.net/lab/r", "out", &[]).map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn max_delete_takes_a_count_or_a_percentage() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct T {
            #[command(flatten)]
            s: SyncArgs,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["x", "./a", "c/p", "--relay", "h:1"];
            argv.extend_from_slice(extra);
            T::try_parse_from(argv).map(|t| t.s)
        };
        assert_eq!(
            parse(&[]).map(|s| s.max_delete).ok(),
            Some(MaxDelete::Count(1000))
        );
        let pct = parse(&["--delete", "--max-delete", "5%"]).map(|s| s.max_delete);
        assert_eq!(pct.ok(), Some(MaxDelete::Percent(5)));
        assert!(parse(&["--max-delete", "101%"]).is_err());
        assert!(parse(&["--delete-unknown"]).is_err(), "needs --delete");
    }
}
