//! Shared helpers of the lab tests: skip without privileges, bounded waits.

#![allow(dead_code)]

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile};

/// Start a lab, or print why the test is skipped and return None.
pub fn lab_or_skip(test: &str, profile: LinkProfile) -> Option<Lab> {
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED {test}: {e:#}");
        return None;
    }
    Some(Lab::start(profile).expect("lab starts"))
}

/// Wait for `child` until `deadline`; kill it (our own child) if late.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// The number after `"key":` in a one-line JSON object.
pub fn json_number(line: &str, key: &str) -> Option<f64> {
    let start = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}
