//! `relay-client upload` end to end: blocks, checksums, compression, connections, resume, small files, sync and write-only tokens.

mod block_sizes;
mod checksum;
mod compression;
mod connections;
mod end_to_end;
mod links;
mod max_rate;
mod rerun_whenever_the_plan_arrives;
mod resume;
mod small_files;
mod sync;
mod write_only;
