//! `relay-client watch`'s flags: every `upload` flag, and how to watch.

use std::path::PathBuf;

use clap::Args;

use crate::commands::args::UploadArgs;

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
    /// temporary names *.part, ~*, .*.swp, *.tmp, .~lock.*, and a download's
    /// .*.relay-partial and .*.relay-partial.json.
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

pub const WATCH_EXAMPLES: &str = "Examples:
  # Upload what appears in /data/runs, replacing blobs whose file changed:
  relay-client watch /data/runs --relay relay.example.net:4433 --to lab/runs \\
      --relay-cert-sha256 AB:CD:... --overwrite=if-different

  # Move each file away once its blob is committed and verified:
  relay-client watch /srv/scans --relay HOST:4433 --to scans --after-upload move /srv/scans-done

Exit status: 0 after a clean stop (SIGTERM or Ctrl-C: commits under way are
finished first); 2 for usage or setup errors; 3 when the relay or storage refused
what every file needs (a revoked token, a deleted container) while watching.";
