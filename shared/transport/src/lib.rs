//! Blob Relay's network layer, shared by the relay and the client: QUIC endpoint
//! and UDP socket setup (`quic`), the congestion controller (`congestion`, a pure
//! model behind quinn's `Controller` trait), certificate fingerprints (`tls`) and
//! reading/writing one control frame on a stream (`frames`).
//!
//! Message formats and framing rules live in `relay-proto`; this crate only moves
//! them over sockets.

pub mod congestion;
pub mod frames;
pub mod quic;
pub mod tls;

/// Installs the one rustls crypto provider this project compiles in (aws-lc-rs,
/// shared by quinn and reqwest). Call once at process start; later calls are no-ops.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
