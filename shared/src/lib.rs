//! Blob Relay's shared core: the wire protocol, block planning, resumable hashing,
//! block IDs, resume decisions, and the blob writer used by both the relay and the
//! client's direct mode.
//!
//! I/O lives in `blob`, `credentials`, `staging`, `publish` and `quic` (sockets);
//! the rest (codec, planning, checkpoints, block IDs, resume, retry schedule, the
//! congestion model) is pure logic, so the nasty cases (every block boundary,
//! corrupt IDs, hostile names, retry storms, lossy links) are unit-tested in
//! milliseconds.

pub mod blob;
pub mod blob_name;
pub mod block_id;
pub mod checkpoint;
pub mod codec;
pub mod congestion;
pub mod credentials;
pub mod exchange;
pub mod id_key;
pub mod limits;
pub mod logsafe;
pub mod offer_rules;
pub mod plan;
pub mod protocol;
pub mod publish;
pub mod quic;
pub mod resume;
pub mod retry;
pub mod sas;
pub mod size;
pub mod staging;
pub mod tls;

/// Installs the one rustls crypto provider this project compiles in (aws-lc-rs,
/// shared by quinn and reqwest). Call once at process start; later calls are no-ops.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
