//! Deletes, last: after the merge has ended and every transfer is done, the
//! delete set's verdict (`relay_proto::sync::delete::verdict`: asked for,
//! both sides read whole, within `--max-delete`), then either `--dry-run`'s
//! account of it or the one call that carries the batch out.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use relay_proto::protocol::Listed;
use relay_proto::sync::delete::{DeleteRules, SpillStore, Withheld};
use relay_proto::sync::delete_set::{DeleteSet, Deletes};

use super::delete::{
    DeleteError, DeleteEvent, DeleteSink, DeleteSummary, Executor, LazySpill, LocalDeleter,
    Outcome, PlacedRecords, RemoteDeleteError, RemoteDeleter, RemoteOutcome, carry_out_batch,
};
use super::planner::Planned;
use crate::download::job::Job;
use crate::index::{FileStat, Index, IndexError};
use crate::transfer::delete::{DeleteOutcome, delete_listed};
use crate::transfer::file::{blank, failed};
use crate::transfer::mode::Mode;
use crate::transfer::send::Options;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, Status, SyncReport};

/// Candidates kept in memory before the set spills (with a count limit it
/// never holds more than the limit: past it the batch is refused anyway).
pub const DELETES_IN_MEMORY: usize = 1000;

/// Where the spilled candidates go: a SQLite file beside the index, made
/// only if the set spills (with a percentage limit a batch is only known
/// once the listing ended, so every candidate is kept until then).
pub type Spill = LazySpill;

/// The run's empty delete set; it spills beside `index` (or, without one,
/// in the temporary folder).
pub fn delete_set(rules: DeleteRules, index: Option<&Index>) -> DeleteSet<Spill> {
    let folder = index
        .and_then(|i| i.file().parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    DeleteSet::new(rules, DELETES_IN_MEMORY, LazySpill::new(folder))
}

/// What a batch is carried out on: everything a delete needs, still open
/// (the run's connection is closed only after the deletes).
pub enum DeleteTarget {
    /// Blobs of `opts.container` named `below` + the candidate's name, each
    /// deleted only if still the listed version (`If-Match` its ETag), over
    /// the run's connection (`mode`) with the run's token (`opts.token`).
    Remote {
        mode: Arc<Mode>,
        opts: Options,
        /// `prefix/`, or empty.
        below: String,
        /// `--attempts` for each delete's retryable failures.
        attempts: u32,
    },
    /// Files below the download job's folder (`job.root`: inside it only,
    /// never through a symbolic link); `job.index` loses each deleted
    /// file's row.
    Local { job: Arc<Job> },
}

/// The verdict on the run's delete set, and what came of it, into `report`;
/// whether the run may still end well.
pub async fn conclude<S: SpillStore>(
    planned: Planned<S>,
    dry_run: bool,
    reporter: &Reporter,
    report: &mut SyncReport,
    target: &DeleteTarget,
) -> bool {
    let counts = planned.deletes.counts();
    report.planned_deletes = counts.planned;
    report.kept_unknown = counts.kept;
    report.source_complete = planned.completion.source;
    report.dest_complete = planned.completion.dest;
    let verdict = planned
        .deletes
        .finish(planned.completion, planned.tally.dest_entries);
    let say = |line: String| reporter.note(&format!("relay-client: {line}"));
    match verdict {
        Err(Withheld::NotAsked) => {
            say(format!(
                "{} name(s) on the destination are not on the source; --delete would remove them",
                counts.planned
            ));
            report.deletes_withheld = Some(Withheld::NotAsked.to_string());
            true
        }
        Err(w) => {
            say(format!("deletes: {w}"));
            report.deletes_withheld = Some(w.to_string());
            false
        }
        Ok(_) if counts.planned == 0 => true,
        Ok(_) if dry_run => {
            say(format!(
                "deletes: {} would be made (both sides read whole, within --max-delete)",
                counts.planned
            ));
            true
        }
        Ok(batch) => {
            // Each delete is a line of its own: the status line counts them.
            let mut found = reporter.progress().found;
            found.files += counts.planned;
            reporter.set_found(found);
            match carry_out(batch, target, reporter).await {
                Ok(done) => {
                    report.deleted = done.deleted;
                    done.failed == 0
                }
                Err(e) => {
                    say(format!("deletes: {e}"));
                    report.deletes_withheld = Some(e.to_string());
                    if let DeleteError::Refused { summary, .. }
                    | DeleteError::Spill { summary, .. } = e
                    {
                        report.deleted = summary.deleted;
                    }
                    false
                }
            }
        }
    }
}

/// The batch the verdict let go ahead, carried out on the destination:
/// each outcome a report line.
async fn carry_out<S: SpillStore>(
    batch: Deletes<S>,
    target: &DeleteTarget,
    reporter: &Reporter,
) -> Result<DeleteSummary, DeleteError> {
    match target {
        DeleteTarget::Remote {
            mode,
            opts,
            below,
            attempts,
        } => {
            let mut sink = Lines {
                reporter,
                container: opts.container.clone(),
                below: below.clone(),
                local: false,
            };
            let deleter = Arc::new(ListedBlobs {
                mode: mode.clone(),
                opts: opts.clone(),
                below: below.clone(),
                attempts: *attempts,
            });
            carry_out_batch(batch, Executor::Remote(deleter), false, &mut sink).await
        }
        DeleteTarget::Local { job } => {
            let mut sink = Lines {
                reporter,
                container: job.opts.container.clone(),
                below: String::new(),
                local: true,
            };
            let records: &(dyn PlacedRecords + Sync) = match job.index.as_deref() {
                Some(index) => index,
                None => &NoRecords,
            };
            let root: PathBuf = job.root_path();
            let deleter = LocalDeleter::open(&root, records).map_err(|e| DeleteError::Refused {
                reason: e.to_string(),
                summary: DeleteSummary::default(),
            })?;
            carry_out_batch(batch, Executor::Local(&deleter), false, &mut sink).await
        }
    }
}

/// Blobs below the sync's prefix, each deleted only if still the listed
/// version, through the run's connection (or straight to storage).
struct ListedBlobs {
    mode: Arc<Mode>,
    opts: Options,
    below: String,
    attempts: u32,
}

#[async_trait::async_trait]
impl RemoteDeleter for ListedBlobs {
    async fn delete(&self, name: &str, etag: &str) -> Result<RemoteOutcome, RemoteDeleteError> {
        let listed = Listed {
            name: format!("{}{name}", self.below),
            size: 0,
            etag: etag.to_string(),
            last_modified: None,
            sha256: None,
        };
        let outcome = delete_listed(
            &self.mode,
            &self.opts.token,
            &self.opts.container,
            &listed,
            self.attempts,
        )
        .await
        .map_err(|e| RemoteDeleteError(e.message))?;
        Ok(match outcome {
            DeleteOutcome::Deleted => RemoteOutcome::Deleted,
            DeleteOutcome::AlreadyGone => RemoteOutcome::AlreadyGone,
            DeleteOutcome::Changed => RemoteOutcome::Changed,
            DeleteOutcome::Refused(e) => RemoteOutcome::Refused { reason: e.message },
        })
    }
}

/// A download sync without an index: no file counts as placed by this
/// machine (so only `--delete-unknown` deletes local files).
struct NoRecords;

impl PlacedRecords for NoRecords {
    fn recorded(&self, _: &str) -> Result<Option<FileStat>, IndexError> {
        Ok(None)
    }

    fn forget(&self, _: &str) -> Result<(), IndexError> {
        Ok(())
    }
}

/// Each delete's outcome as a report line (`--json-lines` events too).
struct Lines<'a> {
    reporter: &'a Reporter,
    container: String,
    /// For blobs: `prefix/`, or empty.
    below: String,
    local: bool,
}

impl DeleteSink for Lines<'_> {
    fn event(&mut self, event: DeleteEvent) {
        // A local file is named by its path alone (as `--dry-run` names it).
        let blob = match self.local {
            true => String::new(),
            false => format!("{}{}", self.below, event.name),
        };
        let line = |status| blank(&event.name, &self.container, &blob, status);
        let report = match event.outcome {
            Outcome::Deleted => line(Status::Deleted),
            Outcome::WouldDelete => {
                let mut r = line(Status::Planned);
                r.reason = Some("would delete (not on the source)".into());
                r
            }
            Outcome::AlreadyGone => {
                let mut r = line(Status::Skipped);
                r.reason = Some("already gone (removed by someone else)".into());
                r
            }
            Outcome::KeptChanged(why) => {
                let mut r = line(Status::Skipped);
                r.reason = Some(format!("kept, not deleted: {why}"));
                r
            }
            Outcome::Failed(why) => failed(
                &event.name,
                &self.container,
                &blob,
                FileError::new(ErrorCode::Storage, format!("delete failed: {why}"), true),
            ),
        };
        self.reporter.finish_file(None, report, 0);
    }
}
