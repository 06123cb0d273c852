//! Sync's deletes, carried out: last, whole or not at all, and safely.
//!
//! The merge gathers candidates in a [`DeleteSet`] (spilled to a
//! [`SqliteSpill`] past its capacity); [`carry_out`] then asks the core's
//! verdict (`relay_proto::sync::delete::verdict`, through
//! [`DeleteSet::finish`]): a source or destination not read whole, or a
//! batch over `--max-delete`, deletes nothing. Otherwise it replays the set
//! in name order and hands each candidate to the destination's executor:
//!
//! - [`local`]: files below DEST, by descriptor, never through a link,
//!   only regular files, only while their `stat` is still the walk's, and a
//!   file this machine placed only while its `stat` still matches the index;
//! - [`remote`]: blobs through a [`RemoteDeleter`] (the relay's Delete,
//!   `If-Match` the listed ETag, or direct), a few in flight, the first
//!   refusal stopping them all.
//!
//! `--dry-run` lists every delete the verdict allows and deletes nothing.

pub mod local;
pub mod remote;
pub mod report;
pub mod spill;

use std::sync::Arc;

use relay_proto::sync::delete::{DeleteCandidate, SpillStore, Withheld};
use relay_proto::sync::delete_set::{DeleteSet, Deletes};
use relay_proto::sync::join::{Completion, Tally};

pub use local::{LocalDeleteError, LocalDeleter, LocalOutcome, PlacedRecords};
pub use remote::{RemoteDeleteError, RemoteDeleter, RemoteOutcome};
pub use report::{DeleteEvent, DeleteSink, DeleteSummary, Outcome, Stop};
pub use spill::{LazySpill, SpillError, SqliteSpill};

/// Where the batch's deletes are made: the sync's destination.
pub enum Executor<'a> {
    /// A download's DEST folder.
    Local(&'a LocalDeleter<'a>),
    /// An upload's `container/prefix`.
    Remote(Arc<dyn RemoteDeleter>),
}

/// Why the batch was not carried out whole.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// Nothing was deleted: the verdict's reason (an incomplete side, or
    /// `OverLimit { planned, limit }`).
    #[error("{0}")]
    Withheld(Withheld),
    /// The destination refused to delete: no further delete was started.
    #[error(
        "the destination refused to delete ({reason}); no more deletes were tried \
         ({} deleted before the refusal)",
        summary.deleted
    )]
    Refused {
        reason: String,
        summary: DeleteSummary,
    },
    /// The spooled candidates could not be read back part way.
    #[error(
        "the list of deletes could not be read back ({reason}); no more deletes were tried \
         ({} deleted before)",
        summary.deleted
    )]
    Spill {
        reason: String,
        summary: DeleteSummary,
    },
}

/// Carries out the deletes of one sync, after its merge has ended.
///
/// `completion` and `tally` are the merge's; `tally.dest_entries` is what a
/// `--max-delete N%` is a share of. Without `--delete` (`NotAsked`) this is
/// no error: nothing is deleted and the summary says only what was kept.
/// The summary's `failed` is the caller's to turn into an exit status.
pub async fn carry_out<S: SpillStore>(
    set: DeleteSet<S>,
    completion: Completion,
    tally: Tally,
    executor: Executor<'_>,
    dry_run: bool,
    sink: &mut (dyn DeleteSink + Send),
) -> Result<DeleteSummary, DeleteError> {
    let kept_unknown = set.counts().kept;
    let deletes = match set.finish(completion, tally.dest_entries) {
        Ok(deletes) => deletes,
        Err(Withheld::NotAsked) => {
            return Ok(DeleteSummary {
                kept_unknown,
                ..DeleteSummary::default()
            });
        }
        Err(withheld) => return Err(DeleteError::Withheld(withheld)),
    };
    let mut summary = carry_out_batch(deletes, executor, dry_run, sink).await?;
    summary.kept_unknown = kept_unknown;
    Ok(summary)
}

/// Carries out a batch the verdict already let go ahead
/// ([`DeleteSet::finish`]): for a caller that reports the verdict itself.
pub async fn carry_out_batch<S: SpillStore>(
    mut deletes: Deletes<S>,
    executor: Executor<'_>,
    dry_run: bool,
    sink: &mut (dyn DeleteSink + Send),
) -> Result<DeleteSummary, DeleteError> {
    let mut summary = DeleteSummary::default();
    let candidates = deletes.iter().map_err(|e| DeleteError::Spill {
        reason: e.to_string(),
        summary,
    })?;
    let stopped = if dry_run {
        list(candidates, &mut summary, sink)
    } else {
        match executor {
            Executor::Local(deleter) => local_all(candidates, deleter, &mut summary, sink),
            Executor::Remote(deleter) => remote::run(candidates, deleter, &mut summary, sink).await,
        }
    };
    match stopped {
        Ok(()) => Ok(summary),
        Err(Stop::Refused(reason)) => Err(DeleteError::Refused { reason, summary }),
        Err(Stop::Spill(reason)) => Err(DeleteError::Spill { reason, summary }),
    }
}

/// `--dry-run`: every delete, listed.
fn list<E: std::error::Error>(
    candidates: impl Iterator<Item = Result<DeleteCandidate, E>>,
    summary: &mut DeleteSummary,
    sink: &mut (dyn DeleteSink + Send),
) -> Result<(), Stop> {
    for c in candidates {
        let c = c.map_err(|e| Stop::Spill(e.to_string()))?;
        summary.record(sink, c.name().to_string(), Outcome::WouldDelete);
    }
    Ok(())
}

/// Local deletes, one after another: each is a few system calls on a local
/// disk, made in place rather than on a blocking pool.
fn local_all<E: std::error::Error>(
    candidates: impl Iterator<Item = Result<DeleteCandidate, E>>,
    deleter: &LocalDeleter<'_>,
    summary: &mut DeleteSummary,
    sink: &mut (dyn DeleteSink + Send),
) -> Result<(), Stop> {
    for c in candidates {
        let c = c.map_err(|e| Stop::Spill(e.to_string()))?;
        let outcome = match &c {
            DeleteCandidate::Local { name, origin, stat } => {
                match deleter.delete(name, *origin, stat) {
                    Ok(LocalOutcome::Deleted) => Outcome::Deleted,
                    Ok(LocalOutcome::AlreadyGone) => Outcome::AlreadyGone,
                    Ok(LocalOutcome::Kept(why)) => Outcome::KeptChanged(why),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
            DeleteCandidate::Remote { .. } => {
                Outcome::Failed("a blob in a local destination's batch".to_string())
            }
        };
        let name = match c {
            DeleteCandidate::Local { name, .. } | DeleteCandidate::Remote { name, .. } => name,
        };
        summary.record(sink, name, outcome);
    }
    Ok(())
}

#[cfg(test)]
#[path = "carry_out_tests.rs"]
mod tests;
