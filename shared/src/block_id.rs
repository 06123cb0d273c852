//! Block IDs that carry a transfer's resume state, so the relay keeps none.
//!
//! Layout (64 bytes before base64, the most Azure allows; every ID of a blob has the
//! same length, as Azure requires):
//! `[0]` format version · `[1..17]` transfer tag · `[17..21]` block index (BE) ·
//! `[21..61]` SHA-256 checkpoint after this block · `[61..64]` check bytes
//! (SHA-256 of bytes 0..61), so a damaged or foreign ID is recognised and ignored.

use sha2::{Digest, Sha256};

use crate::checkpoint::{CHECKPOINT_LEN, Checkpoint};

pub const BLOCK_ID_LEN: usize = 64;
pub const BLOCK_ID_VERSION: u8 = 1;
pub const TAG_LEN: usize = 16;

/// Identifies one planned transfer: destination, size and block size. Blocks of an
/// earlier attempt with another size or block size carry another tag and are never reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransferTag(pub [u8; TAG_LEN]);

impl std::fmt::Debug for TransferTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TransferTag({})", self.to_hex())
    }
}

impl TransferTag {
    pub fn derive(container: &str, blob: &str, size: u64, block_size: u64) -> Self {
        let mut h = Sha256::new();
        h.update(b"blob-relay/transfer-tag/v1\0");
        h.update(container.as_bytes());
        h.update([0]);
        h.update(blob.as_bytes());
        h.update([0]);
        h.update(size.to_be_bytes());
        h.update(block_size.to_be_bytes());
        let digest = h.finalize();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&digest[..TAG_LEN]);
        Self(tag)
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockId {
    pub tag: TransferTag,
    pub index: u32,
    /// Hash state after this block's last byte.
    pub checkpoint: Checkpoint,
}

impl BlockId {
    pub fn encode(&self) -> [u8; BLOCK_ID_LEN] {
        let mut out = [0u8; BLOCK_ID_LEN];
        out[0] = BLOCK_ID_VERSION;
        out[1..17].copy_from_slice(&self.tag.0);
        out[17..21].copy_from_slice(&self.index.to_be_bytes());
        out[21..21 + CHECKPOINT_LEN].copy_from_slice(&self.checkpoint.to_bytes());
        let check = Sha256::digest(&out[..61]);
        out[61..].copy_from_slice(&check[..3]);
        out
    }

    /// `None` for IDs that are not ours, of another version, or damaged.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != BLOCK_ID_LEN || bytes[0] != BLOCK_ID_VERSION {
            return None;
        }
        let check = Sha256::digest(&bytes[..61]);
        if bytes[61..] != check[..3] {
            return None;
        }
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&bytes[1..17]);
        let mut index = [0u8; 4];
        index.copy_from_slice(&bytes[17..21]);
        let checkpoint = Checkpoint::from_bytes(&bytes[21..21 + CHECKPOINT_LEN])?;
        Some(Self {
            tag: TransferTag(tag),
            index: u32::from_be_bytes(index),
            checkpoint,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BlockId {
        let mut h = Sha256::new();
        h.update([7u8; 128]);
        BlockId {
            tag: TransferTag::derive("c", "a/b.bin", 1 << 30, 16 << 20),
            index: 3,
            checkpoint: Checkpoint::of(&h).expect("boundary"),
        }
    }

    #[test]
    fn round_trip() {
        let id = sample();
        let bytes = id.encode();
        assert_eq!(bytes.len(), BLOCK_ID_LEN);
        assert_eq!(BlockId::decode(&bytes), Some(id));
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let bytes = sample().encode();
        for i in 0..BLOCK_ID_LEN {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert_eq!(BlockId::decode(&b), None, "flip at byte {i}");
        }
    }

    #[test]
    fn foreign_ids_are_ignored() {
        assert_eq!(BlockId::decode(b"block-1"), None);
        assert_eq!(BlockId::decode(&[0u8; 64]), None);
    }

    #[test]
    fn tag_depends_on_every_input() {
        let base = TransferTag::derive("c", "b", 10, 16);
        assert_ne!(base, TransferTag::derive("c2", "b", 10, 16));
        assert_ne!(base, TransferTag::derive("c", "b2", 10, 16));
        assert_ne!(base, TransferTag::derive("c", "b", 11, 16));
        assert_ne!(base, TransferTag::derive("c", "b", 10, 17));
        // The separator keeps ("ab","c") apart from ("a","bc").
        assert_ne!(
            TransferTag::derive("ab", "c", 1, 1),
            TransferTag::derive("a", "bc", 1, 1)
        );
    }
}
