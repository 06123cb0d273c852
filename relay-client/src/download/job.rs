//! What every blob of a download run shares: the way to read (the relay's
//! connections, or storage in direct mode), the per-blob options, the
//! destination folder and this machine's index of it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use relay_proto::protocol::Overwrite;

use crate::index::Index;
use crate::relay::links::RelayLinks;
use crate::sign_in::Bearer;
use crate::transfer::mode::Mode;
use crate::transfer::overwrite::OverwriteMode;
use crate::transfer::send::Options;
use crate::ui::progress::Reporter;

use super::direct::DirectReads;
use super::folder_sync::FolderSyncs;
use super::place;
use super::safe_fs::{Folder, FsError};

/// What every file of a run shares.
pub struct Job {
    pub links: Arc<Mode>,
    /// `--direct`: storage reads instead of the relay.
    pub direct: Option<Arc<DirectReads>>,
    pub opts: Options,
    pub root: Option<Folder>,
    pub name_max: usize,
    pub overwrite: OverwriteMode,
    pub attempts: u32,
    pub dry_run: bool,
    /// What this machine placed in the destination folder.
    pub index: Option<Arc<Index>>,
    /// How long a file waits for another writer of its partial file that
    /// makes no progress.
    pub patience: Duration,
    /// The folder fsyncs the run's files share (`folder_sync`).
    pub folder_syncs: Arc<FolderSyncs>,
}

/// A run's job as the download's flags give it (`commands::download_args`),
/// before its way to read is set up.
pub struct JobPlan {
    /// The first source's container.
    pub container: String,
    /// `--compress`: asked for in each Fetch where the handshake agreed.
    pub compress: crate::transfer::compress::Mode,
    /// `--to`.
    pub to: PathBuf,
    pub umask: Option<u32>,
    pub dry_run: bool,
    /// `--index`, and `--no-index`.
    pub index: Option<PathBuf>,
    pub no_index: bool,
    pub overwrite: OverwriteMode,
    pub attempts: u32,
    pub patience: Duration,
}

impl Job {
    /// A run's job over `mode`, reading with `token`: the destination folder
    /// (not made with `--dry-run`), the longest name it takes, this
    /// machine's index of it, and direct mode's reads from its storage.
    pub fn open(
        plan: JobPlan,
        mode: Arc<Mode>,
        token: Bearer,
        reporter: &Reporter,
    ) -> Result<Self, FsError> {
        let opts = options(token, plan.container, plan.compress);
        let root = if plan.dry_run && !plan.to.is_dir() {
            None
        } else {
            Some(Folder::root(&plan.to, plan.umask)?)
        };
        // This machine's index of the destination folder (`--index`, else one
        // per folder under $XDG_STATE_HOME); without one (`--no-index`, or it
        // cannot be opened: said once) a rerun cannot compare a file whose
        // blob carries no checksum.
        let file = (!plan.dry_run && !plan.no_index)
            .then(|| {
                plan.index.clone().or_else(|| {
                    let dir = std::fs::canonicalize(&plan.to).unwrap_or_else(|_| plan.to.clone());
                    Index::default_file("download", &dir)
                })
            })
            .flatten();
        let index = file.and_then(|file| match Index::open(&file) {
            Ok(i) => Some(Arc::new(i)),
            Err(e) => {
                reporter.notice(&format!(
                    "relay-client: {e}; going on without it (a rerun cannot compare files whose blob has no checksum)"
                ));
                None
            }
        });
        let direct = match mode.as_ref() {
            Mode::Direct(d) => Some(Arc::new(DirectReads {
                storage: d.storage.clone(),
                id_key: d.id_key.clone(),
                ranges_in_flight: d.connections,
                budget: d.budget.clone(),
            })),
            Mode::Relay(_) => None,
        };
        let name_max = root.as_ref().map_or(place::NAME_MAX, Folder::name_max);
        Ok(Self {
            links: mode,
            direct,
            opts,
            root,
            name_max,
            overwrite: plan.overwrite,
            attempts: plan.attempts.max(1),
            dry_run: plan.dry_run,
            index,
            patience: plan.patience,
            folder_syncs: Default::default(),
        })
    }

    /// The relay's connections (none in direct mode).
    pub fn relay(&self) -> Option<&RelayLinks> {
        match self.links.as_ref() {
            Mode::Relay(l) => Some(l),
            Mode::Direct(_) => None,
        }
    }

    /// The destination folder's path (empty with none).
    pub fn root_path(&self) -> std::path::PathBuf {
        self.root
            .as_ref()
            .map(|r| r.path().to_path_buf())
            .unwrap_or_default()
    }
}

/// What each Fetch carries: the token, and `--compress` (asked for where the
/// handshake agreed); the rest is upload's and unused here.
fn options(token: Bearer, container: String, compress: crate::transfer::compress::Mode) -> Options {
    Options {
        token,
        container,
        overwrite: Overwrite::Never,
        block_size: None,
        content_type: None,
        metadata: Default::default(),
        put_md5: false,
        compress,
        order: Default::default(),
    }
}
