//! Resumable SHA-256: the hash state at a block boundary, small enough to live
//! inside a block ID, so any relay process can continue a transfer's hash.

use sha2::digest::common::hazmat::{SerializableState, SerializedState};
use sha2::{Digest, Sha256};

/// The SHA-256 chaining state after `offset` bytes, where `offset` is a multiple of 64.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Bytes hashed so far.
    pub offset: u64,
    /// The eight 32-bit chaining words, little-endian, as sha2 serializes them.
    pub state: [u8; 32],
}

/// Length of a checkpoint's encoding: the 32-byte state and an 8-byte count of
/// 64-byte SHA-256 blocks (sha2's own core serialization).
pub const CHECKPOINT_LEN: usize = 40;

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Checkpoint({} @ {})",
            hex::encode(&self.state[..8]),
            self.offset
        )
    }
}

impl Checkpoint {
    /// The state before any byte.
    pub fn start() -> Self {
        Self::of(&Sha256::new()).unwrap_or(Self {
            offset: 0,
            state: [0; 32],
        })
    }

    /// Captures `hasher`'s state; `None` unless it sits on a 64-byte boundary
    /// (then nothing is buffered and 40 bytes describe it completely).
    pub fn of(hasher: &Sha256) -> Option<Self> {
        let full = hasher.serialize();
        let (core, buffer) = full.split_at(CHECKPOINT_LEN);
        // Buffer = [pending length][pending bytes]; all zero at a boundary.
        if buffer.iter().any(|&b| b != 0) {
            return None;
        }
        let mut state = [0u8; 32];
        state.copy_from_slice(&core[..32]);
        let mut blocks = [0u8; 8];
        blocks.copy_from_slice(&core[32..40]);
        let offset = u64::from_le_bytes(blocks).checked_mul(64)?;
        Some(Self { offset, state })
    }

    /// A hasher that continues from this checkpoint.
    pub fn restore(&self) -> Option<Sha256> {
        if !self.offset.is_multiple_of(64) {
            return None;
        }
        let mut full = SerializedState::<Sha256>::default();
        full[..32].copy_from_slice(&self.state);
        full[32..40].copy_from_slice(&(self.offset / 64).to_le_bytes());
        Sha256::deserialize(&full).ok()
    }

    pub fn to_bytes(self) -> [u8; CHECKPOINT_LEN] {
        let mut out = [0u8; CHECKPOINT_LEN];
        out[..32].copy_from_slice(&self.state);
        out[32..].copy_from_slice(&(self.offset / 64).to_le_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != CHECKPOINT_LEN {
            return None;
        }
        let mut state = [0u8; 32];
        state.copy_from_slice(&bytes[..32]);
        let mut blocks = [0u8; 8];
        blocks.copy_from_slice(&bytes[32..]);
        let offset = u64::from_le_bytes(blocks).checked_mul(64)?;
        Some(Self { offset, state })
    }

    /// Hex form used on the wire (Plan) and in logs.
    pub fn to_hex(self) -> String {
        hex::encode(self.to_bytes())
    }

    pub fn from_hex(text: &str) -> Option<Self> {
        hex::decode(text).ok().and_then(|b| Self::from_bytes(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn resume_at_boundary_gives_same_digest() {
        let bytes = data(64 * 1000 + 17);
        let expected = Sha256::digest(&bytes);
        for cut in [0usize, 64, 640, 64 * 1000] {
            let mut h = Sha256::new();
            h.update(&bytes[..cut]);
            let cp = Checkpoint::of(&h).expect("boundary");
            assert_eq!(cp.offset, cut as u64);
            let round = Checkpoint::from_hex(&cp.to_hex()).expect("round trip");
            assert_eq!(round, cp);
            let mut resumed = round.restore().expect("restore");
            resumed.update(&bytes[cut..]);
            assert_eq!(resumed.finalize(), expected);
        }
    }

    #[test]
    fn no_checkpoint_off_boundary() {
        let mut h = Sha256::new();
        h.update(data(65));
        assert!(Checkpoint::of(&h).is_none());
    }

    #[test]
    fn start_is_empty_hash() {
        let cp = Checkpoint::start();
        assert_eq!(cp.offset, 0);
        let h = cp.restore().expect("restore");
        assert_eq!(h.finalize(), Sha256::digest(b""));
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(Checkpoint::from_hex("zz").is_none());
        assert!(Checkpoint::from_bytes(&[0u8; 39]).is_none());
        // Block counts that overflow a byte offset are refused, not wrapped.
        let mut b = [0u8; CHECKPOINT_LEN];
        b[32..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Checkpoint::from_bytes(&b).is_none());
    }
}
