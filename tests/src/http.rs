//! Plain HTTP/1.1 GETs against a relay's health listener, and reading samples
//! out of its Prometheus text.

use std::io::{Read, Write};
use std::time::Duration;

/// `(status, body)` of `GET path` on `addr`, or `None` if it could not be had.
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// The value of the sample `series` (name and labels exactly as rendered), if present.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let v = l.strip_prefix(series)?.strip_prefix(' ')?;
        v.parse().ok()
    })
}
