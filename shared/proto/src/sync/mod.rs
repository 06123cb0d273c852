//! Sync's pure core: the streaming comparison of a local walk with a
//! listing, the "unchanged costs nothing" rules, and deletes as policy.
//!
//! - [`order`]: the one total order both sides are put in, and the check
//!   that refuses an input breaking it.
//! - [`join`]: the merge of two sorted inputs in O(1) memory.
//! - [`entry`], [`unchanged`]: what each side and the index say about a
//!   name, and whether its file must be read.
//! - [`plan`]: the decisions of an upload and of a download, and
//!   [`early`]: a file changed here sent before the listing reaches it.
//! - [`delete`], [`delete_set`]: which deletes may happen, when, how many,
//!   and the candidates spooled in bounded memory until the merge ends.
//! - [`walk_order`]: a directory walk that yields the merge's order, and
//!   [`wide_dir`]: a directory too wide to sort in memory, sorted in spilled
//!   runs and merged back.
//!
//! No I/O: the client brings the walk, the listing, the index and a place
//! to spill deletes, so every ordering edge and every delete guard is
//! tested here in milliseconds.

pub mod delete;
pub mod delete_set;
pub mod early;
pub mod entry;
pub mod join;
pub mod order;
pub mod plan;
pub mod unchanged;
pub mod walk_order;
pub mod wide_dir;

#[cfg(test)]
mod properties_tests;
