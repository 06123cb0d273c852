//! How fast the emulator forwards with no rate limit (a measurement, not a
//! pass/fail test; run it in release):
//! cargo test -p linklab --release --test forwarding_rate -- --ignored --nocapture

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use linklab::{LinkProfile, Side};

#[test]
#[ignore = "measurement; run in release with --ignored --nocapture"]
fn max_forwarding_rate() {
    for cc in ["cubic", "bbr"] {
        let Some(lab) = common::lab_or_skip("forwarding_rate", LinkProfile::new(2.0, 0.0, 0.0))
        else {
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
        let status = common::wait_bounded(&mut send, Duration::from_secs(20));
        let _ = common::wait_bounded(&mut sink, Duration::from_secs(1));
        assert!(status.is_some_and(|s| s.success()));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut send.stdout.take().unwrap(), &mut out).unwrap();
        let s = lab.stats().site_to_cloud;
        println!(
            "unlimited, rtt 2 ms, {cc}: {} ; forwarded {} packets, {} no-buffer drops, {} write errors",
            out.trim(),
            s.forwarded_packets,
            s.dropped_no_buffer,
            s.write_errors
        );
    }
}
