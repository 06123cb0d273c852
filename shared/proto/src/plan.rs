//! Block planning: how a file of a given size is cut into staged blocks.
//!
//! Block size = max(configured, ceil(size / 50,000)) rounded up to 1 MiB, at most
//! 4000 MiB, never below 5 MiB: so every block but the last is above Azure's 4 MiB
//! high-throughput threshold and any blob up to 190.7 TiB fits in 50,000 blocks.
//!
//! A file of more than one block ends in a short block: the last block-sized
//! stretch is cut where a little more than 4 MiB remain (`TAIL_BLOCK` plus at
//! most `CUT_ALIGN`). Every block is staged once its last byte is in, but the
//! last one only after the file's last byte, so its Put Block is time the
//! upload waits for, and a short one is waited for least (docs/TRANSPORT.md).
//! The block before the tail is
//! staged while the tail's bytes arrive. A file of one block is not cut: it is
//! one Put Blob.
//!
//! The cut never puts a block at or below the 4 MiB threshold: the tail itself
//! is above it, and a stretch too short to leave more than 4 MiB before the
//! tail is not cut at all. Only a file's last block, when the file simply ends
//! there, can be 4 MiB or less.

use crate::limits::{
    HIGH_THROUGHPUT_THRESHOLD, KIB, MAX_BLOB_SIZE, MAX_BLOCK_SIZE, MAX_BLOCKS, MIB, MIN_BLOCK_SIZE,
};

/// A cut tail is longer than this (Azure's high-throughput threshold), by at
/// most `CUT_ALIGN`.
pub const TAIL_BLOCK: u64 = HIGH_THROUGHPUT_THRESHOLD;

/// Cuts fall on multiples of this: a whole number of SHA-256 (and MD5) input
/// blocks, so a block boundary needs no partial hash buffer, and small enough
/// that the tail stays within 64 KiB of the threshold.
pub const CUT_ALIGN: u64 = 64 * KIB;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPlan {
    pub size: u64,
    pub block_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("file of {size} bytes exceeds the largest block blob ({MAX_BLOB_SIZE} bytes)")]
    TooLarge { size: u64 },
    #[error("block size {0} bytes must be between 5 MiB and 4000 MiB")]
    BadBlockSize(u64),
}

impl BlockPlan {
    pub fn new(size: u64, configured_block_size: u64) -> Result<Self, PlanError> {
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&configured_block_size) {
            return Err(PlanError::BadBlockSize(configured_block_size));
        }
        if size > MAX_BLOB_SIZE {
            return Err(PlanError::TooLarge { size });
        }
        let needed = size.div_ceil(MAX_BLOCKS);
        let block_size = configured_block_size.max(needed).div_ceil(MIB) * MIB;
        debug_assert!(block_size <= MAX_BLOCK_SIZE);
        Ok(Self { size, block_size })
    }

    /// Number of blocks; a zero-byte file has none (it commits an empty list).
    pub fn block_count(&self) -> u64 {
        self.full_blocks() + u64::from(self.tail_cut().is_some())
    }

    /// Byte range `[start, end)` of block `index`.
    pub fn block_range(&self, index: u64) -> (u64, u64) {
        let full = self.full_blocks();
        match self.tail_cut() {
            Some(cut) if index + 1 == full => ((full - 1) * self.block_size, cut),
            Some(cut) if index == full => (cut, self.size),
            _ => {
                let start = index * self.block_size;
                (start, (start + self.block_size).min(self.size))
            }
        }
    }

    /// Blocks of `block_size` (the last possibly shorter) before the tail cut.
    fn full_blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size)
    }

    /// Where the tail block starts, if the last block-sized stretch is cut:
    /// only for files of two blocks or more, never past Azure's 50,000 blocks,
    /// and only when both pieces stay above `TAIL_BLOCK`.
    fn tail_cut(&self) -> Option<u64> {
        let full = self.full_blocks();
        if !(2..MAX_BLOCKS).contains(&full) {
            return None;
        }
        let last_start = (full - 1) * self.block_size;
        // The highest aligned cut that leaves more than TAIL_BLOCK after it:
        // the tail is TAIL_BLOCK + 1 ..= TAIL_BLOCK + CUT_ALIGN bytes long.
        // (Checked: a plan built by hand, as tests do, may have small blocks.)
        let cut = self.size.checked_sub(TAIL_BLOCK + 1)? / CUT_ALIGN * CUT_ALIGN;
        (cut.checked_sub(last_start)? > TAIL_BLOCK).then_some(cut)
    }

    /// Length of block `index`.
    pub fn block_len(&self, index: u64) -> u64 {
        let (s, e) = self.block_range(index);
        e - s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{DEFAULT_BLOCK_SIZE, HIGH_THROUGHPUT_THRESHOLD, TIB};

    fn plan(size: u64) -> BlockPlan {
        BlockPlan::new(size, DEFAULT_BLOCK_SIZE).expect("valid plan")
    }

    #[test]
    fn zero_bytes_has_no_blocks() {
        let p = plan(0);
        assert_eq!(p.block_count(), 0);
        assert_eq!(p.block_size, DEFAULT_BLOCK_SIZE);
    }

    /// Every block in order, covering the file without gap or overlap.
    fn ranges(p: &BlockPlan) -> Vec<(u64, u64)> {
        let ranges: Vec<_> = (0..p.block_count()).map(|i| p.block_range(i)).collect();
        let mut at = 0;
        for &(start, end) in &ranges {
            assert_eq!(start, at, "contiguous");
            assert!(end > start, "no empty block");
            assert_eq!(start % 64, 0, "on a SHA-256 block boundary");
            at = end;
        }
        assert_eq!(at, p.size, "the whole file");
        ranges
    }

    #[test]
    fn the_last_block_is_short_so_little_is_left_to_stage_after_the_last_byte() {
        let b = DEFAULT_BLOCK_SIZE;
        // 256 MiB: 15 full blocks, then 12 MiB less 64 KiB and a tail of 4 MiB
        // and 64 KiB.
        let p = plan(16 * b);
        let r = ranges(&p);
        assert_eq!(r.len(), 17);
        assert!(r[..15].iter().all(|(s, e)| e - s == b));
        assert_eq!(p.block_len(15), b - TAIL_BLOCK - CUT_ALIGN);
        assert_eq!(p.block_len(16), TAIL_BLOCK + CUT_ALIGN);
        // An odd size: the tail is above 4 MiB by at most 64 KiB, cut on 64 KiB.
        let p = plan(3 * b + 10 * MIB + 12_345);
        let r = ranges(&p);
        let tail = r[r.len() - 1].1 - r[r.len() - 1].0;
        assert!(
            (TAIL_BLOCK + 1..=TAIL_BLOCK + CUT_ALIGN).contains(&tail),
            "{tail}"
        );
        assert_eq!(r[r.len() - 1].0 % CUT_ALIGN, 0);
        // A last stretch too short to leave more than 4 MiB on both sides of
        // a cut is not cut: it is the file's last block as it is.
        for last in [1, TAIL_BLOCK, 2 * TAIL_BLOCK, 2 * TAIL_BLOCK + CUT_ALIGN] {
            let p = plan(2 * b + last);
            assert_eq!(ranges(&p).len(), 3, "last stretch {last}");
        }
        // One byte more and it is cut into 4 MiB + 64 KiB and 4 MiB + 1 byte.
        let p = plan(2 * b + 2 * TAIL_BLOCK + CUT_ALIGN + 1);
        assert_eq!(ranges(&p).len(), 4);
        assert_eq!(p.block_len(2), TAIL_BLOCK + CUT_ALIGN);
        assert_eq!(p.block_len(3), TAIL_BLOCK + 1);
        // One block stays one block: a single Put Blob.
        for size in [1, TAIL_BLOCK + 2 * MIB, b] {
            assert_eq!(ranges(&plan(size)).len(), 1, "{size}");
        }
        // The two examples of a short last pair that the cut used to make:
        // 40 MiB was 16 + 16 + 4 + 4 MiB, 22 MiB was 16 + 2 + 4 MiB.
        let sizes =
            |size: u64| -> Vec<u64> { ranges(&plan(size)).iter().map(|(s, e)| e - s).collect() };
        assert_eq!(sizes(40 * MIB), [b, b, 8 * MIB]);
        assert_eq!(sizes(22 * MIB), [b, 6 * MIB]);
    }

    /// The threshold rule for every size class: for block sizes from the
    /// smallest to the default and beyond, and file sizes on and around every
    /// boundary the plan has (whole blocks, the tail, the cut's minimum
    /// stretch, the alignment), no block before a file's last is 4 MiB or less,
    /// and a cut tail is above 4 MiB by at most `CUT_ALIGN`.
    #[test]
    fn no_block_but_a_files_own_last_is_at_or_below_the_threshold() {
        let offsets = [
            0,
            1,
            63,
            64,
            CUT_ALIGN - 1,
            CUT_ALIGN,
            CUT_ALIGN + 1,
            MIB,
            TAIL_BLOCK - 1,
            TAIL_BLOCK,
            TAIL_BLOCK + 1,
            TAIL_BLOCK + CUT_ALIGN,
            TAIL_BLOCK + CUT_ALIGN + 1,
            2 * TAIL_BLOCK,
            2 * TAIL_BLOCK + CUT_ALIGN,
            2 * TAIL_BLOCK + CUT_ALIGN + 1,
            2 * TAIL_BLOCK + 2 * CUT_ALIGN,
            9 * MIB + 12_345,
        ];
        let mut checked = 0;
        for block_size in [5 * MIB, 8 * MIB, 9 * MIB, DEFAULT_BLOCK_SIZE, 100 * MIB] {
            for whole in 0..4u64 {
                for offset in offsets {
                    for sign in [-1i64, 1] {
                        let base = whole * block_size;
                        let size = if sign < 0 {
                            base.checked_sub(offset)
                        } else {
                            base.checked_add(offset)
                        };
                        let Some(size) = size.filter(|&s| s > 0) else {
                            continue;
                        };
                        let p = BlockPlan::new(size, block_size).expect("plan");
                        let r = ranges(&p);
                        let lens: Vec<u64> = r.iter().map(|(s, e)| e - s).collect();
                        let (last, before) = lens.split_last().expect("a block");
                        assert!(
                            before.iter().all(|&n| n > HIGH_THROUGHPUT_THRESHOLD),
                            "size {size} in {block_size}: {lens:?}"
                        );
                        let cut = p.block_count() > size.div_ceil(p.block_size);
                        if cut {
                            assert!(
                                (TAIL_BLOCK + 1..=TAIL_BLOCK + CUT_ALIGN).contains(last),
                                "size {size} in {block_size}: {lens:?}"
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 300, "{checked} sizes");
    }

    #[test]
    fn exactly_one_block_and_one_byte_more() {
        assert_eq!(plan(DEFAULT_BLOCK_SIZE).block_count(), 1);
        let p = plan(DEFAULT_BLOCK_SIZE + 1);
        assert_eq!(p.block_count(), 2);
        assert_eq!(p.block_len(1), 1);
        assert_eq!(
            p.block_range(1),
            (DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE + 1)
        );
    }

    #[test]
    fn grows_to_fit_50000_blocks() {
        // Just above 50,000 default blocks: the block size must grow (to 17 MiB).
        let size = MAX_BLOCKS * DEFAULT_BLOCK_SIZE + 1;
        let p = plan(size);
        assert_eq!(p.block_size, 17 * MIB);
        assert!(p.block_count() <= MAX_BLOCKS);
        // Exactly 50,000 default blocks: no growth needed.
        assert_eq!(
            plan(MAX_BLOCKS * DEFAULT_BLOCK_SIZE).block_size,
            DEFAULT_BLOCK_SIZE
        );
    }

    #[test]
    fn largest_blob_190_tib() {
        let p = plan(MAX_BLOB_SIZE);
        assert_eq!(p.block_size, MAX_BLOCK_SIZE);
        assert_eq!(
            p.block_count(),
            MAX_BLOCKS,
            "no tail cut past 50,000 blocks"
        );
        // One block short of the limit: the cut makes exactly 50,000.
        let p = BlockPlan::new((MAX_BLOCKS - 1) * MAX_BLOCK_SIZE, MAX_BLOCK_SIZE).expect("plan");
        assert_eq!(p.block_count(), MAX_BLOCKS);
        assert_eq!(p.block_len(MAX_BLOCKS - 1), TAIL_BLOCK + CUT_ALIGN);
        const { assert!(MAX_BLOB_SIZE > 190 * TIB) };
        let p = plan(190 * TIB);
        assert!(p.block_count() <= MAX_BLOCKS);
        assert_eq!(p.block_size % MIB, 0);
        assert_eq!(
            BlockPlan::new(MAX_BLOB_SIZE + 1, DEFAULT_BLOCK_SIZE),
            Err(PlanError::TooLarge {
                size: MAX_BLOB_SIZE + 1
            })
        );
    }

    #[test]
    fn blocks_are_large_and_64_byte_aligned() {
        for size in [1, 5 * MIB, 123_456_789_012, 40 * TIB + 7] {
            let p = plan(size);
            assert!(p.block_size > HIGH_THROUGHPUT_THRESHOLD);
            // Resumable hashing needs block boundaries on SHA-256 block boundaries.
            assert_eq!(p.block_size % 64, 0);
        }
    }

    #[test]
    fn rejects_small_configured_block_size() {
        assert!(BlockPlan::new(10, 4 * MIB).is_err());
        assert!(BlockPlan::new(10, 4001 * MIB).is_err());
        // Rounded up to whole MiB.
        assert_eq!(
            BlockPlan::new(10, 5 * MIB).map(|p| p.block_size),
            Ok(5 * MIB)
        );
    }
}
