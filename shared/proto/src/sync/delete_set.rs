//! The delete set: candidates gathered during the merge in bounded memory,
//! handed out only after the merge, whole or not at all.

use super::delete::{DeleteCandidate, DeleteRules, SpillStore, Withheld, verdict};
use super::join::Completion;

/// Counts of what was gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeleteCounts {
    /// Candidates the rules admit: the batch's size.
    pub planned: u64,
    /// Local files kept because this machine did not place them (or they
    /// changed since) and `--delete-unknown` was not given.
    pub kept: u64,
}

/// The candidates of one run.
pub struct DeleteSet<S> {
    rules: DeleteRules,
    buffer: Vec<DeleteCandidate>,
    capacity: usize,
    store: S,
    counts: DeleteCounts,
}

impl<S: SpillStore> DeleteSet<S> {
    /// A set that keeps at most `capacity` (at least 1) candidates in memory.
    pub fn new(rules: DeleteRules, capacity: usize, store: S) -> Self {
        Self {
            rules,
            buffer: Vec::new(),
            capacity: capacity.max(1),
            store,
            counts: DeleteCounts::default(),
        }
    }

    pub fn counts(&self) -> DeleteCounts {
        self.counts
    }

    /// Adds a candidate; whether the rules admit it (a kept one is only
    /// counted).
    pub fn push(&mut self, candidate: DeleteCandidate) -> Result<bool, S::Error> {
        if !self.rules.admits(&candidate) {
            self.counts.kept += 1;
            return Ok(false);
        }
        self.counts.planned += 1;
        if self
            .rules
            .keep_at_most()
            .is_some_and(|most| self.counts.planned > most)
        {
            // Over a count limit: the batch will be refused; only counted.
            self.buffer = Vec::new();
            return Ok(true);
        }
        self.buffer.push(candidate);
        if self.buffer.len() >= self.capacity {
            self.store.append(&self.buffer)?;
            self.buffer.clear();
        }
        Ok(true)
    }

    /// After the merge: the whole batch, or why there is none.
    pub fn finish(self, completion: Completion, dest_entries: u64) -> Result<Deletes<S>, Withheld> {
        verdict(&self.rules, completion, self.counts.planned, dest_entries)?;
        Ok(Deletes {
            store: self.store,
            buffer: self.buffer,
        })
    }
}

/// A batch that may go ahead.
pub struct Deletes<S> {
    store: S,
    buffer: Vec<DeleteCandidate>,
}

impl<S: SpillStore> Deletes<S> {
    /// Every candidate, in the order gathered (name order).
    pub fn iter(
        &mut self,
    ) -> Result<impl Iterator<Item = Result<DeleteCandidate, S::Error>> + '_, S::Error> {
        let held = self.buffer.iter().cloned().map(Ok);
        Ok(self.store.replay()?.chain(held))
    }
}
