//! `sync`: a local folder and a container's prefix made the same, in either
//! direction, by a streaming merge (the pure core is `relay_proto::sync`).
//!
//! - [`delete`]: the deletes a merge leaves behind, carried out last and
//!   only as its verdict allows: spooled in SQLite, local files removed
//!   below DEST by descriptor, blobs through a [`delete::RemoteDeleter`].

pub mod delete;
