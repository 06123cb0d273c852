//! What every command that moves files shares: one runner (`runner`: files
//! in flight up to `--parallel`, status lines, Ctrl-C and `--patience`,
//! draining, the stop), how a run ended (`outcome`), and Ctrl-C itself
//! (`interrupt`), and an upload's files in flight against the relay's
//! windows with the wait for their commits after Ctrl-C (`in_flight`).
//! `upload`, `download`, `sync` and `watch` hand it their items and what to
//! do with each.
//!
//! May import `transfer`, `relay`, `ui`; never a command or `cli`.

pub mod in_flight;
pub mod interrupt;
pub mod outcome;
pub mod runner;
