//! The index's records of the local walk's files, fetched a batch at a time.
//!
//! The plan asks the index about local names only (an upload's file that the
//! listing also has, a download's local file), one at a time, in the walk's
//! order. Asked one point query each, an unchanged re-run of a million files
//! paid a million read transactions (SQLite's WAL lock taken and released
//! with `fcntl`, the statement stepped and reset), about half the planner's
//! time at 100,000 files (docs/bench/sync/README.md). Here the walk is read
//! `batch` entries ahead, their names are looked up in one call (`fetch`:
//! one statement, `Index::get_many`), and the plan's lookups are answered
//! from that batch.
//!
//! Pure: `fetch` is the only way out. Names are matched by equality, never by
//! an order, so the index's key order (UTF-8 bytes) and the merge's (UTF-16
//! code units by default) need not agree. Memory is two batches of names and
//! records whatever the number of files. A name the batch does not hold (not
//! expected: the plan asks about a walk entry before the merge pulls the
//! next) answers "not prefetched" and the caller asks the index itself.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use relay_proto::sync::entry::{IndexRecord, LocalEntry};
use relay_proto::sync::join::Gap;

/// Names handed on and their records (none: the index has no row for it),
/// in the walk's order, not yet asked about.
type Held = VecDeque<(String, Option<IndexRecord>)>;

/// The walk read ahead; the plan takes its entries as from the walk itself.
pub struct Ahead<I, F> {
    walk: I,
    fetch: F,
    batch: usize,
    /// Read from the walk, not yet handed on.
    pending: VecDeque<Result<LocalEntry, Gap>>,
    held: Rc<RefCell<Held>>,
}

/// The plan's side of the records: answers a lookup for a name handed on.
#[derive(Clone)]
pub struct Records {
    held: Rc<RefCell<Held>>,
}

/// Reads `walk` up to `batch` entries ahead; `fetch` gets each batch's
/// names and answers the records the index has for them (`(name, record)`,
/// in any order; a name it leaves out has none).
pub fn read_ahead<I, F>(walk: I, batch: usize, fetch: F) -> (Ahead<I, F>, Records)
where
    I: Iterator<Item = Result<LocalEntry, Gap>>,
    F: FnMut(&[&str]) -> Vec<(String, IndexRecord)>,
{
    let held = Rc::new(RefCell::new(VecDeque::new()));
    let ahead = Ahead {
        walk,
        fetch,
        batch: batch.max(1),
        pending: VecDeque::new(),
        held: held.clone(),
    };
    (ahead, Records { held })
}

impl<I, F> Ahead<I, F>
where
    I: Iterator<Item = Result<LocalEntry, Gap>>,
    F: FnMut(&[&str]) -> Vec<(String, IndexRecord)>,
{
    /// The next batch of the walk into `pending`, and its records.
    fn refill(&mut self) {
        self.pending.extend(self.walk.by_ref().take(self.batch));
        let names: Vec<&str> = self
            .pending
            .iter()
            .filter_map(|e| e.as_ref().ok().map(|e| e.name.as_str()))
            .collect();
        let mut found = if names.is_empty() {
            Vec::new()
        } else {
            (self.fetch)(&names)
        };
        // Sorted by name (byte order: any total order serves) to pair each
        // name with its record by search, not by the index's order.
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut held = self.held.borrow_mut();
        // What the plan did not ask about by now it never will (it asks about
        // an entry before the merge pulls the next); only the last batch is
        // kept, as a margin, so memory stays two batches.
        let excess = held.len().saturating_sub(self.batch);
        held.drain(..excess);
        for name in names {
            let record = found
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .ok()
                .map(|i| found[i].1.clone());
            held.push_back((name.to_string(), record));
        }
    }
}

impl<I, F> Iterator for Ahead<I, F>
where
    I: Iterator<Item = Result<LocalEntry, Gap>>,
    F: FnMut(&[&str]) -> Vec<(String, IndexRecord)>,
{
    type Item = Result<LocalEntry, Gap>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pending.is_empty() {
            self.refill();
        }
        self.pending.pop_front()
    }
}

impl Records {
    /// Records of a walk read elsewhere ([`walk_ahead`](super::walk_ahead)),
    /// each handed over with its entry through [`hold`](Self::hold).
    pub fn handed() -> Self {
        Self {
            held: Rc::new(RefCell::new(VecDeque::new())),
        }
    }

    /// `name`'s record (none: the index has no row), handed on with its
    /// entry; only the last `keep` are kept, as `refill` keeps a batch.
    pub fn hold(&self, name: String, record: Option<IndexRecord>, keep: usize) {
        let mut held = self.held.borrow_mut();
        if held.len() >= keep.max(1) {
            held.pop_front();
        }
        held.push_back((name, record));
    }

    /// The record of `name`, a name handed on (`Some(None)`: the index has
    /// none), or `None` when it was not prefetched. Names held before it
    /// were not asked about in time and are dropped: the plan asks in the
    /// walk's order.
    pub fn take(&self, name: &str) -> Option<Option<IndexRecord>> {
        let mut held = self.held.borrow_mut();
        let at = held.iter().position(|(n, _)| n == name)?;
        held.drain(..at);
        held.pop_front().map(|(_, record)| record)
    }

    /// How many names are held (for the memory bound's test).
    pub fn held(&self) -> usize {
        self.held.borrow().len()
    }
}

#[cfg(test)]
#[path = "lookahead_tests.rs"]
mod tests;
