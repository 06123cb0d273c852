//! The `download` command: blobs back from storage through the relay, each
//! written under a temporary name, verified, then renamed into place.
//!
//! - `place`: where a blob name may go under the destination (pure).
//! - `safe_fs`: creating folders and files there without following links.
//! - `session`: one blob's decisions: skip, refuse, resume, restart, verify (pure).

pub mod place;
pub mod safe_fs;
pub mod session;
