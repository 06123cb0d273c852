//! A TCP flow through a rate-limited link is held to the bottleneck rate, and
//! its bytes really cross the emulated link.
//!
//! Deterministic bounds only: the link model accepts at most rate × time +
//! one queue of bytes, so over the test's own (longer) wall-clock interval the
//! bytes forwarded cannot exceed rate × interval + queue, however the threads
//! were scheduled. How close a flow gets to the ceiling is a property of the
//! machine and its load, measured and reported by `linklab calibrate`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use linklab::{LinkProfile, Side};

const RATE_MBIT: f64 = 100.0;

fn flow(cc: &str) {
    let t0 = Instant::now();
    let profile = LinkProfile::new(20.0, 0.0, RATE_MBIT);
    let Some(lab) = common::lab_or_skip(&format!("goodput_{cc}"), profile.clone()) else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_linklab");
    let to = format!("{}:5201", lab.cloud_addr());
    let mut sink = Command::new(bin);
    sink.args(["tcp-sink", "--once", "--listen", &to])
        .stdout(Stdio::piped());
    let mut sink = lab.spawn_in(Side::Cloud, sink).unwrap();
    let mut send = Command::new(bin);
    send.args(["tcp-send", "--seconds", "3", "--cc", cc, "--to", &to])
        .stdout(Stdio::piped());
    let mut send = lab.spawn_in(Side::Site, send).unwrap();
    // Bounds against hangs only.
    let status = common::wait_bounded(&mut send, Duration::from_secs(120));
    let sink_status = common::wait_bounded(&mut sink, Duration::from_secs(60));
    let stats = lab.stats().site_to_cloud;
    let interval = t0.elapsed().as_secs_f64();
    assert!(
        status.is_some_and(|s| s.success()),
        "tcp-send failed or hung"
    );
    assert!(
        sink_status.is_some_and(|s| s.success()),
        "tcp-sink failed or hung"
    );
    let mut out = String::new();
    std::io::Read::read_to_string(&mut send.stdout.take().unwrap(), &mut out).unwrap();
    let mut sink_out = String::new();
    std::io::Read::read_to_string(&mut sink.stdout.take().unwrap(), &mut sink_out).unwrap();
    let received = common::json_number(&sink_out, "bytes").expect("bytes in the sink's JSON");
    println!(
        "{cc} at {RATE_MBIT} Mbit/s, 20 ms: sender {} ; sink {} ; counters {} \
         (goodput is a report, not checked; see `linklab calibrate`)",
        out.trim(),
        sink_out.trim(),
        stats.to_json()
    );
    assert!(received > 0.0, "no byte arrived");
    assert_eq!(
        common::json_number(&out, "bytes"),
        Some(received),
        "the sender got the sink's count"
    );
    // Every payload byte crossed the emulated link (as part of an IP packet).
    assert!(
        stats.forwarded_bytes as f64 >= received,
        "{} IP bytes forwarded for {received} payload bytes",
        stats.forwarded_bytes
    );
    // The rate is enforced: never more than rate × interval + one full queue.
    let limit = profile.rate_bytes_per_sec() as f64 * interval + profile.queue_limit_bytes() as f64;
    assert!(
        stats.forwarded_bytes as f64 <= limit,
        "{} bytes forwarded in {interval:.3} s: above the rate limit ({limit:.0})",
        stats.forwarded_bytes
    );
    assert!(stats.max_queue_bytes <= profile.queue_limit_bytes());
}

#[test]
fn tcp_cubic_is_held_to_the_bottleneck_rate() {
    flow("cubic");
}

#[test]
fn tcp_bbr_is_held_to_the_bottleneck_rate() {
    flow("bbr");
}
