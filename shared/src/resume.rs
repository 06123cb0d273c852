//! Resume decisions from Azure's uncommitted block list: the longest run of blocks
//! 0, 1, 2, ... staged under this transfer's tag, each consistent with the plan.

use crate::block_id::{BlockId, TransferTag};
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
    pub ids: Vec<[u8; crate::block_id::BLOCK_ID_LEN]>,
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
/// IDs of other tags, damaged IDs, and blocks whose recorded offset or size does
/// not match the plan are ignored. The last block of a file is never reused: a
/// transfer that had staged everything re-sends its last block, so the relay always
/// has bytes to hash against the client's Trailer before committing.
pub fn find_resume_point<'a>(
    plan: &BlockPlan,
    tag: TransferTag,
    uncommitted: impl IntoIterator<Item = (&'a [u8], u64)>,
) -> ResumePoint {
    let count = plan.block_count();
    let reusable = count.saturating_sub(1);
    // Several attempts may have staged the same index; keep only IDs consistent
    // with the plan. Azure keeps one block per ID, so a duplicate ID is one block.
    let mut slots: Vec<Option<BlockId>> = vec![None; reusable.min(u32::MAX as u64) as usize];
    for (raw, size) in uncommitted {
        let Some(id) = BlockId::decode(raw) else {
            continue;
        };
        let index = u64::from(id.index);
        if id.tag != tag || index >= reusable {
            continue;
        }
        let (_, end) = plan.block_range(index);
        if size != plan.block_len(index) || id.checkpoint.offset != end {
            continue;
        }
        if let Some(slot) = slots.get_mut(index as usize) {
            *slot = Some(id);
        }
    }
    let mut point = ResumePoint::fresh();
    for slot in slots {
        let Some(id) = slot else { break };
        point.ids.push(id.encode());
        point.blocks += 1;
        point.offset = id.checkpoint.offset;
        point.checkpoint = id.checkpoint;
    }
    point
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MIB;
    use sha2::{Digest, Sha256};

    /// Stages every block of a synthetic file and returns (plan, tag, ids with sizes).
    fn staged(size: u64) -> (BlockPlan, TransferTag, Vec<(Vec<u8>, u64)>) {
        let plan = BlockPlan::new(size, 5 * MIB).expect("plan");
        let tag = TransferTag::derive("c", "b", size, plan.block_size);
        let mut h = Sha256::new();
        let mut ids = Vec::new();
        for i in 0..plan.block_count() {
            let len = plan.block_len(i);
            h.update(vec![i as u8; len as usize]);
            let cp = Checkpoint::of(&h).unwrap_or_else(Checkpoint::start);
            let id = BlockId {
                tag,
                index: i as u32,
                checkpoint: cp,
            };
            ids.push((id.encode().to_vec(), len));
        }
        (plan, tag, ids)
    }

    fn run(plan: &BlockPlan, tag: TransferTag, ids: &[(Vec<u8>, u64)]) -> ResumePoint {
        find_resume_point(plan, tag, ids.iter().map(|(b, s)| (b.as_slice(), *s)))
    }

    #[test]
    fn resumes_at_every_block_boundary() {
        let (plan, tag, ids) = staged(5 * MIB * 4 + 100);
        for staged_blocks in 0..=ids.len() {
            let p = run(&plan, tag, &ids[..staged_blocks]);
            // The last block is never reused.
            let expect = staged_blocks.min(ids.len() - 1);
            assert_eq!(p.blocks as usize, expect);
            assert_eq!(p.offset, expect as u64 * plan.block_size);
            assert_eq!(p.checkpoint.offset, p.offset);
        }
    }

    #[test]
    fn gap_stops_the_run() {
        let (plan, tag, mut ids) = staged(5 * MIB * 4);
        ids.remove(1);
        assert_eq!(run(&plan, tag, &ids).blocks, 1);
    }

    #[test]
    fn foreign_and_corrupt_ids_are_ignored() {
        let (plan, tag, mut ids) = staged(5 * MIB * 3);
        ids[0].0[30] ^= 1; // damaged checkpoint
        ids.push((b"someone-elses-block".to_vec(), 5 * MIB));
        assert_eq!(run(&plan, tag, &ids).blocks, 0);
        let other = TransferTag::derive("c", "b", 1, 1);
        let (_, _, ids) = staged(5 * MIB * 3);
        assert_eq!(run(&plan, other, &ids).blocks, 0);
    }

    #[test]
    fn wrong_block_size_is_ignored() {
        let (plan, tag, mut ids) = staged(5 * MIB * 3);
        ids[0].1 -= 1;
        assert_eq!(run(&plan, tag, &ids).blocks, 0);
    }

    #[test]
    fn single_block_and_empty_files_never_resume() {
        let (plan, tag, ids) = staged(100);
        assert_eq!(run(&plan, tag, &ids).blocks, 0);
        let (plan, tag, ids) = staged(0);
        assert_eq!(run(&plan, tag, &ids), ResumePoint::fresh());
    }
}
