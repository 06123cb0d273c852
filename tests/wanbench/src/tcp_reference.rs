//! Plain TCP beside a direct run: as many flows of the same congestion
//! control as the direct run had requests in flight, over the same link, right
//! after it. Their goodput is what TCP itself carries there, so a direct row
//! can be read against the path's TCP ceiling rather than against nothing
//! (a baseline capped by our own request deadlines would make a fast path
//! look slow).
//!
//! Two measures: `measure`, flows running for as long as the direct upload
//! took (the path's steady ceiling for that many flows, each flow's goodput
//! over its own life), and `measure_same_bytes`, the file's bytes split over
//! that many fresh flows, timed from the first connect to the last sink's
//! answer: what plain TCP takes to move exactly that upload, with the
//! handshakes, slow starts and stragglers a finite transfer has and a
//! running flow does not.

use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::Instant;

use anyhow::Context;
use linklab::tcp_tool::{self, FlowReport};
use linklab::{Lab, Side};

use crate::row::TcpReference;

/// `flows` TCP flows with controller `cc` for `seconds`, site → cloud.
pub fn measure(
    lab: &Lab,
    cc: &'static str,
    flows: usize,
    seconds: f64,
) -> anyhow::Result<TcpReference> {
    let flows = flows.max(1);
    let reports = run_flows(lab, flows, move |to| tcp_tool::send(to, seconds, cc))?;
    Ok(TcpReference {
        cc: cc.to_string(),
        flows,
        seconds: reports.iter().map(|r| r.seconds).fold(0.0, f64::max),
        goodput_mbit: reports.iter().map(FlowReport::goodput_mbit).sum(),
    })
}

/// `bytes` split evenly over `flows` fresh TCP flows with controller `cc`,
/// site → cloud, all started together; goodput is the bytes over the time from
/// before the first connect to the last flow's answer from its sink.
pub fn measure_same_bytes(
    lab: &Lab,
    cc: &'static str,
    flows: usize,
    bytes: u64,
) -> anyhow::Result<TcpReference> {
    let flows = flows.max(1);
    let next = std::sync::atomic::AtomicU64::new(0);
    let next = std::sync::Arc::new(next);
    let t0 = Instant::now();
    let reports = run_flows(lab, flows, move |to| {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tcp_tool::send_bytes(to, share_of(bytes, flows, i), cc).map(|(r, _)| r)
    })?;
    let seconds = t0.elapsed().as_secs_f64();
    let arrived: u64 = reports.iter().map(|r| r.bytes).sum();
    anyhow::ensure!(
        arrived == bytes,
        "plain TCP delivered {arrived} of {bytes} bytes"
    );
    Ok(TcpReference {
        cc: cc.to_string(),
        flows,
        seconds,
        goodput_mbit: bytes as f64 * 8.0 / seconds.max(1e-9) / 1e6,
    })
}

/// Flow `i`'s part of `bytes` split as evenly as whole bytes allow.
fn share_of(bytes: u64, flows: usize, i: u64) -> u64 {
    let n = flows.max(1) as u64;
    bytes / n + u64::from(i < bytes % n)
}

/// `flows` senders in the site namespace, each running `send` to one sink in
/// the cloud namespace; the senders' reports once every flow ended.
fn run_flows<F>(lab: &Lab, flows: usize, send: F) -> anyhow::Result<Vec<FlowReport>>
where
    F: Fn(SocketAddr) -> anyhow::Result<FlowReport> + Clone + Send + 'static,
{
    let cloud = lab.cloud_addr();
    let listener = lab.run_in(Side::Cloud, move || {
        Ok(TcpListener::bind(SocketAddr::from((cloud, 0)))?)
    })?;
    let to = listener.local_addr().context("listener address")?;
    // The listener was made in the cloud namespace; accepting and reading
    // work from any thread.
    let sink = thread::spawn(
        move || -> anyhow::Result<Vec<thread::JoinHandle<anyhow::Result<FlowReport>>>> {
            let mut readers = Vec::with_capacity(flows);
            for _ in 0..flows {
                let (stream, _) = listener.accept().context("accept")?;
                readers.push(thread::spawn(move || tcp_tool::receive(stream)));
            }
            Ok(readers)
        },
    );
    let senders: Vec<_> = (0..flows)
        .map(|_| {
            let send = send.clone();
            lab.thread_in(Side::Site, move || send(to))
        })
        .collect::<Result<_, _>>()?;
    let mut reports = Vec::with_capacity(flows);
    for s in senders {
        reports.push(
            s.join()
                .map_err(|_| anyhow::anyhow!("a TCP sender panicked"))??,
        );
    }
    let readers = sink
        .join()
        .map_err(|_| anyhow::anyhow!("the TCP sink panicked"))??;
    for r in readers {
        r.join()
            .map_err(|_| anyhow::anyhow!("a TCP reader panicked"))??;
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::share_of;

    #[test]
    fn the_flows_carry_exactly_the_files_bytes() {
        for (bytes, flows) in [
            (48u64 << 20, 6usize),
            (512 << 20, 8),
            (1_000_003, 7),
            (5, 8),
        ] {
            let total: u64 = (0..flows as u64).map(|i| share_of(bytes, flows, i)).sum();
            assert_eq!(total, bytes, "{bytes} over {flows}");
            let most = (0..flows as u64).map(|i| share_of(bytes, flows, i)).max();
            let least = (0..flows as u64).map(|i| share_of(bytes, flows, i)).min();
            assert!(most.zip(least).is_some_and(|(a, b)| a - b <= 1));
        }
    }
}
