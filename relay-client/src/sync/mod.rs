//! The sync driver (`relay-client sync`), both ways: a local folder to
//! `container/prefix` (`upload`) and `container/prefix` to a local folder
//! (`download`). The comparison is the pure core's
//! (`relay_proto::sync`); here is its I/O:
//!
//! - `tree`: the local walk in the merge's order (`std::fs`, no links
//!   followed, gaps for what cannot be read); `remote`: the listing as the
//!   merge's input (`runs`: a folder too wide to sort in memory, its sorted
//!   runs in a temporary file); `hash`: a local file hashed while it stays one file.
//! - `planner`: the plan on a blocking thread, decisions settled there or
//!   handed to the runner through a bounded channel; `drive`: the listing
//!   task, the planner and the runner together.
//! - `spelling`: a new file's path that a case-folding file system would
//!   put under another spelling, refused before it is fetched.
//! - `upload`, `download`: each decision through the upload or download
//!   driver (`upload_send`: one file of an upload, as the merge decided it
//!   or early); `walk_ahead`: an upload's walk on a thread of its own, ahead
//!   of the merge, so a file changed here is sent before the listing reaches
//!   it; `record`: the index's rows, read a batch ahead of the plan
//!   (`lookahead`); `counts`: the run's counts.
//! - `deletes`: the verdict on the delete set, last; [`delete`]: carrying it
//!   out: spooled in SQLite, local files removed below DEST by descriptor,
//!   blobs through a [`delete::RemoteDeleter`].

pub mod counts;
pub mod delete;
pub mod deletes;
pub mod download;
pub mod drive;
pub mod hash;
pub mod lookahead;
pub mod planner;
pub mod record;
pub mod remote;
pub mod runs;
pub mod spelling;
pub mod tree;
pub mod upload;
pub mod upload_send;
pub mod walk_ahead;
