//! Block IDs: each binds its block's bytes through the hash states around it,
//! signed so that only the owner's own blocks are ever resumed.

use relay_proto::block_id::{BLOCK_ID_LEN, BlockId, BlockState, IdSigner};
use relay_proto::plan::BlockPlan;

use super::StageError;
use super::digest::Digests;

pub(super) struct BlockIds {
    signer: IdSigner,
    plan: BlockPlan,
}

impl BlockIds {
    pub(super) fn new(signer: IdSigner, plan: BlockPlan) -> Self {
        Self { signer, plan }
    }

    /// The ID of block `index`, all of whose bytes `digests` has hashed: the
    /// hash state after it, or for the file's last block the whole file's
    /// SHA-256 (`block_id`).
    pub(super) fn block_id(
        &self,
        index: u64,
        digests: &Digests,
    ) -> Result<[u8; BLOCK_ID_LEN], StageError> {
        let last = index + 1 == self.plan.block_count();
        let state = match digests.after() {
            Some(cp) if !last => BlockState::After(cp),
            _ => BlockState::Final {
                sha256: digests.sha256_so_far(),
                size: self.plan.size,
            },
        };
        Ok(self.signer.encode(&BlockId {
            index: u32::try_from(index).map_err(|_| StageError::BlockIndex(index))?,
            follows: digests.follows(),
            state,
        }))
    }

    /// The MD5 marker to stage after block `index` when the whole file's MD5
    /// is kept and a later resume could use it: not after the last block,
    /// which is never resumed from.
    pub(super) fn md5_marker(
        &self,
        index: u64,
        digests: &Digests,
    ) -> Result<Option<[u8; BLOCK_ID_LEN]>, StageError> {
        if index + 1 >= self.plan.block_count() {
            return Ok(None);
        }
        let (Some(state), Some(after)) = (digests.md5_state(), digests.after()) else {
            return Ok(None);
        };
        Ok(Some(self.signer.encode(&BlockId {
            index: u32::try_from(index).map_err(|_| StageError::BlockIndex(index))?,
            follows: after,
            state: BlockState::Md5(state),
        })))
    }
}
