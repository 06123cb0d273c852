//! Resume decisions from Azure's uncommitted block list: the longest chain of
//! blocks 0, 1, 2, ... whose IDs verify under this transfer's signer (key, owner,
//! tag), each as the continuation of the one before, each consistent with the plan.

use crate::block_id::BLOCK_ID_LEN;
use crate::block_id::{BlockId, BlockState, IdSigner};
use crate::checkpoint::Checkpoint;
use crate::md5_state::Md5State;
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
    /// MD5 state at `offset`, when asked for (`Md5Markers::Needed`).
    pub md5: Option<Md5State>,
}

impl ResumePoint {
    pub fn fresh() -> Self {
        Self {
            blocks: 0,
            offset: 0,
            checkpoint: Checkpoint::start(),
            ids: Vec::new(),
            md5: None,
        }
    }
}

/// Whether the upload keeps a whole-file MD5 (`--put-md5`): then a resume point
/// needs the MD5 state there too, from a marker block (`BlockState::Md5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Md5Markers {
    Ignored,
    /// Resume only where a marker gives the MD5 state (at worst from zero).
    Needed,
}

/// The size of a marker block: Azure stages no empty block, and any size other
/// than the plan's keeps markers out of the data candidates.
pub const MD5_MARKER_LEN: u64 = 1;

/// How many different hash states one block index may continue from while the
/// chain is walked. Each is a version of the file this owner staged and
/// abandoned; more than a few means a hostile owner, who then only shortens
/// their own resume (candidates past the bound are not tried).
const MAX_BRANCHES: usize = 8;

/// Picks the resume point from raw uncommitted IDs (as returned by Get Block List):
/// the longest chain of blocks 0, 1, 2, ... where each ID verifies under this
/// transfer's signer (key, owner, tag) **as the continuation of the block before
/// it** (`BlockId::follows`), and each matches the plan's offsets and sizes.
/// Anything else is ignored: other owners, tags or keys, damaged or forged IDs,
/// and blocks of another version of the file that happen to sit at the same
/// index. The last block of a file is never reused: a transfer that had staged
/// everything re-sends its last block, so the relay always has bytes to hash
/// against the client's Trailer before committing.
///
/// With `Md5Markers::Needed` the chain is cut back to its deepest block that has
/// a marker verifying at the end of exactly that chain.
pub fn find_resume_point<'a>(
    plan: &BlockPlan,
    signer: &IdSigner,
    uncommitted: impl IntoIterator<Item = (&'a [u8], u64)>,
    markers: Md5Markers,
) -> ResumePoint {
    let sorted = Sorted::of(plan, uncommitted, markers);
    let chain = longest_chain(plan, signer, &sorted.candidates);
    let (chain, md5) = match markers {
        Md5Markers::Ignored => (chain, None),
        Md5Markers::Needed => {
            let mut chain = chain;
            let found = deepest_md5(signer, &chain, &sorted.md5_markers);
            chain.truncate(found.map_or(0, |(blocks, _)| blocks));
            (
                chain,
                Some(found.map_or_else(Md5State::start, |(_, state)| state)),
            )
        }
    };
    let mut point = ResumePoint::fresh();
    if let Some((cp, _)) = chain.last() {
        point.checkpoint = *cp;
        point.offset = cp.offset;
    }
    point.ids = chain.into_iter().map(|(_, raw)| raw).collect();
    point.blocks = point.ids.len() as u32;
    point.md5 = md5;
    point
}

/// Uncommitted IDs sorted by the block index they claim: data blocks of the
/// plan's size, and MD5 markers (when asked for), at most `MAX_BRANCHES` of
/// each per index.
struct Sorted {
    candidates: Vec<Vec<[u8; BLOCK_ID_LEN]>>,
    md5_markers: Vec<Vec<[u8; BLOCK_ID_LEN]>>,
}

impl Sorted {
    fn of<'a>(
        plan: &BlockPlan,
        uncommitted: impl IntoIterator<Item = (&'a [u8], u64)>,
        markers: Md5Markers,
    ) -> Self {
        let reusable = plan.block_count().saturating_sub(1);
        let mut candidates: Vec<Vec<[u8; BLOCK_ID_LEN]>> =
            vec![Vec::new(); reusable.min(u32::MAX as u64) as usize];
        let mut md5_markers: Vec<Vec<[u8; BLOCK_ID_LEN]>> = match markers {
            Md5Markers::Needed => vec![Vec::new(); candidates.len()],
            Md5Markers::Ignored => Vec::new(),
        };
        for (raw, size) in uncommitted {
            let Some(index) = IdSigner::claimed_index(raw) else {
                continue;
            };
            if size == MD5_MARKER_LEN && plan.block_len(u64::from(index)) != MD5_MARKER_LEN {
                if let (Some(slot), Ok(raw)) = (md5_markers.get_mut(index as usize), raw.try_into())
                    && slot.len() < MAX_BRANCHES
                {
                    slot.push(raw);
                }
                continue;
            }
            let (Some(slot), Ok(raw)) = (candidates.get_mut(index as usize), raw.try_into()) else {
                continue;
            };
            // Azure keeps one block per ID: a repeated ID is the same block.
            if size == plan.block_len(u64::from(index)) && !slot.contains(&raw) {
                slot.push(raw);
            }
        }
        Self {
            candidates,
            md5_markers,
        }
    }
}

/// A state reachable at one depth of the chain: the checkpoint after the
/// block, the ID that reached it and its parent's position on the level before.
type Reached = (Checkpoint, [u8; BLOCK_ID_LEN], usize);

/// The longest chain of `candidates` (by block index) each verifying as the
/// continuation of the one before, with the checkpoint after each block.
fn longest_chain(
    plan: &BlockPlan,
    signer: &IdSigner,
    candidates: &[Vec<[u8; BLOCK_ID_LEN]>],
) -> Vec<(Checkpoint, [u8; BLOCK_ID_LEN])> {
    // Level by level: the states reachable at each depth.
    let mut levels: Vec<Vec<Reached>> = Vec::new();
    let start = [(Checkpoint::start(), [0u8; BLOCK_ID_LEN], 0)];
    for (index, level) in candidates.iter().enumerate() {
        let (_, end) = plan.block_range(index as u64);
        let before = levels.last().map_or(&start[..], Vec::as_slice);
        let next = next_level(signer, before, level, end);
        if next.is_empty() {
            break;
        }
        levels.push(next);
    }
    // Walk back from the deepest level's first state.
    let mut chain: Vec<(Checkpoint, [u8; BLOCK_ID_LEN])> = Vec::with_capacity(levels.len());
    let mut at = 0;
    for level in levels.iter().rev() {
        let Some((cp, raw, parent)) = level.get(at) else {
            break;
        };
        chain.push((*cp, *raw));
        at = *parent;
    }
    chain.reverse();
    chain
}

/// The states one level of IDs reaches from the states `before` it: each ID
/// that verifies after one of them and ends at `end`, once per state, at most
/// `MAX_BRANCHES`.
fn next_level(
    signer: &IdSigner,
    before: &[Reached],
    level: &[[u8; BLOCK_ID_LEN]],
    end: u64,
) -> Vec<Reached> {
    let mut next: Vec<Reached> = Vec::new();
    for raw in level {
        if next.len() >= MAX_BRANCHES {
            break;
        }
        let continued = before
            .iter()
            .enumerate()
            .find_map(
                |(parent, (follows, ..))| match signer.decode(raw, follows) {
                    Some(BlockId {
                        state: BlockState::After(cp),
                        ..
                    }) if cp.offset == end => Some((cp, parent)),
                    _ => None,
                },
            );
        if let Some((cp, parent)) = continued
            && !next.iter().any(|(seen, ..)| *seen == cp)
        {
            next.push((cp, *raw, parent));
        }
    }
    next
}

/// The longest prefix of `chain` (its length) whose last block has an MD5
/// marker that verifies after that block's checkpoint, with the MD5 state there.
fn deepest_md5(
    signer: &IdSigner,
    chain: &[(Checkpoint, [u8; BLOCK_ID_LEN])],
    markers: &[Vec<[u8; BLOCK_ID_LEN]>],
) -> Option<(usize, Md5State)> {
    chain.iter().enumerate().rev().find_map(|(index, (cp, _))| {
        markers
            .get(index)?
            .iter()
            .find_map(|raw| match signer.decode(raw, cp) {
                Some(BlockId {
                    index: i,
                    state: BlockState::Md5(state),
                    ..
                }) if i as usize == index && state.offset == cp.offset => Some((index + 1, state)),
                _ => None,
            })
    })
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
        staged_version(size, 0)
    }

    /// Block `i` of version `v` is filled with `i`, except block 0, filled with
    /// `v`: versions differ only in their first block.
    fn staged_version(size: u64, version: u8) -> (BlockPlan, IdSigner, Vec<(Vec<u8>, u64)>) {
        let plan = BlockPlan::new(size, 5 * MIB).expect("plan");
        let signer = signer_for("owner-a", size, plan.block_size);
        let mut h = Sha256::new();
        let mut ids = Vec::new();
        for i in 0..plan.block_count() {
            let len = plan.block_len(i);
            let follows = Checkpoint::of(&h).expect("boundary");
            let fill = if i == 0 { version } else { i as u8 };
            h.update(vec![fill; len as usize]);
            let state = match Checkpoint::of(&h) {
                Some(cp) if i + 1 < plan.block_count() => BlockState::After(cp),
                _ => BlockState::Final {
                    sha256: h.clone().finalize().into(),
                    size,
                },
            };
            let id = BlockId {
                index: i as u32,
                follows,
                state,
            };
            ids.push((signer.encode(&id).to_vec(), len));
        }
        (plan, signer, ids)
    }

    fn run(plan: &BlockPlan, signer: &IdSigner, ids: &[(Vec<u8>, u64)]) -> ResumePoint {
        find_resume_point(
            plan,
            signer,
            ids.iter().map(|(b, s)| (b.as_slice(), *s)),
            Md5Markers::Ignored,
        )
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

    /// The checkpoint after `blocks` blocks of `version` (as `staged_version`).
    fn prefix_state(plan: &BlockPlan, version: u8, blocks: u64) -> Checkpoint {
        let mut h = Sha256::new();
        for i in 0..blocks {
            let fill = if i == 0 { version } else { i as u8 };
            h.update(vec![fill; plan.block_len(i) as usize]);
        }
        Checkpoint::of(&h).expect("boundary")
    }

    #[test]
    fn two_versions_of_a_file_are_never_mixed() {
        // Version 1 staged three blocks; version 2 (another first block) one.
        // Whatever order Get Block List returns them in, the resume point is
        // one version's own chain, and its checkpoint describes exactly the
        // bytes of the IDs it lists.
        let size = 5 * MIB * 5;
        let (plan, signer, v1) = staged_version(size, 1);
        let (_, _, v2) = staged_version(size, 2);
        let mut list: Vec<(Vec<u8>, u64)> = v1[..3].to_vec();
        list.push(v2[0].clone());
        for rotation in 0..list.len() {
            for reversed in [false, true] {
                let mut order = list.clone();
                order.rotate_left(rotation);
                if reversed {
                    order.reverse();
                }
                let p = run(&plan, &signer, &order);
                assert_eq!(p.blocks, 3, "the longest chain is version 1's");
                let ids: Vec<Vec<u8>> = p.ids.iter().map(|id| id.to_vec()).collect();
                let expect: Vec<Vec<u8>> = v1[..3].iter().map(|(id, _)| id.clone()).collect();
                assert_eq!(ids, expect);
                assert_eq!(p.checkpoint, prefix_state(&plan, 1, 3));
            }
        }
        // Version 2's block 1 joins its own chain only: then both are two or
        // more long, and whichever is chosen is consistent.
        let (_, _, v2_full) = staged_version(size, 2);
        let mut list = vec![
            v1[0].clone(),
            v2_full[0].clone(),
            v2_full[1].clone(),
            v1[1].clone(),
        ];
        for rotation in 0..list.len() {
            list.rotate_left(1);
            let p = run(&plan, &signer, &list);
            assert_eq!(p.blocks, 2, "rotation {rotation}");
            let version = if p.ids[0].to_vec() == v1[0].0 { 1 } else { 2 };
            let own = if version == 1 { &v1 } else { &v2_full };
            assert_eq!(p.ids[1].to_vec(), own[1].0, "rotation {rotation}");
            assert_eq!(p.checkpoint, prefix_state(&plan, version, 2));
        }
    }

    #[test]
    fn many_versions_are_bounded_and_still_consistent() {
        // A hostile owner stages 40 versions of block 0 and one chain of three
        // after the first: at most MAX_BRANCHES are followed, and whatever is
        // found is a consistent chain.
        let size = 5 * MIB * 5;
        let (plan, signer, first) = staged_version(size, 0);
        let mut list: Vec<(Vec<u8>, u64)> = (1..=40u8)
            .map(|v| staged_version(size, v).2[0].clone())
            .collect();
        list.extend(first[..3].iter().cloned());
        let p = run(&plan, &signer, &list);
        assert!(p.blocks <= 1, "version 0's block 0 comes after the bound");
        if p.blocks == 1 {
            let version = (1..=40u8)
                .find(|v| staged_version(size, *v).2[0].0 == p.ids[0].to_vec())
                .expect("one of the versions");
            assert_eq!(p.checkpoint, prefix_state(&plan, version, 1));
        }
        // With version 0 listed first, its chain is found.
        list.rotate_right(3);
        assert_eq!(run(&plan, &signer, &list).blocks, 3);
    }

    /// The marker a `--put-md5` upload stages after block `index` of `version`.
    fn md5_marker(plan: &BlockPlan, signer: &IdSigner, version: u8, index: u64) -> (Vec<u8>, u64) {
        use md5::{Digest as _, Md5};
        let mut h = Md5::new();
        for i in 0..=index {
            let fill = if i == 0 { version } else { i as u8 };
            h.update(vec![fill; plan.block_len(i) as usize]);
        }
        let id = BlockId {
            index: index as u32,
            follows: prefix_state(plan, version, index + 1),
            state: BlockState::Md5(Md5State::of(&h).expect("boundary")),
        };
        (signer.encode(&id).to_vec(), MD5_MARKER_LEN)
    }

    fn run_md5(plan: &BlockPlan, signer: &IdSigner, ids: &[(Vec<u8>, u64)]) -> ResumePoint {
        find_resume_point(
            plan,
            signer,
            ids.iter().map(|(b, s)| (b.as_slice(), *s)),
            Md5Markers::Needed,
        )
    }

    #[test]
    fn md5_resumes_only_where_a_marker_continues_the_chain() {
        use md5::{Digest as _, Md5};
        let size = 5 * MIB * 5;
        let (plan, signer, v1) = staged_version(size, 1);
        // Three data blocks; a marker only after block 1 (killed before the
        // marker of block 2 landed): resume after two blocks, with that state.
        let mut list: Vec<(Vec<u8>, u64)> = v1[..3].to_vec();
        list.push(md5_marker(&plan, &signer, 1, 1));
        let p = run_md5(&plan, &signer, &list);
        assert_eq!(p.blocks, 2);
        assert_eq!(p.checkpoint, prefix_state(&plan, 1, 2));
        let mut h = Md5::new();
        h.update(vec![1u8; 5 * MIB as usize]);
        h.update(vec![1u8; 5 * MIB as usize]);
        assert_eq!(p.md5, Md5State::of(&h));
        // Markers are not data: without --put-md5 the chain is all three.
        assert_eq!(run(&plan, &signer, &list).blocks, 3);
        assert_eq!(run(&plan, &signer, &list).md5, None);
        // Another version's marker at the same index does not continue this
        // chain; without a marker of its own the resume starts at zero.
        let mut list: Vec<(Vec<u8>, u64)> = v1[..3].to_vec();
        list.push(md5_marker(&plan, &signer, 2, 1));
        let p = run_md5(&plan, &signer, &list);
        assert_eq!(p.blocks, 0);
        assert_eq!(p.offset, 0);
        assert_eq!(p.md5, Some(Md5State::start()));
        // A marker under another key or with a flipped bit is ignored.
        let mut damaged = md5_marker(&plan, &signer, 1, 2);
        damaged.0[10] ^= 1;
        let other = signer_for("owner-b", size, plan.block_size);
        let mut list: Vec<(Vec<u8>, u64)> = v1[..3].to_vec();
        list.push(damaged);
        list.push(md5_marker(&plan, &other, 1, 2));
        list.push(md5_marker(&plan, &signer, 1, 0));
        let p = run_md5(&plan, &signer, &list);
        assert_eq!(p.blocks, 1);
    }
}
