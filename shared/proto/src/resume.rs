//! Resume decisions from Azure's uncommitted block list: the longest run of blocks
//! 0, 1, 2, ... whose IDs verify under this transfer's signer (key, owner, tag),
//! each consistent with the plan.

use crate::block_id::BLOCK_ID_LEN;
use crate::block_id::{BlockId, BlockState, IdSigner};
use crate::checkpoint::Checkpoint;
use crate::plan::BlockPlan;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePoint {
    /// Blocks 0..count are staged and reusable.
    pub blocks: u32,
    /// Where the client continues; `blocks * block_size`.
    pub offset: u64,
    /// Hash state at `offset`.
    pub checkpoint: Checkpoint,
    /// Their encoded IDs, in order, for the final block list.
    pub ids: Vec<[u8; BLOCK_ID_LEN]>,
}

impl ResumePoint {
    pub fn fresh() -> Self {
        Self {
            blocks: 0,
            offset: 0,
            checkpoint: Checkpoint::start(),
            ids: Vec::new(),
        }
    }
}

/// Picks the resume point from raw uncommitted IDs (as returned by Get Block List).
/// IDs that do not verify (other owners, tags or keys, damaged or forged IDs), and
/// blocks whose recorded offset or size does not match the plan are ignored. The last block of a file is never reused: a
/// transfer that had staged everything re-sends its last block, so the relay always
/// has bytes to hash against the client's Trailer before committing.
pub fn find_resume_point<'a>(
    plan: &BlockPlan,
    signer: &IdSigner,
    uncommitted: impl IntoIterator<Item = (&'a [u8], u64)>,
) -> ResumePoint {
    let count = plan.block_count();
    let reusable = count.saturating_sub(1);
    // Several attempts may have staged the same index; keep only IDs consistent
    // with the plan. Azure keeps one block per ID, so a duplicate ID is one block.
    let mut slots: Vec<Option<(Checkpoint, [u8; BLOCK_ID_LEN])>> =
        vec![None; reusable.min(u32::MAX as u64) as usize];
    for (raw, size) in uncommitted {
        let Some(BlockId {
            index,
            state: BlockState::After(checkpoint),
        }) = signer.decode(raw)
        else {
            continue;
        };
        let index = u64::from(index);
        if index >= reusable {
            continue;
        }
        let (_, end) = plan.block_range(index);
        if size != plan.block_len(index) || checkpoint.offset != end {
            continue;
        }
        if let (Some(slot), Ok(raw)) = (slots.get_mut(index as usize), raw.try_into()) {
            *slot = Some((checkpoint, raw));
        }
    }
    let mut point = ResumePoint::fresh();
    for slot in slots {
        let Some((checkpoint, raw)) = slot else { break };
        point.ids.push(raw);
        point.blocks += 1;
        point.offset = checkpoint.offset;
        point.checkpoint = checkpoint;
    }
    point
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_id::TransferTag;
    use crate::id_key::{IdKey, Owner};
    use crate::limits::MIB;
    use sha2::{Digest, Sha256};

    fn signer_for(owner: &str, size: u64, block_size: u64) -> IdSigner {
        let key = IdKey::from_bytes([3; 32]);
        let tag = TransferTag::derive(&key, &Owner::of_token(owner), "c", "b", size, block_size);
        IdSigner::new(key, tag)
    }

    /// Stages every block of a synthetic file and returns (plan, signer, ids with sizes).
    fn staged(size: u64) -> (BlockPlan, IdSigner, Vec<(Vec<u8>, u64)>) {
        let plan = BlockPlan::new(size, 5 * MIB).expect("plan");
        let signer = signer_for("owner-a", size, plan.block_size);
        let mut h = Sha256::new();
        let mut ids = Vec::new();
        for i in 0..plan.block_count() {
            let len = plan.block_len(i);
            h.update(vec![i as u8; len as usize]);
            let state = match Checkpoint::of(&h) {
                Some(cp) if i + 1 < plan.block_count() => BlockState::After(cp),
                _ => BlockState::Final {
                    sha256: h.clone().finalize().into(),
                    size,
                },
            };
            let id = BlockId {
                index: i as u32,
                state,
            };
            ids.push((signer.encode(&id).to_vec(), len));
        }
        (plan, signer, ids)
    }

    fn run(plan: &BlockPlan, signer: &IdSigner, ids: &[(Vec<u8>, u64)]) -> ResumePoint {
        find_resume_point(plan, signer, ids.iter().map(|(b, s)| (b.as_slice(), *s)))
    }

    #[test]
    fn resumes_at_every_block_boundary() {
        let (plan, signer, ids) = staged(5 * MIB * 4 + 100);
        for staged_blocks in 0..=ids.len() {
            let p = run(&plan, &signer, &ids[..staged_blocks]);
            // The last block is never reused.
            let expect = staged_blocks.min(ids.len() - 1);
            assert_eq!(p.blocks as usize, expect);
            assert_eq!(p.offset, expect as u64 * plan.block_size);
            assert_eq!(p.checkpoint.offset, p.offset);
        }
    }

    #[test]
    fn gap_stops_the_run() {
        let (plan, signer, mut ids) = staged(5 * MIB * 4);
        ids.remove(1);
        assert_eq!(run(&plan, &signer, &ids).blocks, 1);
    }

    #[test]
    fn foreign_corrupt_and_other_owners_ids_are_ignored() {
        let (plan, signer, mut ids) = staged(5 * MIB * 3);
        ids[0].0[30] ^= 1; // damaged checkpoint
        ids.push((b"someone-elses-block".to_vec(), 5 * MIB));
        assert_eq!(run(&plan, &signer, &ids).blocks, 0);
        let (_, _, ids) = staged(5 * MIB * 3);
        let other_owner = signer_for("owner-b", 5 * MIB * 3, plan.block_size);
        assert_eq!(run(&plan, &other_owner, &ids).blocks, 0);
        let other_size = signer_for("owner-a", 1, plan.block_size);
        assert_eq!(run(&plan, &other_size, &ids).blocks, 0);
    }

    #[test]
    fn wrong_block_size_is_ignored() {
        let (plan, signer, mut ids) = staged(5 * MIB * 3);
        ids[0].1 -= 1;
        assert_eq!(run(&plan, &signer, &ids).blocks, 0);
    }

    #[test]
    fn single_block_and_empty_files_never_resume() {
        let (plan, signer, ids) = staged(100);
        assert_eq!(run(&plan, &signer, &ids).blocks, 0);
        let (plan, signer, ids) = staged(0);
        assert_eq!(run(&plan, &signer, &ids), ResumePoint::fresh());
    }
}
