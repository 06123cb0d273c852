//! The per-file protocol as state machines with no I/O and no clock of their own
//! (in the manner of quinn-proto): the driver feeds events (a frame read, what
//! storage answered, time) and performs the one action each event returns.
//! Everything the protocol decides, and in which order, is here and unit-tested
//! in milliseconds; the async drivers only move bytes and events.

pub mod client;
pub mod download;
pub mod relay;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod download_tests;
#[cfg(test)]
mod relay_tests;
