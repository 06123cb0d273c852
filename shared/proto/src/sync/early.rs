//! Files changed here, sent before the listing reaches their names.
//!
//! On a long link the listing is the slow side of the merge: 10,000 names
//! take about 1.7 s at 200 ms (docs/bench/sync/README.md), and a file the
//! merge finds changed near the end of the listing starts only then. But
//! whether a file changed here is known from the walk and the index alone:
//! its `stat` differs from the one recorded when this machine placed the
//! blob. Such a file can be sent as soon as the walk meets it, replacing
//! only the version this machine placed (`If-Match` the recorded ETag): if
//! the blob is still that version, the send is exactly what the merge would
//! have asked for; if anyone changed or removed it since, the relay refuses
//! and nothing is written.
//!
//! An early send that is refused (or finds the file's bytes are the ones
//! placed: only touched) is *declined*, and the name falls back to the
//! merge's own decision with the listing's view, as if it had never been
//! tried, with what the attempt learned (`D`: the file's SHA-256 when it
//! was read, so a touched file is read once). [`EarlySends`] is the
//! bookkeeping between the two: the walk runs
//! ahead of the merge, so either may come first. Memory: one entry per name
//! sent early and not yet both reached by the merge and ended, so at most
//! the walk's lead plus the sends in flight.

use std::collections::HashMap;

use super::entry::{IndexRecord, LocalEntry};

/// The version a file changed here may replace early: the row's, when the
/// index has one for the name and the file is no longer the one recorded.
/// None under `--checksum` (every file is compared against the listing) and
/// for a file the index does not know (the listing decides).
pub fn early_basis<'r>(
    local: &LocalEntry,
    record: Option<&'r IndexRecord>,
    checksum: bool,
) -> Option<&'r IndexRecord> {
    let record = record?;
    (!checksum && !local.stat.same_file_as(&record.stat)).then_some(record)
}

/// What the merge does on reaching a name it decided to send, with the
/// listing's view `L` of it.
#[derive(Debug, PartialEq, Eq)]
pub enum Reached<L, D> {
    /// Not sent early: the merge sends it.
    Merge(L),
    /// Sent early: nothing for the merge to do. Ended, or in flight (its
    /// end decides; the view is kept for it, should it be declined).
    Early,
    /// Sent early and declined: the merge sends it, already counted, with
    /// what the attempt learned.
    Fallback(L, D),
}

/// How an early send ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End<D> {
    /// Sent, or failed as any send may, or stopped the run.
    Done,
    /// Not this way; what it learned.
    Declined(D),
}

#[derive(Debug)]
enum State<L, D> {
    /// In flight; the merge has not reached the name.
    Running,
    /// In flight; the merge reached the name with this view.
    Listed(L),
    /// Ended (sent, or failed as any send may) before the merge reached it.
    Done,
    /// Declined before the merge reached the name.
    Declined(D),
}

/// The early sends not yet settled with the merge.
#[derive(Debug)]
pub struct EarlySends<L, D> {
    names: HashMap<String, State<L, D>>,
}

impl<L, D> Default for EarlySends<L, D> {
    fn default() -> Self {
        Self {
            names: HashMap::new(),
        }
    }
}

impl<L, D> EarlySends<L, D> {
    /// `name` is being sent early (the walk met it before the merge).
    pub fn started(&mut self, name: &str) {
        self.names.insert(name.to_string(), State::Running);
    }

    /// The merge decided to send `name`; `listed` is its view.
    pub fn reached(&mut self, name: &str, listed: L) -> Reached<L, D> {
        match self.names.remove(name) {
            None => Reached::Merge(listed),
            Some(State::Running) => {
                self.names.insert(name.to_string(), State::Listed(listed));
                Reached::Early
            }
            Some(State::Done) => Reached::Early,
            Some(State::Declined(learned)) => Reached::Fallback(listed, learned),
            // Reached twice (not expected: the merge meets a name once): the
            // first view stands; the second is the merge's own.
            Some(State::Listed(first)) => {
                self.names.insert(name.to_string(), State::Listed(first));
                Reached::Merge(listed)
            }
        }
    }

    /// The early send of `name` ended. A declined name the merge has
    /// already reached is to be sent now with the view it left (`Some`);
    /// one it has not reached waits for it.
    pub fn ended(&mut self, name: &str, end: End<D>) -> Option<(L, D)> {
        let state = self.names.remove(name)?;
        let waiting = match (state, end) {
            (State::Listed(listed), End::Declined(learned)) => return Some((listed, learned)),
            (State::Listed(_), End::Done) => return None,
            (_, End::Done) => State::Done,
            (_, End::Declined(learned)) => State::Declined(learned),
        };
        // The merge has not reached the name: it settles it when it does.
        self.names.insert(name.to_string(), waiting);
        None
    }

    /// Names not yet settled (for the memory bound's test).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
#[path = "early_tests.rs"]
mod tests;
