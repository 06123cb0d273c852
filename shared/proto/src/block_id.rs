//! Block IDs that carry a transfer's resume state, so the relay keeps none; bound
//! to their block's bytes and authenticated, so nobody else's block is ever
//! resumed from or committed.
//!
//! Layout (64 bytes before base64, the most Azure allows; every ID of a blob has
//! the same length, as Azure requires):
//! `[0]` format version · `[1]` kind · `[2..6]` block index (BE) · `[6..46]` state ·
//! `[46..64]` MAC: HMAC-SHA256 under the relays' key (`id_key`) over the transfer
//! tag, the hash state **before** the block (`follows`, not stored) and bytes
//! `0..46`, truncated to 144 bits.
//!
//! The state is what binds an ID to content ("same ID, same bytes"): a block that
//! ends on a 64-byte boundary carries the SHA-256 chaining state after its last
//! byte (which depends on every byte so far); a file's **last** block carries the
//! SHA-256 of the whole file and its size. Two writers that stage different bytes
//! therefore never share an ID, and a Put Block List commits exactly the bytes the
//! relay hashed, whoever else stages into the same blob at the same time.
//!
//! The MAC also binds the state the block continued from, so IDs form a chain: an
//! ID verifies only after the very checkpoint its relay hashed on from. Without
//! it, one owner's two versions of a file (an interrupted upload, an edit, a
//! fresh start interrupted again) leave two valid IDs at the same index, and a
//! resume could pick version 2's block 0 next to version 1's block 2, whose
//! checkpoint describes version 1's prefix: the commit would publish bytes that
//! do not hash to the recorded SHA-256 (`resume` walks the chain instead).
//!
//! The transfer tag (keyed, see `TransferTag::derive`) is not stored: the relay
//! recomputes it from the Offer, so an ID verifies only for the same key, owner,
//! destination, size and block size.

use crate::checkpoint::{CHECKPOINT_LEN, Checkpoint};
use crate::id_key::{IdKey, Owner};
use crate::md5_state::{MD5_STATE_LEN, Md5State};

pub const BLOCK_ID_LEN: usize = 64;
pub const BLOCK_ID_VERSION: u8 = 3;
pub const TAG_LEN: usize = 16;
const MAC_AT: usize = 46;
const MAC_LEN: usize = BLOCK_ID_LEN - MAC_AT;
const KIND_AFTER: u8 = 0;
const KIND_FINAL: u8 = 1;
const KIND_MD5: u8 = 2;

/// Identifies one planned transfer: key, owner, destination, size and block size.
/// Blocks of another owner, or an earlier attempt with another size or block
/// size, verify under another tag and are never reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransferTag(pub [u8; TAG_LEN]);

impl std::fmt::Debug for TransferTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TransferTag({})", self.to_hex())
    }
}

impl TransferTag {
    pub fn derive(
        key: &IdKey,
        owner: &Owner,
        container: &str,
        blob: &str,
        size: u64,
        block_size: u64,
    ) -> Self {
        let mac = key.mac(&[
            b"blob-relay/transfer-tag/v2",
            &owner.0,
            container.as_bytes(),
            blob.as_bytes(),
            &size.to_be_bytes(),
            &block_size.to_be_bytes(),
        ]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&mac[..TAG_LEN]);
        Self(tag)
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

/// What a block's ID says about the bytes up to and including it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Hash state after this block's last byte (the block ends on a 64-byte
    /// boundary); the block can be resumed from.
    After(Checkpoint),
    /// The file's last block: the whole file's SHA-256 and size.
    Final { sha256: [u8; 32], size: u64 },
    /// Not a block of the file: a marker staged (and never committed) next to
    /// data block `index` by an upload with `--put-md5`, carrying the MD5 state
    /// after that block. Its `follows` is the SHA-256 checkpoint after the same
    /// block, so it verifies only at the end of that very chain.
    Md5(Md5State),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockId {
    pub index: u32,
    /// The hash state before this block's first byte: bound by the MAC, not
    /// stored (a resume knows it from the block before).
    pub follows: Checkpoint,
    pub state: BlockState,
}

/// Encodes and verifies the IDs of one transfer.
#[derive(Clone)]
pub struct IdSigner {
    key: IdKey,
    tag: TransferTag,
}

impl std::fmt::Debug for IdSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdSigner({:?})", self.tag)
    }
}

impl IdSigner {
    pub fn new(key: IdKey, tag: TransferTag) -> Self {
        Self { key, tag }
    }

    pub fn tag(&self) -> TransferTag {
        self.tag
    }

    fn mac(&self, follows: &Checkpoint, body: &[u8]) -> [u8; 32] {
        self.key.mac(&[
            b"blob-relay/block-id/v3",
            &self.tag.0,
            &follows.to_bytes(),
            body,
        ])
    }

    /// The block index an ID claims, unauthenticated: only to group candidates
    /// before `decode` verifies one.
    pub fn claimed_index(bytes: &[u8]) -> Option<u32> {
        if bytes.len() != BLOCK_ID_LEN || bytes[0] != BLOCK_ID_VERSION {
            return None;
        }
        Some(u32::from_be_bytes(bytes[2..6].try_into().ok()?))
    }

    pub fn encode(&self, id: &BlockId) -> [u8; BLOCK_ID_LEN] {
        let mut out = [0u8; BLOCK_ID_LEN];
        out[0] = BLOCK_ID_VERSION;
        out[2..6].copy_from_slice(&id.index.to_be_bytes());
        match id.state {
            BlockState::After(cp) => {
                out[1] = KIND_AFTER;
                out[6..6 + CHECKPOINT_LEN].copy_from_slice(&cp.to_bytes());
            }
            BlockState::Final { sha256, size } => {
                out[1] = KIND_FINAL;
                out[6..38].copy_from_slice(&sha256);
                out[38..46].copy_from_slice(&size.to_be_bytes());
            }
            BlockState::Md5(state) => {
                out[1] = KIND_MD5;
                out[6..6 + MD5_STATE_LEN].copy_from_slice(&state.to_bytes());
            }
        }
        let mac = self.mac(&id.follows, &out[..MAC_AT]);
        out[MAC_AT..].copy_from_slice(&mac[..MAC_LEN]);
        out
    }

    /// `None` for IDs that are not this transfer's continuation of `follows`:
    /// another key, owner, tag, version or preceding state, damaged, or forged.
    pub fn decode(&self, bytes: &[u8], follows: &Checkpoint) -> Option<BlockId> {
        use subtle::ConstantTimeEq;
        if bytes.len() != BLOCK_ID_LEN || bytes[0] != BLOCK_ID_VERSION {
            return None;
        }
        let mac = self.mac(follows, &bytes[..MAC_AT]);
        if !bool::from(mac[..MAC_LEN].ct_eq(&bytes[MAC_AT..])) {
            return None;
        }
        let index = u32::from_be_bytes(bytes[2..6].try_into().ok()?);
        let state = match bytes[1] {
            KIND_AFTER => BlockState::After(Checkpoint::from_bytes(&bytes[6..MAC_AT])?),
            KIND_FINAL => BlockState::Final {
                sha256: bytes[6..38].try_into().ok()?,
                size: u64::from_be_bytes(bytes[38..46].try_into().ok()?),
            },
            KIND_MD5 => BlockState::Md5(Md5State::from_bytes(&bytes[6..6 + MD5_STATE_LEN])?),
            _ => return None,
        };
        Some(BlockId {
            index,
            follows: *follows,
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn key() -> IdKey {
        IdKey::from_bytes([7; 32])
    }

    fn signer() -> IdSigner {
        let tag = TransferTag::derive(
            &key(),
            &Owner::of_token("t"),
            "c",
            "a/b.bin",
            1 << 30,
            16 << 20,
        );
        IdSigner::new(key(), tag)
    }

    /// Block 3 of 64-byte blocks: it follows the state after 192 bytes.
    fn sample() -> BlockId {
        let mut h = Sha256::new();
        h.update([7u8; 192]);
        let follows = Checkpoint::of(&h).expect("boundary");
        h.update([7u8; 64]);
        BlockId {
            index: 3,
            follows,
            state: BlockState::After(Checkpoint::of(&h).expect("boundary")),
        }
    }

    #[test]
    fn round_trip_every_kind() {
        let s = signer();
        for id in [
            sample(),
            BlockId {
                index: 9,
                follows: Checkpoint::start(),
                state: BlockState::Final {
                    sha256: [5; 32],
                    size: 12345,
                },
            },
            BlockId {
                index: 4,
                follows: Checkpoint::start(),
                state: BlockState::Md5(Md5State {
                    offset: 64 * 5,
                    state: [9; 16],
                }),
            },
        ] {
            let bytes = s.encode(&id);
            assert_eq!(bytes.len(), BLOCK_ID_LEN);
            assert_eq!(s.decode(&bytes, &id.follows), Some(id));
            assert_eq!(IdSigner::claimed_index(&bytes), Some(id.index));
        }
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let s = signer();
        let id = sample();
        let bytes = s.encode(&id);
        for i in 0..BLOCK_ID_LEN {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert_eq!(s.decode(&b, &id.follows), None, "flip at byte {i}");
        }
    }

    #[test]
    fn an_id_verifies_only_after_the_state_it_followed() {
        let s = signer();
        let id = sample();
        let bytes = s.encode(&id);
        let mut other = id.follows;
        other.state[0] ^= 1;
        assert_eq!(s.decode(&bytes, &other), None);
        assert_eq!(s.decode(&bytes, &Checkpoint::start()), None);
    }

    #[test]
    fn other_keys_owners_and_transfers_do_not_verify() {
        let id = sample();
        let bytes = signer().encode(&id);
        let other_key = IdKey::from_bytes([8; 32]);
        let t = |k: &IdKey, owner: &str, blob: &str, size: u64| {
            TransferTag::derive(k, &Owner::of_token(owner), "c", blob, size, 16 << 20)
        };
        for s in [
            IdSigner::new(other_key.clone(), t(&other_key, "t", "a/b.bin", 1 << 30)),
            IdSigner::new(key(), t(&key(), "someone-else", "a/b.bin", 1 << 30)),
            IdSigner::new(key(), t(&key(), "t", "a/c.bin", 1 << 30)),
            IdSigner::new(key(), t(&key(), "t", "a/b.bin", (1 << 30) + 1)),
        ] {
            assert_eq!(s.decode(&bytes, &id.follows), None);
        }
    }

    #[test]
    fn foreign_ids_are_ignored() {
        let s = signer();
        let start = Checkpoint::start();
        assert_eq!(s.decode(b"block-1", &start), None);
        assert_eq!(s.decode(&[0u8; 64], &start), None);
        let mut v2 = [0u8; 64];
        v2[0] = 2;
        assert_eq!(s.decode(&v2, &start), None);
        assert_eq!(IdSigner::claimed_index(&v2), None);
    }

    #[test]
    fn tag_separates_its_inputs() {
        let k = key();
        let o = Owner::of_token("t");
        let base = TransferTag::derive(&k, &o, "c", "b", 10, 16);
        assert_ne!(base, TransferTag::derive(&k, &o, "c2", "b", 10, 16));
        assert_ne!(base, TransferTag::derive(&k, &o, "c", "b2", 10, 16));
        assert_ne!(base, TransferTag::derive(&k, &o, "c", "b", 11, 16));
        assert_ne!(base, TransferTag::derive(&k, &o, "c", "b", 10, 17));
        assert_ne!(
            base,
            TransferTag::derive(&k, &Owner::direct(), "c", "b", 10, 16)
        );
        assert_ne!(
            TransferTag::derive(&k, &o, "ab", "c", 1, 1),
            TransferTag::derive(&k, &o, "a", "bc", 1, 1)
        );
    }

    #[test]
    fn different_content_never_shares_an_id() {
        // The same index of two files that differ only inside that block.
        let s = signer();
        let id_of = |fill: u8| {
            let mut h = Sha256::new();
            h.update([1u8; 64]);
            h.update([fill; 64]);
            s.encode(&BlockId {
                index: 1,
                follows: Checkpoint::start(),
                state: BlockState::After(Checkpoint::of(&h).expect("boundary")),
            })
        };
        assert_ne!(id_of(2), id_of(3));
        let last = |sha: [u8; 32]| {
            s.encode(&BlockId {
                index: 0,
                follows: Checkpoint::start(),
                state: BlockState::Final {
                    sha256: sha,
                    size: 1000,
                },
            })
        };
        assert_ne!(last([1; 32]), last([2; 32]));
    }
}
