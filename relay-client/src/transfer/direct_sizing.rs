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

/// What the sizing is chosen from.
#[derive(Debug, Clone, Copy)]
pub struct Path<'a> {
    /// The storage round trip (`None`: not measured).
    pub rtt: Option<Duration>,
    /// The TCP congestion control new connections get (`None`: unknown).
    pub tcp_congestion: Option<&'a str>,
}

/// The sizing for `path`, with the user's own choices first, and never more
/// block buffers in flight than `memory_budget` holds.
pub fn choose(
    path: Path<'_>,
    user_block_size: Option<u64>,
    user_connections: Option<usize>,
    memory_budget: u64,
) -> Sizing {
    let bbr = path.tcp_congestion == Some("bbr");
    let (block_size, connections, kind) = match path.rtt {
        None => (DEFAULT_BLOCK_SIZE, 8, "unmeasured"),
        Some(r) if r < NEAR_RTT => (DEFAULT_BLOCK_SIZE, 8, "near"),
        Some(_) if bbr => (FAR_BLOCK_SIZE, 8, "far, bbr"),
        Some(r) if r >= FAR_RTT => (FAR_BLOCK_SIZE, 32, "far"),
        Some(_) => (FAR_BLOCK_SIZE, 16, "far"),
    };
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
    fn connections_never_want_more_buffers_than_the_budget() {
        let s = choose(ms(200), None, None, 64 * MIB);
        assert_eq!(s.connections, 8);
        let s = choose(ms(200), None, None, MIB);
        assert_eq!(s.connections, 1);
    }
}
