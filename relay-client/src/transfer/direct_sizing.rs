//! How direct mode sizes its uploads from the path to storage, as AzCopy would
//! on a slow path. Pure: the measured round trip comes in, the choice goes out.
//!
//! Near storage (the relay's region, a fast office link) a few connections
//! carrying large blocks fill the path, and fewer, larger requests cost less:
//! 16 MiB blocks, 8 in flight per file. Far from it we do what AzCopy does by
//! default: 8 MiB blocks (a retry resends less, a file's tail finishes sooner,
//! and a file splits into more requests that can be in flight at once). How
//! many depends on the TCP congestion control the connections get (the
//! system's; direct mode does not choose one):
//!
//! - a loss-based one (CUBIC, Reno; Windows' and macOS' default, and what we
//!   assume when we cannot tell) makes each connection slow on a far, lossy
//!   path: its rate is about MSS / (RTT x sqrt(loss)) (Mathis et al.), so only
//!   more connections carry more: 16 in flight up to 60 ms, 32 beyond;
//! - BBR is not held back by random loss, each connection can fill the path
//!   by itself, and more of them only add slow starts and queue overflow: 8
//!   (docs/bench/direct-honest/).
//!
//! Blocks never go below 8 MiB here, above Azure's 4 MiB high-throughput
//! threshold. What the user gives (`--block-size`, `--connections`) wins.
//!
//! `download --direct` is sized from the same path (`ranges`): its ranged
//! reads travel the same kind of TCP connections, one request each. But on
//! the way down storage sends, and its congestion control is storage's, not
//! this machine's: unknown, so taken as loss-based (Azure Storage's front ends
//! are Windows servers, CUBIC by default), whatever this system's is. A range
//! is at most 4 MiB (the most storage checksums).

use std::time::Duration;

use relay_proto::limits::{DEFAULT_BLOCK_SIZE, MIB};

/// Round trips below this are "near": the defaults that suit storage in reach.
pub const NEAR_RTT: Duration = Duration::from_millis(20);
/// Round trips from this on get the most connections.
pub const FAR_RTT: Duration = Duration::from_millis(60);
/// AzCopy's default block size, and ours on a far path.
pub const FAR_BLOCK_SIZE: u64 = 8 * MIB;

/// What direct mode sends with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    pub block_size: u64,
    /// Put Block requests in flight per file.
    pub connections: usize,
    /// One line for the user: what was measured and what it led to.
    pub why: String,
}

/// What direct mode's requests carry: a file's blocks up (upload, watch), or
/// its ranges down (download).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Requests {
    #[default]
    Blocks,
    Ranges,
}

/// What the sizing is chosen from.
#[derive(Debug, Clone, Copy)]
pub struct Path<'a> {
    /// The storage round trip (`None`: not measured).
    pub rtt: Option<Duration>,
    /// The TCP congestion control new connections get (`None`: unknown).
    pub tcp_congestion: Option<&'a str>,
}

/// The sizing for what the requests carry: blocks (`choose`) or ranges of
/// storage's largest checked size (`ranges`).
pub fn sized(
    requests: Requests,
    path: Path<'_>,
    user_block_size: Option<u64>,
    user_connections: Option<usize>,
    memory_budget: u64,
) -> Sizing {
    match requests {
        Requests::Blocks => choose(path, user_block_size, user_connections, memory_budget),
        Requests::Ranges => ranges(
            path,
            relay_storage::read::MAX_CHECKED_RANGE,
            user_connections,
            memory_budget,
        ),
    }
}

/// The sizing for `path`, with the user's own choices first, and never more
/// block buffers in flight than `memory_budget` holds.
pub fn choose(
    path: Path<'_>,
    user_block_size: Option<u64>,
    user_connections: Option<usize>,
    memory_budget: u64,
) -> Sizing {
    let (block_size, connections, kind) = by_path(path);
    let rtt = path.rtt;
    let block_size = user_block_size.unwrap_or(block_size);
    let fits = usize::try_from(memory_budget / block_size.max(1))
        .unwrap_or(usize::MAX)
        .max(1);
    let connections = match user_connections {
        Some(n) => n.max(1),
        None => connections.min(fits),
    };
    let rtt_text = rtt.map_or("not measured".to_string(), |r| {
        format!("{} ms", r.as_millis())
    });
    let why = format!(
        "storage round trip {rtt_text}, TCP {} ({kind}): {} MiB blocks{}, {connections} requests in flight per file{}",
        path.tcp_congestion.unwrap_or("congestion control unknown"),
        block_size / MIB,
        if user_block_size.is_some() {
            " (--block-size)"
        } else {
            ""
        },
        if user_connections.is_some() {
            " (--connections)"
        } else {
            ""
        },
    );
    Sizing {
        block_size,
        connections,
        why,
    }
}

/// The block size, the requests in flight per file and the kind of path.
fn by_path(path: Path<'_>) -> (u64, usize, &'static str) {
    let bbr = path.tcp_congestion == Some("bbr");
    match path.rtt {
        None => (DEFAULT_BLOCK_SIZE, 8, "unmeasured"),
        Some(r) if r < NEAR_RTT => (DEFAULT_BLOCK_SIZE, 8, "near"),
        Some(_) if bbr => (FAR_BLOCK_SIZE, 8, "far, bbr"),
        Some(r) if r >= FAR_RTT => (FAR_BLOCK_SIZE, 32, "far"),
        Some(_) => (FAR_BLOCK_SIZE, 16, "far"),
    }
}

/// `download --direct`'s sizing for `path`: ranges of `range_bytes`, as many
/// in flight per file as an upload's requests on a path of this round trip
/// whose sender's congestion control is unknown (storage sends), or the
/// user's `--connections`, and never more ranges than `memory_budget` holds.
/// `block_size` is the range's size.
pub fn ranges(
    path: Path<'_>,
    range_bytes: u64,
    user_connections: Option<usize>,
    memory_budget: u64,
) -> Sizing {
    let senders = Path {
        tcp_congestion: None,
        ..path
    };
    let (_, connections, kind) = by_path(senders);
    let fits = usize::try_from(memory_budget / range_bytes.max(1))
        .unwrap_or(usize::MAX)
        .max(1);
    let connections = user_connections.unwrap_or(connections).clamp(1, fits);
    let rtt_text = path.rtt.map_or("not measured".to_string(), |r| {
        format!("{} ms", r.as_millis())
    });
    let why = format!(
        "storage round trip {rtt_text} ({kind}; storage sends, its TCP taken as loss-based): \
         {} MiB ranges, {connections} in flight per file{}",
        range_bytes / MIB,
        if user_connections.is_some() {
            " (--connections)"
        } else {
            ""
        },
    );
    Sizing {
        block_size: range_bytes,
        connections,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: u64 = 512 * MIB;

    fn ms(n: u64) -> Path<'static> {
        Path {
            rtt: Some(Duration::from_millis(n)),
            tcp_congestion: Some("cubic"),
        }
    }

    fn bbr(n: u64) -> Path<'static> {
        Path {
            tcp_congestion: Some("bbr"),
            ..ms(n)
        }
    }

    #[test]
    fn near_storage_keeps_large_blocks_and_few_connections() {
        let s = choose(ms(2), None, None, BUDGET);
        assert_eq!((s.block_size, s.connections), (DEFAULT_BLOCK_SIZE, 8));
        let unmeasured = Path {
            rtt: None,
            tcp_congestion: None,
        };
        let s = choose(unmeasured, None, None, BUDGET);
        assert_eq!((s.block_size, s.connections), (DEFAULT_BLOCK_SIZE, 8));
        assert!(s.why.contains("not measured"), "{}", s.why);
        let s = choose(bbr(2), None, None, BUDGET);
        assert_eq!((s.block_size, s.connections), (DEFAULT_BLOCK_SIZE, 8));
    }

    #[test]
    fn a_far_path_gets_azcopy_blocks_and_more_connections() {
        let s = choose(ms(20), None, None, BUDGET);
        assert_eq!((s.block_size, s.connections), (8 * MIB, 16));
        for rtt in [60, 100, 200, 600] {
            let s = choose(ms(rtt), None, None, BUDGET);
            assert_eq!((s.block_size, s.connections), (8 * MIB, 32), "{rtt} ms");
            assert!(s.why.contains(&format!("{rtt} ms")), "{}", s.why);
        }
        // Unknown controllers are taken as loss-based (Windows, macOS: CUBIC).
        let unknown = Path {
            tcp_congestion: None,
            ..ms(200)
        };
        assert_eq!(choose(unknown, None, None, BUDGET).connections, 32);
    }

    #[test]
    fn bbr_far_away_gets_azcopy_blocks_but_no_more_connections() {
        for rtt in [20, 100, 200] {
            let s = choose(bbr(rtt), None, None, BUDGET);
            assert_eq!((s.block_size, s.connections), (8 * MIB, 8), "{rtt} ms");
            assert!(s.why.contains("bbr"), "{}", s.why);
        }
    }

    #[test]
    fn blocks_stay_above_the_high_throughput_threshold() {
        for rtt in [0, 10, 20, 59, 60, 1000] {
            let s = choose(ms(rtt), None, None, BUDGET);
            assert!(
                s.block_size > relay_proto::limits::HIGH_THROUGHPUT_THRESHOLD,
                "{rtt} ms: {}",
                s.block_size
            );
        }
    }

    #[test]
    fn the_users_choices_win() {
        let s = choose(ms(200), Some(32 * MIB), None, BUDGET);
        assert_eq!((s.block_size, s.connections), (32 * MIB, 16));
        assert!(s.why.contains("--block-size"));
        let s = choose(ms(200), None, Some(4), BUDGET);
        assert_eq!((s.block_size, s.connections), (8 * MIB, 4));
        assert!(s.why.contains("--connections"));
        let s = choose(ms(1), Some(8 * MIB), Some(64), BUDGET);
        assert_eq!((s.block_size, s.connections), (8 * MIB, 64));
    }

    #[test]
    fn a_download_keeps_as_many_ranges_in_flight_as_an_upload_to_a_loss_based_sender() {
        const RANGE: u64 = 4 * MIB;
        for rtt in [0, 2, 20, 59, 60, 100, 200, 600] {
            let up = choose(ms(rtt), None, None, BUDGET);
            // Whatever this machine's controller: storage is the sender.
            for path in [ms(rtt), bbr(rtt)] {
                let down = ranges(path, RANGE, None, BUDGET);
                assert_eq!(down.connections, up.connections, "{rtt} ms, {path:?}");
                assert_eq!(down.block_size, RANGE);
                assert!(down.why.contains("4 MiB ranges"), "{}", down.why);
                assert!(down.why.contains(&format!("{rtt} ms")), "{}", down.why);
            }
        }
        // The far path of the download card: 32 flows, not 4.
        assert_eq!(ranges(ms(100), RANGE, None, BUDGET).connections, 32);
        assert_eq!(ranges(bbr(100), RANGE, None, BUDGET).connections, 32);
        let unmeasured = Path {
            rtt: None,
            tcp_congestion: None,
        };
        assert_eq!(ranges(unmeasured, RANGE, None, BUDGET).connections, 8);
    }

    #[test]
    fn a_downloads_ranges_fit_the_budget_and_the_users_choice_wins() {
        const RANGE: u64 = 4 * MIB;
        assert_eq!(ranges(ms(200), RANGE, None, 64 * MIB).connections, 16);
        assert_eq!(ranges(ms(200), RANGE, None, MIB).connections, 1);
        let s = ranges(ms(200), RANGE, Some(3), BUDGET);
        assert_eq!(s.connections, 3);
        assert!(s.why.contains("--connections"), "{}", s.why);
        assert_eq!(ranges(ms(2), RANGE, Some(100), 64 * MIB).connections, 16);
    }

    #[test]
    fn connections_never_want_more_buffers_than_the_budget() {
        let s = choose(ms(200), None, None, 64 * MIB);
        assert_eq!(s.connections, 8);
        let s = choose(ms(200), None, None, MIB);
        assert_eq!(s.connections, 1);
    }
}
