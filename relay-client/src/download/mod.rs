//! The download driver: blobs back from storage through the relay (or
//! straight from storage), each written under a temporary name, verified,
//! then renamed into place. The `download` command (`commands::download`)
//! sets it up and hands it a runner.
//!
//! - `sources`: every source's listing into the runner (`Runner::feed`).
//! - `list`, `cursor`: one listing stream per source, taken up again where
//!   it broke.
//! - `job`: what every blob of a run shares, opened once from the plan the
//!   command made of its arguments (`JobPlan`); `summary`: the run's summary.
//! - `blob`: one listed blob to its report; `retried`: its download with
//!   its retries; `report`: its report line from how it ended.
//! - `place`: where a blob name may go under the destination, and the names
//!   of the partial files no blob name maps to (pure).
//! - `safe_fs`: creating folders and files there without following links.
//! - `relay_proto::session::download`: one blob's decisions: skip, refuse,
//!   resume, restart, verify (pure).
//! - `partial`: the partial file's one writer (its lock) and its sidecar
//!   (which blob and version it holds).
//! - `attempt`: one attempt at one blob, the session's driver.
//! - `fetch`, `stream`, `piece`, `direct`: one blob's stream (the relay's
//!   `Fetch`, or storage's ranges) and its bytes into the partial file
//!   (`batch`: a batch at a time).
//! - `inflating`: compressed sections read as the blob's bytes, within a budget.
//! - `placing`: the final name, never over a file nobody compared.
//! - `folder_sync`: one folder fsync shared by the files placed there at once.

pub mod attempt;
pub mod batch;
pub mod blob;
pub mod cursor;
pub mod direct;
pub mod fetch;
pub mod folder_sync;
pub mod inflating;
pub mod job;
pub mod list;
pub mod partial;
pub mod piece;
pub mod place;
pub mod placing;
pub mod report;
pub mod retried;
pub mod safe_fs;
pub mod sources;
pub mod stream;
pub mod summary;
