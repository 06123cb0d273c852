//! Deletes, last: after the merge has ended and every transfer is done, the
//! delete set's verdict (`relay_proto::sync::delete::verdict`: asked for,
//! both sides read whole, within `--max-delete`), then either `--dry-run`'s
//! account of it or the one call that carries the batch out.

use std::sync::Arc;

use relay_proto::sync::delete::{DeleteRules, MemorySpill, SpillStore, Withheld};
use relay_proto::sync::delete_set::{DeleteSet, Deletes};

use super::planner::Planned;
use crate::download::job::Job;
use crate::transfer::mode::Mode;
use crate::transfer::send::Options;
use crate::ui::progress::Reporter;
use crate::ui::report::SyncReport;

/// Candidates kept in memory before the set spills (with a count limit it
/// never holds more than the limit: past it the batch is refused anyway).
pub const DELETES_IN_MEMORY: usize = 1000;

/// Where the spilled candidates go. wired at merge: the SQLite spill store
/// of `sync::delete` replaces this in-memory one (with a percentage limit a
/// batch is only known once the listing ended, and spills).
pub type Spill = MemorySpill;

/// The run's empty delete set.
pub fn delete_set(rules: DeleteRules) -> DeleteSet<Spill> {
    DeleteSet::new(rules, DELETES_IN_MEMORY, MemorySpill::default())
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
        Ok(batch) => match carry_out(batch, target, reporter).await {
            Ok(n) => {
                report.deleted = n;
                true
            }
            Err(e) => {
                say(format!("deletes: {e}"));
                report.deletes_withheld = Some(e);
                false
            }
        },
    }
}

/// wired at merge: `crate::sync::delete::carry_out` (the relay's Delete with
/// `If-Match`, or the local safe delete, each reported through `reporter`)
/// takes the batch here and answers the deletes made. Until then no delete
/// is made and the run says so.
async fn carry_out<S: SpillStore>(
    _batch: Deletes<S>,
    _target: &DeleteTarget,
    _reporter: &Reporter,
) -> Result<u64, String> {
    Err("deletes: not wired yet".into())
}
