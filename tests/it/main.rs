//! Blob Relay's end-to-end tests, in one binary with a module per feature
//! (one link instead of one per file). Run one feature with a filter:
//! `cargo test -p relay-tests --test it download::`.
//!
//! Every test may run beside any other (the default parallel test threads):
//! what is process-wide (Azurite, the reserved ports) is shared by design in
//! `relay_tests`, and nothing here changes the process's environment.

mod admission;
mod architecture;
mod bench;
mod cli;
mod delete;
mod docs_cite_tests;
mod download;
mod hostile;
mod operations;
mod sign_in;
mod storage;
mod storage_faults;
mod sync;
mod upload;
mod watch;
