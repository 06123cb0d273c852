//! Blob Relay client: walks files, sends each over its own QUIC stream to a relay
//! (or straight to Blob Storage in direct mode), and reports verified receipts.

pub mod bench;
pub mod cli;
pub mod compress;
pub mod connect;
pub mod direct;
pub mod direct_sizing;
pub mod download;
pub mod file;
pub mod filter;
pub mod in_flight;
pub mod interrupt;
pub mod link;
pub mod links;
pub mod live_list;
pub mod manifest;
pub mod open_turns;
pub mod path_cache;
pub mod patience;
pub mod priority;
pub mod probe;
pub mod progress;
pub mod rate;
pub mod report;
pub mod send;
pub mod setup;
pub mod sign_in;
pub mod source;
pub mod spread;
pub mod sync;
pub mod units;
pub mod upload;
pub mod walk;
pub mod watch;
pub mod wire;
