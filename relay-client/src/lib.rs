//! Blob Relay client: walks files, sends each over its own QUIC stream to a relay
//! (or straight to Blob Storage in direct mode), and reports verified receipts.

pub mod bench;
pub mod cli;
pub mod connect;
pub mod direct;
pub mod path_cache;
pub mod report;
pub mod send;
pub mod source;
pub mod upload;
pub mod walk;
