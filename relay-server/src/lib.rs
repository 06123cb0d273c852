//! Blob Relay server: QUIC in, large staged blocks out, commit only after the
//! whole-file SHA-256 matches. The binary is a thin shell over this library so the
//! end-to-end tests can run a real relay in-process.
//!
//! Its modules are layers, each importing only the ones listed before it:
//! `telemetry` (metrics, the exposition format, the build), then
//! `connection` (one QUIC connection: TLS, admission, stream credit) and
//! `sign_in` (tokens and Entra ID), then `state` (`Config` in its groups,
//! `Shared`), then `transfer` (one stream: admission of its caller, upload,
//! download, listing) and `operations` (flags, subcommands, the state
//! directory, the health listener), then `server` (the endpoint that accepts
//! connections and spawns streams), then `configuration` (the flags into one
//! `Config`, once). The protocol's decisions are not here: they live in
//! `relay_proto`'s sessions and `relay_pipeline`.

pub mod configuration;
pub mod connection;
pub mod operations;
pub mod server;
pub mod sign_in;
pub mod state;
pub mod telemetry;
pub mod transfer;

pub use configuration::{ResolveError, describe_storage};
pub use server::{BindError, Relay};
pub use state::memory_bound::{
    BASE_MEMORY, INCOMING_BUFFER, PER_CONNECTION_OVERHEAD, PER_STREAM_STATE, per_connection_state,
};
pub use state::{BlockFill, Config, MemoryBound, TestHooks};
