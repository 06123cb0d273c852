//! Plain TCP beside a direct run: as many flows of the same congestion
//! control as the direct run had requests in flight, over the same link, right
//! after it. Their goodput is what TCP itself carries there, so a direct row
//! can be read against the path's TCP ceiling rather than against nothing
//! (issue 37: a baseline capped by our own request deadlines looked like a
//! slow path).

use std::net::{SocketAddr, TcpListener};
use std::thread;

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
        .map(|_| lab.thread_in(Side::Site, move || tcp_tool::send(to, seconds, cc)))
        .collect::<Result<_, _>>()?;
    let mut goodput = 0.0;
    let mut longest: f64 = 0.0;
    for s in senders {
        let report = s
            .join()
            .map_err(|_| anyhow::anyhow!("a TCP sender panicked"))??;
        goodput += report.goodput_mbit();
        longest = longest.max(report.seconds);
    }
    let readers = sink
        .join()
        .map_err(|_| anyhow::anyhow!("the TCP sink panicked"))??;
    for r in readers {
        r.join()
            .map_err(|_| anyhow::anyhow!("a TCP reader panicked"))??;
    }
    Ok(TcpReference {
        cc: cc.to_string(),
        flows,
        seconds: longest,
        goodput_mbit: goodput,
    })
}
