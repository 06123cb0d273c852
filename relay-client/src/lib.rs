//! Blob Relay client: walks files, sends each over its own QUIC stream to a relay
//! (or straight to Blob Storage in direct mode), and reports verified receipts.
//!
//! Layers, each importing only the ones below it (docs/ARCHITECTURE.md):
//! `cli` (the command line) → `commands` (upload, download, watch: their
//! flags and setup; `bench`) → the drivers: `watch`, `download`, `run` (the
//! runner every command hands its items to), `transfer` (one file's upload),
//! `relay` (the link to the relay, and the retries over it) → `ui` (what the
//! person sees); `sign_in` and `index` (what this machine placed in a folder)
//! are libraries beside them.

pub mod bench;
pub mod cli;
pub mod commands;
pub mod download;
pub mod index;
pub mod relay;
pub mod run;
pub mod sign_in;
pub mod sync;
pub mod transfer;
pub mod ui;
pub mod watch;
