//! One file from its source to a verified blob: which files (`walk`, `filter`,
//! `manifest`), the per-file drivers through the relay (`file`, `send`, `wire`,
//! `source`) or straight to storage (`direct`), `--dry-run` (`probe`) and
//! `--overwrite=if-different|if-newer` (`sync`); one listed blob's delete
//! (`delete`), through the relay or straight to storage. The pure decisions
//! (`compress`, `priority`, `sync`, `direct_sizing`) sit beside the drivers
//! that act on them.
//!
//! May import `relay`, `ui` and `sign_in`; never a command or `cli`.

pub mod compress;
pub mod delete;
pub mod destination;
pub mod direct;
pub mod direct_sizing;
pub mod file;
pub mod filter;
pub mod manifest;
pub mod mode;
pub mod overwrite;
pub mod priority;
pub mod probe;
pub mod refusal;
pub mod send;
pub mod send_failure;
pub mod source;
pub mod sync;
pub mod walk;
pub mod wire;
