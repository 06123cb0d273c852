//! `relay-client ls`'s flags: what to list, how (text or `--json`, every
//! blob or `--one-level`), and the connection flags of `download`
//! (`ConnectionArgs`, the same profiles), read with the same listing.

use clap::Args;

use crate::commands::connection_args::ConnectionArgs;
use crate::commands::setup::{DirectFlags, ModeFlags};

#[derive(Debug, Args)]
pub struct LsArgs {
    /// What to list: CONTAINER, CONTAINER/PREFIX (the blob of that name and
    /// every blob under PREFIX/), or a blob URL.
    #[arg(value_name = "CONTAINER[/PREFIX]")]
    pub source: String,

    /// How to reach the relay or storage (as for `download`; listing needs
    /// read access, `CONTAINER:r`).
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// List straight from Blob Storage over HTTPS (no relay). Storage's
    /// listing carries no seal this client can check: no blob is vouched for.
    #[arg(long, requires = "storage_url", conflicts_with = "relay_connections")]
    pub direct: bool,

    /// One JSON object per line on stdout: each blob (its full SHA-256 when
    /// the relay vouches for it), each folder with --one-level, then the total.
    #[arg(long)]
    pub json: bool,

    /// Only the prefix's direct children: blobs, and each folder once
    /// (`name/`, with the blobs and bytes under it). Default: every blob.
    #[arg(long)]
    pub one_level: bool,

    /// Attempts for retryable failures of the listing (lost connection, relay
    /// restart, storage 5xx); each takes the listing up where it stopped.
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,

    /// With --direct: how long a storage request may go without progress
    /// before it is abandoned and sent again.
    #[arg(long, env = "RELAY_STORAGE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = relay_proto::duration::parse_nonzero_duration)]
    pub storage_stall_timeout: std::time::Duration,
}

pub const LS_EXAMPLES: &str = "Examples:
  # Every blob under results/2026 (size, Last-Modified, SHA-256 the relay vouches for, name):
  relay-client ls results/2026 --relay relay.example.net:4433 --token \"$RELAY_TOKEN\"

  # Only what is directly in results/2026 (folders once, with their totals), as JSON lines:
  relay-client ls results/2026 --one-level --json --relay HOST:4433 ...

  # Straight from storage (no blob is vouched for):
  relay-client ls results --direct --storage-url https://ACCOUNT.blob.core.windows.net

The SHA-256 column is the relay's word that the blob holds those bytes: it is
shown only for a blob whose seal (set when the relay committed it) verifies
under the relay's key; `-` for any other (written straight to storage,
changed since, or listed with --direct).

Exit status: 0 when the whole listing was printed (an empty one included); 1
when the listing failed partway (the lines printed stand, no total is
printed); 2 for usage or setup errors (bad flags, relay unreachable, token or
grant refused); 130 when interrupted.";

/// What shapes the connection besides the connection flags: a listing
/// sends no file, so nothing of upload's sizing applies.
pub fn mode_flags(a: &LsArgs) -> ModeFlags {
    ModeFlags {
        direct: a.direct,
        fallback: false,
        compress: crate::transfer::compress::Mode::Off,
        fair: false,
        no_probe_train: true,
        direct_flags: DirectFlags {
            create_container: false,
            dry_run: false,
            quiet: true,
            block_checksum: Default::default(),
            storage_stall_timeout: a.storage_stall_timeout,
            connections: None,
            memory_budget: relay_storage::read::MAX_CHECKED_RANGE,
            block_size: None,
            requests: crate::transfer::direct_sizing::Requests::Ranges,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        l: LsArgs,
    }

    #[test]
    fn ls_takes_downloads_connection_flags() {
        let t = T::try_parse_from([
            "x",
            "c/p",
            "--relay",
            "127.0.0.1:4433",
            "--token",
            "tok",
            "--insecure",
            "--one-level",
            "--json",
        ])
        .expect("parse");
        assert_eq!(t.l.source, "c/p");
        assert!(t.l.one_level && t.l.json && !t.l.direct);
        assert_eq!(t.l.connection.token.as_deref(), Some("tok"));
        assert!(!mode_flags(&t.l).direct);
        // --direct needs a storage URL.
        assert!(T::try_parse_from(["x", "c", "--direct"]).is_err());
        let d = T::try_parse_from([
            "x",
            "c",
            "--direct",
            "--storage-url",
            "https://a.blob.core.windows.net",
        ])
        .expect("parse");
        assert!(mode_flags(&d.l).direct);
    }
}
