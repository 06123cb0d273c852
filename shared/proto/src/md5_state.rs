//! Resumable MD5 for `--put-md5`: the hash state at a block boundary, so a
//! resumed upload can still give its blob a Content-MD5 of every byte, although
//! the relay never sees the bytes staged before the resume point.
//!
//! The state travels in a marker block's ID (`block_id::BlockState::Md5`), MAC'd
//! together with the SHA-256 checkpoint at the same offset, so it can only be
//! picked up by a resume that continues from exactly those bytes.

use md5::digest::common::hazmat::{SerializableState, SerializedState};
use md5::{Digest, Md5};

/// The MD5 chaining state after `offset` bytes, a multiple of 64.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Md5State {
    pub offset: u64,
    /// The four 32-bit chaining words, little-endian, as md-5 serializes them.
    pub state: [u8; 16],
}

/// Length of the encoding: the 16-byte state and an 8-byte count of 64-byte
/// blocks (md-5's own core serialization).
pub const MD5_STATE_LEN: usize = 24;

impl std::fmt::Debug for Md5State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Md5State({} @ {})",
            hex::encode(&self.state[..4]),
            self.offset
        )
    }
}

impl Md5State {
    /// The state before any byte.
    pub fn start() -> Self {
        Self::of(&Md5::new()).unwrap_or(Self {
            offset: 0,
            state: [0; 16],
        })
    }

    /// Captures `hasher`'s state; `None` unless it sits on a 64-byte boundary.
    pub fn of(hasher: &Md5) -> Option<Self> {
        let full = hasher.serialize();
        let (core, buffer) = full.split_at(MD5_STATE_LEN);
        if buffer.iter().any(|&b| b != 0) {
            return None;
        }
        Self::from_bytes(core)
    }

    /// A hasher that continues from this state.
    pub fn restore(&self) -> Option<Md5> {
        let mut full = SerializedState::<Md5>::default();
        full[..MD5_STATE_LEN].copy_from_slice(&self.to_bytes());
        Md5::deserialize(&full).ok()
    }

    pub fn to_bytes(self) -> [u8; MD5_STATE_LEN] {
        let mut out = [0u8; MD5_STATE_LEN];
        out[..16].copy_from_slice(&self.state);
        out[16..].copy_from_slice(&(self.offset / 64).to_le_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != MD5_STATE_LEN {
            return None;
        }
        let mut state = [0u8; 16];
        state.copy_from_slice(&bytes[..16]);
        let blocks = u64::from_le_bytes(bytes[16..].try_into().ok()?);
        Some(Self {
            offset: blocks.checked_mul(64)?,
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_at_a_boundary_gives_the_same_digest() {
        let bytes: Vec<u8> = (0..64 * 100 + 9).map(|i| (i * 7 % 253) as u8).collect();
        let expected = Md5::digest(&bytes);
        for cut in [0usize, 64, 64 * 100] {
            let mut h = Md5::new();
            h.update(&bytes[..cut]);
            let state = Md5State::of(&h).expect("boundary");
            assert_eq!(state.offset, cut as u64);
            let round = Md5State::from_bytes(&state.to_bytes()).expect("round trip");
            assert_eq!(round, state);
            let mut resumed = round.restore().expect("restore");
            resumed.update(&bytes[cut..]);
            assert_eq!(resumed.finalize(), expected);
        }
        assert_eq!(
            Md5State::start().restore().expect("start").finalize(),
            Md5::digest(b"")
        );
    }

    #[test]
    fn off_a_boundary_or_garbage_is_refused() {
        let mut h = Md5::new();
        h.update([1u8; 65]);
        assert!(Md5State::of(&h).is_none());
        assert!(Md5State::from_bytes(&[0u8; 23]).is_none());
        let mut b = [0u8; MD5_STATE_LEN];
        b[16..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Md5State::from_bytes(&b).is_none());
    }
}
