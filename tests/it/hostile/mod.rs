//! Peers and inputs that try to break the relay's promises: bad Offers, racing writers, hostile compressed chunks either way, and attackers of its memory.

mod bad_input;
mod budget;
mod compressed_download;
mod compressed_upload;
mod memory_bound;
mod ownership;
