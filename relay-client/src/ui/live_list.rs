//! A list of things in flight that finish on their own (files' tasks, their
//! progress bars), pruned of finished ones in amortised O(1) per push. Pruning
//! on every push would scan the whole list (one lock per progress bar) once
//! per small file.

/// Lists shorter than this are never pruned.
const MIN_PRUNE_LEN: usize = 64;

#[derive(Debug)]
pub struct LiveList<T> {
    items: Vec<T>,
    /// Prune when the list reaches this length: twice what was live at the
    /// last prune, so a prune's cost is spread over as many pushes.
    prune_at: usize,
}

impl<T> Default for LiveList<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            prune_at: MIN_PRUNE_LEN,
        }
    }
}

impl<T> LiveList<T> {
    /// Adds `item`, first dropping the items `live` says are finished if the
    /// list is due for it. The list holds at most twice the live items, or
    /// `MIN_PRUNE_LEN`, plus one.
    pub fn push(&mut self, item: T, live: impl Fn(&T) -> bool) {
        if self.items.len() >= self.prune_at {
            self.items.retain(|x| live(x));
            self.prune_at = (2 * self.items.len()).max(MIN_PRUNE_LEN);
        }
        self.items.push(item);
    }

    /// Every item, finished or not (callers filter).
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn drain(&mut self) -> std::vec::Drain<'_, T> {
        self.items.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_items_are_pruned_and_live_ones_kept() {
        // Items are numbers; those below `finished_below` are finished. Ten are
        // live at any time, as with ten files in flight.
        let mut list = LiveList::default();
        let checks = std::cell::Cell::new(0u64);
        for n in 0..100_000u64 {
            let finished_below = n.saturating_sub(10);
            list.push(n, |&x| {
                checks.set(checks.get() + 1);
                x >= finished_below
            });
            assert!(list.len() <= 2 * 11 + MIN_PRUNE_LEN + 1, "{}", list.len());
        }
        let live: Vec<u64> = list.iter().copied().filter(|&x| x >= 99_990).collect();
        assert_eq!(live, (99_990..100_000).collect::<Vec<_>>());
        // Amortised: a bounded number of liveness checks per push, not one per
        // item in the list per push.
        assert!(checks.get() <= 200_000, "{}", checks.get());
    }
}
