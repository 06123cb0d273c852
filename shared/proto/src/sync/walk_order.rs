//! A directory walk in the merge's order, with memory bounded by the
//! widest directories on the current path, not by the tree.
//!
//! Each directory is read whole (file systems give their entries in their
//! own order: hash order, creation order), sorted by the names its blobs
//! get ([`NameOrder::sort_children`]: a subdirectory as its name and `/`),
//! and handed out one entry at a time, descending into a subdirectory at
//! its place. The walk holds the unvisited entries of each directory from
//! the root to the one being read, each at most its width bound
//! ([`SORT_IN_MEMORY`] unless set): a directory wider than that is sorted
//! in runs the tree spills and merged back ([`super::wide_dir`]), so one
//! directory of ten million files costs a bounded number of names plus one
//! entry per run, and a tree of ten million files in folders of a thousand
//! costs a few thousand.

use super::join::Gap;
use super::order::NameOrder;
pub use super::wide_dir::Child;
use super::wide_dir::{Run, SORT_IN_MEMORY, Sorted, sorted};

/// A file system as the walk reads it.
pub trait Tree {
    type File: Send + 'static;
    /// A directory's entries as they are read: the walk holds at most its
    /// width bound of them at once.
    type Entries: Iterator<Item = Child<Self::File>>;
    /// The entries of the directory at `path` (`/`-separated below the
    /// root, `""` the root), in any order; or why it cannot be read.
    fn read_dir(&mut self, path: &str) -> Result<Self::Entries, String>;
    /// Keeps one sorted run of a directory wider than the walk's bound
    /// outside memory and gives it back as a reader, in the same order.
    /// The default keeps it in memory (trees in tests); the client's writes
    /// it to a temporary file.
    fn spill(&mut self, run: Vec<Child<Self::File>>) -> Result<Run<Self::File>, String> {
        Ok(Box::new(run.into_iter().map(Ok)))
    }
}

/// A tree lent to a walk (tests look at it after).
impl<T: Tree> Tree for &mut T {
    type File = T::File;
    type Entries = T::Entries;

    fn read_dir(&mut self, path: &str) -> Result<Self::Entries, String> {
        (**self).read_dir(path)
    }

    fn spill(&mut self, run: Vec<Child<Self::File>>) -> Result<Run<Self::File>, String> {
        (**self).spill(run)
    }
}

/// One file the walk found: its name below the root and what the tree said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked<F> {
    pub name: String,
    pub file: F,
}

/// The unvisited, sorted entries of one directory.
struct Level<F> {
    path: String,
    rest: Sorted<F>,
}

/// The walk; an iterator of files in name order, and gaps.
pub struct SortedWalk<T: Tree> {
    tree: T,
    order: NameOrder,
    levels: Vec<Level<T::File>>,
    started: bool,
    width: usize,
}

impl<T: Tree> SortedWalk<T> {
    pub fn new(tree: T, order: NameOrder) -> Self {
        Self {
            tree,
            order,
            levels: Vec::new(),
            started: false,
            width: SORT_IN_MEMORY,
        }
    }

    /// Sorts a directory in memory up to `width` entries, through spilled
    /// runs past it (tests set a small one; at least 1).
    pub fn with_width(mut self, width: usize) -> Self {
        self.width = width.max(1);
        self
    }

    /// The directory entries held now, not yet handed out: what the walk's
    /// memory grows with.
    pub fn held(&self) -> usize {
        self.levels.iter().map(|l| l.rest.held()).sum()
    }

    /// Reads and sorts the directory at `path` onto the stack.
    fn enter(&mut self, path: String) -> Result<(), Gap> {
        let gap = |why| Gap(format!("{}: {why}", shown(&path)));
        let entries = self.tree.read_dir(&path).map_err(gap)?;
        let tree = &mut self.tree;
        let rest = sorted(entries, self.order, self.width, |run| tree.spill(run)).map_err(gap)?;
        self.levels.push(Level { path, rest });
        Ok(())
    }
}

/// A directory's path in a message: the root has none.
pub fn shown(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

/// `name` below `dir` (`/`-joined; the root is the empty path).
pub fn joined(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

impl<T: Tree> Iterator for SortedWalk<T> {
    type Item = Result<Walked<T::File>, Gap>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            if let Err(gap) = self.enter(String::new()) {
                return Some(Err(gap));
            }
        }
        loop {
            let level = self.levels.last_mut()?;
            let Some(child) = level.rest.next() else {
                self.levels.pop();
                continue;
            };
            let dir = level.path.clone();
            let child = match child {
                Ok(child) => child,
                Err(why) => return Some(Err(Gap(format!("{}: {why}", shown(&dir))))),
            };
            match child {
                Child::File { name, file } => {
                    let name = joined(&dir, &name);
                    return Some(Ok(Walked { name, file }));
                }
                Child::Dir { name } => {
                    if let Err(gap) = self.enter(joined(&dir, &name)) {
                        return Some(Err(gap));
                    }
                }
                Child::Failed(why) => return Some(Err(Gap(why))),
            }
        }
    }
}

#[cfg(test)]
#[path = "walk_order_tests.rs"]
pub(crate) mod tests;
