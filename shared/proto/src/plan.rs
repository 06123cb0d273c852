//! Block planning: how a file of a given size is cut into staged blocks.
//!
//! Block size = max(configured, ceil(size / 50,000)) rounded up to 1 MiB, at most
//! 4000 MiB, never below 5 MiB: so every block but the last is above Azure's 4 MiB
//! high-throughput threshold and any blob up to 190.7 TiB fits in 50,000 blocks.

use crate::limits::{MAX_BLOB_SIZE, MAX_BLOCK_SIZE, MAX_BLOCKS, MIB, MIN_BLOCK_SIZE};

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
        self.size.div_ceil(self.block_size)
    }

    /// Byte range `[start, end)` of block `index`.
    pub fn block_range(&self, index: u64) -> (u64, u64) {
        let start = index * self.block_size;
        (start, (start + self.block_size).min(self.size))
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
        assert_eq!(p.block_count(), MAX_BLOCKS);
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
