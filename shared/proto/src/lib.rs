//! Blob Relay's pure core: the wire messages and their framing, block planning,
//! resumable hashing (checkpoints), block IDs, the resume decision, the Offer
//! rules, and sync's comparison of a local walk with a listing.
//!
//! Nothing here does I/O or needs an async runtime, so the nasty cases (every
//! block boundary, corrupt IDs, hostile names, oversized frames) are unit-tested
//! in milliseconds. The network lives in `relay-transport`, Azure in
//! `relay-storage`; both build on this crate, never the other way round.

pub mod blob_name;
pub mod block_id;
pub mod build_version;
pub mod checkpoint;
pub mod chunk;
pub mod codec;
pub mod color;
pub mod compress;
pub mod compressible;
pub mod duration;
pub mod exchange;
pub mod hostile_chunks;
pub mod id_key;
pub mod inflate;
pub mod limits;
pub mod logsafe;
pub mod md5_state;
pub mod offer_rules;
pub mod plan;
pub mod protocol;
pub mod resume;
pub mod secret;
pub mod session;
pub mod size;
pub mod sync;
