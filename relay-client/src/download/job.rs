//! What every blob of a download run shares: the way to read (the relay's
//! connections, or storage in direct mode), the per-blob options, the
//! destination folder and this machine's index of it.

use std::sync::Arc;
use std::time::Duration;

use crate::index::Index;
use crate::relay::links::RelayLinks;
use crate::transfer::mode::Mode;
use crate::transfer::overwrite::OverwriteMode;
use crate::transfer::send::Options;

use super::direct::DirectReads;
use super::place;
use super::safe_fs::Folder;

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
}

impl Job {
    /// A run's job over `mode`: direct mode's reads from its storage, the
    /// longest name the destination folder takes (`root`: none with
    /// `--dry-run` into a folder not there yet).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mode: Arc<Mode>,
        opts: Options,
        root: Option<Folder>,
        overwrite: OverwriteMode,
        attempts: u32,
        dry_run: bool,
        index: Option<Arc<Index>>,
        patience: Duration,
    ) -> Self {
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
        Self {
            links: mode,
            direct,
            opts,
            root,
            name_max,
            overwrite,
            attempts: attempts.max(1),
            dry_run,
            index,
            patience,
        }
    }

    /// The same job for the blobs of `container` (one source of several).
    pub fn for_container(&self, container: &str) -> Self {
        let mut opts = self.opts.clone();
        opts.container = container.to_string();
        Self {
            links: self.links.clone(),
            direct: self.direct.clone(),
            opts,
            root: self
                .root
                .as_ref()
                .and_then(|r| r.parent_of(&[], false).ok()),
            name_max: self.name_max,
            overwrite: self.overwrite,
            attempts: self.attempts,
            dry_run: self.dry_run,
            index: self.index.clone(),
            patience: self.patience,
        }
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
