//! Block planning: how a file of a given size is cut into staged blocks.
//!
//! Block size = max(configured, ceil(size / 50,000)) rounded up to 1 MiB, at most
//! 4000 MiB, never below 5 MiB: so every block but the last is above Azure's 4 MiB
//! high-throughput threshold and any blob up to 190.7 TiB fits in 50,000 blocks.
//!
//! A file of more than one block ends in a short block: the last block-sized
//! stretch is cut where 4–5 MiB remain (`TAIL_BLOCK`). Every block is staged
//! once its last byte is in, but the last one only after the file's last byte,
//! so its Put Block is time the upload waits for; at 16 MiB that was 75–118 ms
//! on a 200 Mbit/s path (docs/TRANSPORT.md), at 4 MiB a quarter of it. The
//! block before the tail is staged while the tail's bytes arrive. A file of
//! one block is not cut: it is one Put Blob.

use crate::limits::{MAX_BLOB_SIZE, MAX_BLOCK_SIZE, MAX_BLOCKS, MIB, MIN_BLOCK_SIZE};

/// The file's last block is this long, up to 1 MiB more (cuts fall on whole
/// MiB, which keeps every block boundary on a SHA-256 block boundary).
pub const TAIL_BLOCK: u64 = 4 * MIB;

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
    /// only for files of two blocks or more, when that stretch is longer than
    /// the tail plus 1 MiB, and never past Azure's 50,000 blocks.
    fn tail_cut(&self) -> Option<u64> {
        let full = self.full_blocks();
        if !(2..MAX_BLOCKS).contains(&full) {
            return None;
        }
        let last_start = (full - 1) * self.block_size;
        if self.size - last_start <= TAIL_BLOCK + MIB {
            return None;
        }
        // On a whole MiB, so the tail is TAIL_BLOCK .. TAIL_BLOCK + 1 MiB long
        // and the block before it at least 1 MiB.
        Some((self.size - TAIL_BLOCK) / MIB * MIB)
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
        // 256 MiB: 15 full blocks, then 12 MiB and the 4 MiB tail.
        let p = plan(16 * b);
        let r = ranges(&p);
        assert_eq!(r.len(), 17);
        assert!(r[..15].iter().all(|(s, e)| e - s == b));
        assert_eq!(p.block_len(15), b - TAIL_BLOCK);
        assert_eq!(p.block_len(16), TAIL_BLOCK);
        // An odd size: the tail is 4 MiB and up to 1 MiB more, cut on a whole MiB.
        let p = plan(3 * b + 10 * MIB + 12_345);
        let r = ranges(&p);
        let tail = r[r.len() - 1].1 - r[r.len() - 1].0;
        assert!((TAIL_BLOCK..TAIL_BLOCK + MIB).contains(&tail), "{tail}");
        assert_eq!(r[r.len() - 1].0 % MIB, 0);
        // A last stretch of 5 MiB or less is not cut (its block is short already).
        for last in [1, TAIL_BLOCK, TAIL_BLOCK + MIB] {
            let p = plan(2 * b + last);
            assert_eq!(ranges(&p).len(), 3, "last stretch {last}");
        }
        assert_eq!(ranges(&plan(2 * b + TAIL_BLOCK + MIB + 1)).len(), 4);
        // One block stays one block: a single Put Blob.
        for size in [1, TAIL_BLOCK + 2 * MIB, b] {
            assert_eq!(ranges(&plan(size)).len(), 1, "{size}");
        }
        // Every block but the tail and the one before it stays above Azure's
        // high-throughput threshold.
        let p = plan(40 * b + 7);
        let r = ranges(&p);
        assert!(
            r[..r.len() - 2]
                .iter()
                .all(|(s, e)| e - s > HIGH_THROUGHPUT_THRESHOLD)
        );
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
        assert_eq!(p.block_len(MAX_BLOCKS - 1), TAIL_BLOCK);
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
