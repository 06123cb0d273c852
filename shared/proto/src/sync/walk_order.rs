//! A directory walk in the merge's order, with memory bounded by the
//! widest directories on the current path, not by the tree.
//!
//! Each directory is read whole (file systems give their entries in their
//! own order: hash order, creation order), sorted by the names its blobs
//! get ([`NameOrder::sort_children`]: a subdirectory as its name and `/`),
//! and handed out one entry at a time, descending into a subdirectory at
//! its place. The walk holds the unvisited entries of each directory from
//! the root to the one being read: one directory of ten million files
//! costs its ten million names, a tree of ten million files in folders of
//! a thousand costs a few thousand.

use super::join::Gap;
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

/// A file system as the walk reads it.
pub trait Tree {
    type File;
    /// The entries of the directory at `path` (`/`-separated below the
    /// root, `""` the root), in any order; or why it cannot be read.
    fn read_dir(&mut self, path: &str) -> Result<Vec<Child<Self::File>>, String>;
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
    rest: std::vec::IntoIter<Child<F>>,
}

/// The walk; an iterator of files in name order, and gaps.
pub struct SortedWalk<T: Tree> {
    tree: T,
    order: NameOrder,
    levels: Vec<Level<T::File>>,
    started: bool,
}

impl<T: Tree> SortedWalk<T> {
    pub fn new(tree: T, order: NameOrder) -> Self {
        Self {
            tree,
            order,
            levels: Vec::new(),
            started: false,
        }
    }

    /// The directory entries held now, not yet handed out: what the walk's
    /// memory grows with.
    pub fn held(&self) -> usize {
        self.levels.iter().map(|l| l.rest.len()).sum()
    }

    /// Reads and sorts the directory at `path` onto the stack.
    fn enter(&mut self, path: String) -> Result<(), Gap> {
        let mut children = self
            .tree
            .read_dir(&path)
            .map_err(|why| Gap(format!("{}: {why}", shown(&path))))?;
        self.order.sort_children(&mut children, |c| match c {
            Child::File { name, .. } => (name.as_str(), false),
            Child::Dir { name } => (name.as_str(), true),
            Child::Failed(_) => ("", false),
        });
        self.levels.push(Level {
            path,
            rest: children.into_iter(),
        });
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
