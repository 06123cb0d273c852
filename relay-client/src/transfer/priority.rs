//! Which file's bytes a connection sends first (quinn sends a higher
//! priority's buffered data first and round-robins equal ones).
//!
//! `upload` sends files in the order their streams opened (in order,
//! each small file is received whole early and published while the next ones
//! travel). A watch cannot keep that order: a file that appears while a 1 GiB
//! file is being sent would wait for all of it (docs/bench/watch/). So a
//! watch puts every file that fits in one block ahead of bigger ones, each
//! group in the order opened.

use relay_proto::limits::DEFAULT_BLOCK_SIZE;

/// How a run orders its files on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// In the order their streams opened (`upload`).
    #[default]
    Opened,
    /// Files of one block before bigger ones, each in the order opened (`watch`).
    SmallFirst,
}

/// Streams beyond this index share the lowest priority of their group
/// (round-robin): a billion files on one connection.
const GROUP: u64 = 1 << 30;

/// The quinn priority of stream `index` carrying a file of `size` bytes cut
/// into blocks of `block_size` (the default if not given).
pub fn stream_priority(order: Order, index: u64, size: u64, block_size: Option<u64>) -> i32 {
    // Within a group, earlier streams first: -index, in (-2^30, 0].
    let within = -(i32::try_from(index.min(GROUP - 1)).unwrap_or(i32::MAX));
    let big = size > block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
    match order {
        Order::SmallFirst if big => within - (GROUP as i32),
        Order::Opened | Order::SmallFirst => within,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn upload_keeps_the_order_streams_opened() {
        let p = |i, size| stream_priority(Order::Opened, i, size, None);
        assert!(p(0, 1024 * MIB) > p(1, 1));
        assert!(p(5, 1) > p(6, 1));
    }

    #[test]
    fn watch_sends_one_block_files_before_bigger_ones() {
        let p = |i, size| stream_priority(Order::SmallFirst, i, size, None);
        // A small file opened after a big one goes first...
        assert!(p(1_000_000, 256 * 1024) > p(0, 1024 * MIB));
        // ...one block exactly is small; one byte more is big.
        assert!(p(9, 16 * MIB) > p(0, 16 * MIB + 1));
        // Each group keeps its opening order.
        assert!(p(3, 1) > p(4, 1));
        assert!(p(3, 100 * MIB) > p(4, 100 * MIB));
        // --block-size moves the line.
        let q = |i, size| stream_priority(Order::SmallFirst, i, size, Some(64 * MIB));
        assert!(q(9, 40 * MIB) > q(0, 100 * MIB));
    }

    #[test]
    fn indexes_past_the_group_share_its_last_priority() {
        let p = |i, size| stream_priority(Order::SmallFirst, i, size, None);
        assert_eq!(p(GROUP, 1), p(u64::MAX, 1));
        assert!(p(u64::MAX, 1) > p(0, 1024 * MIB));
        assert_eq!(p(u64::MAX, 1024 * MIB), i32::MIN + 1);
    }
}
