//! Blob Relay's network layer, shared by the relay and the client: QUIC endpoint
//! and UDP socket setup (`quic`), quinn's runtime (`runtime`: precise timers)
//! and socket (`udp`: batched reads when busy), the congestion controller (`congestion`, a pure
//! model behind quinn's `Controller` trait), certificate fingerprints (`tls`) and
//! reading/writing one control frame on a stream (`frames`).
//!
//! Message formats and framing rules live in `relay-proto`; this crate only moves
//! them over sockets.

pub mod congestion;
pub mod frames;
pub mod quic;
pub mod runtime;
pub mod timer;
pub mod tls;
pub mod udp;

/// Installs the one rustls crypto provider this project compiles in (aws-lc-rs,
/// shared by quinn and reqwest). Call once at process start; later calls are no-ops.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
