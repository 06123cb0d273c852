//! Deletes as pure policy: what may be deleted, when, and how many; and the
//! delete set, spooled in bounded memory until the merge has ended.
//!
//! Deletes are decided last. While the merge runs, each name on the
//! destination and not on the source goes into a
//! [`DeleteSet`](super::delete_set::DeleteSet); only when both inputs were
//! read whole ([`Completion`]) and the whole batch is within `--max-delete`
//! is it handed out, and then all of it: a batch over the
//! limit is refused entirely, never cut to its first N (which N would be an
//! accident of the name order).
//!
//! Memory: the set keeps at most `capacity` candidates in memory and spills
//! full buffers to a [`SpillStore`] the client implements (a temporary file,
//! or a table of the SQLite index); with a count limit it stops keeping
//! candidates past the limit (the batch is refused anyway) and only counts.

use std::str::FromStr;

use super::entry::FileStat;
use super::join::Completion;

/// Where a local file came from, as far as the index knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This machine placed it and it is unchanged since.
    Placed,
    /// This machine placed it, and it has changed since: someone's work.
    ChangedSincePlaced,
    /// The index has no record of placing it.
    Unknown,
}

/// Something on the destination that the source does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteCandidate {
    /// A blob, deleted only if it is still the version listed (`If-Match`
    /// this ETag): a blob written after the listing is never removed.
    Remote { name: String, etag: String },
    /// A local file, deleted only if it is still the file the walk saw
    /// (`stat`): one saved over or edited after the walk is someone's work.
    Local {
        name: String,
        origin: Origin,
        stat: FileStat,
    },
}

impl DeleteCandidate {
    pub fn name(&self) -> &str {
        match self {
            DeleteCandidate::Remote { name, .. } | DeleteCandidate::Local { name, .. } => name,
        }
    }
}

/// `--max-delete`: a number of deletes, or a share of the destination's
/// entries (rounded down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxDelete {
    Count(u64),
    Percent(u8),
}

/// `--max-delete` unless the user says otherwise.
pub const DEFAULT_MAX_DELETE: MaxDelete = MaxDelete::Count(1000);

impl MaxDelete {
    /// The most deletes allowed on a destination of `dest_entries`.
    pub fn limit(self, dest_entries: u64) -> u64 {
        match self {
            MaxDelete::Count(n) => n,
            MaxDelete::Percent(p) => {
                let share = u128::from(dest_entries) * u128::from(p) / 100;
                u64::try_from(share).unwrap_or(u64::MAX)
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--max-delete {0:?}: give a number of files (1000) or a percentage (5%) of 0 to 100")]
pub struct MaxDeleteError(pub String);

impl FromStr for MaxDelete {
    type Err = MaxDeleteError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || MaxDeleteError(s.to_string());
        match s.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= 100 => Ok(MaxDelete::Percent(p)),
                _ => Err(bad()),
            },
            None => s.trim().parse().map(MaxDelete::Count).map_err(|_| bad()),
        }
    }
}

/// The user's delete flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRules {
    /// `--delete`: without it nothing is deleted.
    pub delete: bool,
    pub max: MaxDelete,
    /// `--delete-unknown`: local files this machine did not place (or that
    /// changed since it placed them) may be deleted too.
    pub delete_unknown: bool,
}

impl DeleteRules {
    /// Whether a candidate may be in the batch at all (not counting limits).
    pub fn admits(&self, candidate: &DeleteCandidate) -> bool {
        match candidate {
            DeleteCandidate::Remote { .. } => true,
            DeleteCandidate::Local { origin, .. } => {
                *origin == Origin::Placed || self.delete_unknown
            }
        }
    }

    /// The largest batch worth keeping: past it the batch is refused
    /// whatever follows (unknown for a percentage until the listing ends).
    pub(super) fn keep_at_most(&self) -> Option<u64> {
        match self.max {
            MaxDelete::Count(n) => Some(n),
            MaxDelete::Percent(_) => None,
        }
    }
}

/// Why no delete happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Withheld {
    #[error("not asked to delete (--delete)")]
    NotAsked,
    #[error("the source was not read whole, so nothing is deleted")]
    SourceIncomplete,
    #[error("the destination was not listed whole, so nothing is deleted")]
    DestIncomplete,
    #[error("{planned} deletes exceed --max-delete ({limit}): none made")]
    OverLimit { planned: u64, limit: u64 },
}

/// Whether a batch of `planned` deletes may go ahead.
pub fn verdict(
    rules: &DeleteRules,
    completion: Completion,
    planned: u64,
    dest_entries: u64,
) -> Result<(), Withheld> {
    if planned == 0 {
        return Ok(());
    }
    if !rules.delete {
        return Err(Withheld::NotAsked);
    }
    if !completion.source {
        return Err(Withheld::SourceIncomplete);
    }
    if !completion.dest {
        return Err(Withheld::DestIncomplete);
    }
    let limit = rules.max.limit(dest_entries);
    if planned > limit {
        return Err(Withheld::OverLimit { planned, limit });
    }
    Ok(())
}

/// Where a delete set's full buffers go: append-only, read back once.
pub trait SpillStore {
    type Error: std::error::Error;
    type Replay<'a>: Iterator<Item = Result<DeleteCandidate, Self::Error>>
    where
        Self: 'a;

    fn append(&mut self, batch: &[DeleteCandidate]) -> Result<(), Self::Error>;
    /// Everything appended, in the order appended.
    fn replay(&mut self) -> Result<Self::Replay<'_>, Self::Error>;
}

/// A spill store in memory: for tests, and what the seam looks like.
#[derive(Debug, Default)]
pub struct MemorySpill {
    pub spilled: Vec<DeleteCandidate>,
    pub appends: usize,
}

impl SpillStore for MemorySpill {
    type Error = std::convert::Infallible;
    type Replay<'a> = std::iter::Map<
        std::slice::Iter<'a, DeleteCandidate>,
        fn(&DeleteCandidate) -> Result<DeleteCandidate, std::convert::Infallible>,
    >;

    fn append(&mut self, batch: &[DeleteCandidate]) -> Result<(), Self::Error> {
        self.spilled.extend_from_slice(batch);
        self.appends += 1;
        Ok(())
    }

    fn replay(&mut self) -> Result<Self::Replay<'_>, Self::Error> {
        Ok(self.spilled.iter().map(|c| Ok(c.clone())))
    }
}

#[cfg(test)]
#[path = "delete_tests.rs"]
mod tests;
