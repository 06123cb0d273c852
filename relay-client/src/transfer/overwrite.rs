//! What to do when the destination exists (`--overwrite[=MODE]`), a policy
//! upload, watch and download share, and the second step it asks of an
//! upload that found a blob in the way (`sync`).

use clap::ValueEnum;

use crate::transfer::sync::SyncRule;

/// What to do when the destination blob exists (`--overwrite[=MODE]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OverwriteMode {
    /// Refuse the file (exit 1); a file identical to the blob the relay sealed is skipped.
    #[value(alias = "false")]
    Never,
    /// Replace the blob.
    #[value(alias = "true")]
    Always,
    /// Skip the file when the relay's verified record says the blob holds exactly
    /// these bytes (size and SHA-256); replace it otherwise.
    #[value(alias = "ifSourceDifferent")]
    IfDifferent,
    /// Skip the file when identical or when the blob was committed after the
    /// source's last modification (the blob's Last-Modified, set by storage);
    /// replace it otherwise. Like AzCopy's ifSourceNewer.
    #[value(alias = "ifSourceNewer")]
    IfNewer,
}

/// The flag as the pure download session takes it (`relay_proto` knows no clap).
impl From<OverwriteMode> for relay_proto::session::download::OverwriteMode {
    fn from(mode: OverwriteMode) -> Self {
        use relay_proto::session::download::OverwriteMode as Pure;
        match mode {
            OverwriteMode::Never => Pure::Never,
            OverwriteMode::Always => Pure::Always,
            OverwriteMode::IfDifferent => Pure::IfDifferent,
            OverwriteMode::IfNewer => Pure::IfNewer,
        }
    }
}

impl OverwriteMode {
    /// `if-different|if-newer`: what to do with a blob in the way that does
    /// not hold this file (none: refuse it, or replace it at once).
    pub fn sync_rule(self) -> Option<SyncRule> {
        match self {
            OverwriteMode::IfDifferent => Some(SyncRule::IfDifferent),
            OverwriteMode::IfNewer => Some(SyncRule::IfNewer),
            OverwriteMode::Never | OverwriteMode::Always => None,
        }
    }
}
