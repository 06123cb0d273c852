//! One directory's entries in the merge's order, in memory bounded by a
//! configured width rather than by the directory's size.
//!
//! A directory of up to `width` entries is sorted in memory (one `Vec`, as
//! it always was). A wider one is read in chunks of `width`: each chunk is
//! sorted and handed to the tree to spill (the walk's `Tree::spill`: the client
//! writes it to an unlinked temporary file), and the sorted runs are merged
//! k-way while the walk yields, holding one entry per run. The order is the
//! same total order either way ([`NameOrder::compare_child`]), so a wide
//! directory and its subfolders come out exactly as a narrow one's.
//!
//! The walk (`walk_order`) uses this file; this file knows nothing of it.

use super::order::NameOrder;

/// One entry of a directory as the file system gives it, its name already
/// mapped to the blob name's segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Child<F> {
    File {
        name: String,
        file: F,
    },
    Dir {
        name: String,
    },
    /// An entry that cannot be walked (a name not valid UTF-8, a `stat`
    /// that failed): the source is incomplete there.
    Failed(String),
}

/// Entries of one directory sorted in memory before the rest go to sorted
/// runs: about 100 bytes a name, so some 10 MB at the most per directory on
/// the walk's path.
pub const SORT_IN_MEMORY: usize = 100_000;

/// A spilled run read back, in the order it was written; an `Err` is a run
/// that could not be read back (the directory is incomplete from there).
pub type Run<F> = Box<dyn Iterator<Item = Result<Child<F>, String>> + Send>;

/// The key a directory entry sorts by: its name, and whether it stands for
/// a folder (`name/`). A failed entry sorts first, as it always did.
pub fn child_key<F>(c: &Child<F>) -> (&str, bool) {
    match c {
        Child::File { name, .. } => (name.as_str(), false),
        Child::Dir { name } => (name.as_str(), true),
        Child::Failed(_) => ("", false),
    }
}

/// A directory's entries, sorted: in memory, or merged from runs.
pub enum Sorted<F> {
    Memory(std::vec::IntoIter<Child<F>>),
    Merged(Merge<F>),
}

impl<F> Sorted<F> {
    /// Entries (or run heads) held in memory now.
    pub fn held(&self) -> usize {
        match self {
            Sorted::Memory(rest) => rest.len(),
            Sorted::Merged(m) => m.len(),
        }
    }
}

impl<F> Iterator for Sorted<F> {
    type Item = Result<Child<F>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Sorted::Memory(rest) => rest.next().map(Ok),
            Sorted::Merged(m) => m.next(),
        }
    }
}

/// Sorts `entries` into `order`, in memory if there are at most `width` of
/// them, else through runs of `width` handed to `spill`. A spill that fails
/// fails the whole directory (nothing of it was handed out yet).
pub fn sorted<F, I, S>(
    entries: I,
    order: NameOrder,
    width: usize,
    mut spill: S,
) -> Result<Sorted<F>, String>
where
    I: Iterator<Item = Child<F>>,
    S: FnMut(Vec<Child<F>>) -> Result<Run<F>, String>,
{
    let width = width.max(1);
    let mut chunk = Vec::new();
    let mut runs = Vec::new();
    for child in entries {
        // Spilled only once one more arrives: a directory of exactly
        // `width` entries stays in memory.
        if chunk.len() == width {
            order.sort_children(&mut chunk, child_key);
            runs.push(spill(std::mem::take(&mut chunk))?);
        }
        chunk.push(child);
    }
    order.sort_children(&mut chunk, child_key);
    if runs.is_empty() {
        return Ok(Sorted::Memory(chunk.into_iter()));
    }
    // The last chunk is spilled too, so a merge holds only its runs' heads
    // while the walk goes down into the directory's subfolders.
    if !chunk.is_empty() {
        runs.push(spill(chunk)?);
    }
    Merge::new(order, runs).map(Sorted::Merged)
}

/// A k-way merge of sorted runs, one entry of each in hand, the least on
/// top of a heap (O(log k) a step).
pub struct Merge<F> {
    heads: std::collections::BinaryHeap<Head<F>>,
    /// A run that broke while refilling: reported on the next call.
    broken: Option<String>,
}

/// One run's next entry, ordered so the heap's top is the least name.
pub struct Head<F> {
    order: NameOrder,
    child: Child<F>,
    run: Run<F>,
}

impl<F> Ord for Head<F> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: `BinaryHeap` is a max-heap.
        let (a, b) = (child_key(&self.child), child_key(&other.child));
        self.order.compare_child(b, a)
    }
}

impl<F> PartialOrd for Head<F> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<F> PartialEq for Head<F> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl<F> Eq for Head<F> {}

impl<F> Merge<F> {
    /// Takes each run's first entry; a run that cannot be read at all fails
    /// the directory.
    pub fn new(order: NameOrder, runs: Vec<Run<F>>) -> Result<Self, String> {
        let mut heads = std::collections::BinaryHeap::with_capacity(runs.len());
        for mut run in runs {
            match run.next() {
                Some(Ok(child)) => heads.push(Head { order, child, run }),
                Some(Err(why)) => return Err(why),
                None => {}
            }
        }
        Ok(Self {
            heads,
            broken: None,
        })
    }

    /// Run heads held now.
    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }
}

impl<F> Iterator for Merge<F> {
    type Item = Result<Child<F>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(why) = self.broken.take() {
            return Some(Err(why));
        }
        let Head {
            order,
            child,
            mut run,
        } = self.heads.pop()?;
        match run.next() {
            Some(Ok(next)) => self.heads.push(Head {
                order,
                child: next,
                run,
            }),
            // The run ended; or it broke: its head is still handed out, in
            // order, the break is reported next and the other runs go on.
            Some(Err(why)) => self.broken = Some(why),
            None => {}
        }
        Some(Ok(child))
    }
}

#[cfg(test)]
#[path = "wide_dir_tests.rs"]
mod tests;
