//! One TCP flow fills the bottleneck at 0 loss.
//!
//! Ceiling: the rate limit counts IP bytes, so with MTU 1500 and TCP
//! timestamps a full packet carries 1500 - 20 (IP) - 20 (TCP) - 12
//! (timestamps) = 1448 payload bytes: goodput ceiling = rate × 1448 / 1500
//! = 96.53 Mbit/s at 100 Mbit/s. The test asks for ≥ 95 % of that.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use linklab::{LinkProfile, Side};

const RATE_MBIT: f64 = 100.0;

fn flow(cc: &str) {
    let profile = LinkProfile::new(20.0, 0.0, RATE_MBIT);
    let Some(lab) = common::lab_or_skip(&format!("goodput_{cc}"), profile) else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_linklab");
    let to = format!("{}:5201", lab.cloud_addr());
    let mut sink = Command::new(bin);
    sink.args(["tcp-sink", "--once", "--listen", &to])
        .stdout(Stdio::null());
    let mut sink = lab.spawn_in(Side::Cloud, sink).unwrap();
    let mut send = Command::new(bin);
    send.args(["tcp-send", "--seconds", "5", "--cc", cc, "--to", &to])
        .stdout(Stdio::piped());
    let mut send = lab.spawn_in(Side::Site, send).unwrap();
    let status = common::wait_bounded(&mut send, Duration::from_secs(15));
    let _ = common::wait_bounded(&mut sink, Duration::from_secs(1));
    assert!(
        status.is_some_and(|s| s.success()),
        "tcp-send failed or timed out"
    );
    let mut out = String::new();
    std::io::Read::read_to_string(&mut send.stdout.take().unwrap(), &mut out).unwrap();
    let goodput = common::json_number(&out, "goodput_mbit").expect("goodput in JSON");
    let ceiling = RATE_MBIT * 1448.0 / 1500.0;
    let stats = lab.stats().site_to_cloud;
    println!(
        "goodput {cc} at {RATE_MBIT} Mbit/s, 20 ms: {goodput:.2} Mbit/s = {:.1} % of ceiling \
         {ceiling:.2}; {}; counters {}",
        goodput / ceiling * 100.0,
        out.trim(),
        stats.to_json()
    );
    assert!(
        goodput <= ceiling * 1.01,
        "goodput above the ceiling: rate not enforced"
    );
    assert!(
        goodput >= ceiling * 0.95,
        "goodput {goodput:.2} below 95 % of {ceiling:.2}"
    );
}

#[test]
fn tcp_cubic_fills_the_bottleneck() {
    flow("cubic");
}

#[test]
fn tcp_bbr_fills_the_bottleneck() {
    flow("bbr");
}
