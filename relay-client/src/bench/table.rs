//! The bench's result: one row per upload (or download) run, the relay/direct
//! and relay/AzCopy goodput ratios, each run's CPU per GiB, and what QUIC saw;
//! as a text table or as JSON (a stable contract for scripts).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Through the relay, `--compress auto`.
    Relay,
    /// Through the relay, `--compress off` (`bench --from`: what compression buys).
    #[serde(rename = "relay-off")]
    RelayOff,
    Direct,
    /// AzCopy with its defaults (`--azcopy`).
    Azcopy,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Relay => "relay",
            Method::RelayOff => "relay-off",
            Method::Direct => "direct",
            Method::Azcopy => "azcopy",
        }
    }
}

/// Which way the bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Upload,
    /// `bench --download`: each row downloads what was put in storage once.
    Download,
}

impl Direction {
    /// `bench --download` or not.
    pub fn of(download: bool) -> Direction {
        if download {
            Direction::Download
        } else {
            Direction::Upload
        }
    }
}

/// One upload (or download) of the whole data set.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub method: Method,
    pub run: u32,
    pub files: usize,
    pub bytes: u64,
    pub seconds: f64,
    /// Payload bits per second of wall time, in Mbit/s.
    pub goodput_mbit_s: f64,
    /// CPU seconds (user + system) the run cost on this machine: the bench's
    /// own process for the relay and direct runs (they run inside it),
    /// AzCopy's process for its runs.
    pub cpu_s: f64,
    /// `cpu_s` per GiB of the files.
    pub cpu_s_per_gib: Option<f64>,
    /// AzCopy runs: start to exit. `seconds` ends when its log says the job
    /// ended; AzCopy notices that at its next look, every 2 s, then exits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_seconds: Option<f64>,
    /// Bytes that carried the files' bytes sent, where some went compressed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_bytes: Option<u64>,
    /// Every file committed (downloaded), with the SHA-256 of what was generated.
    pub verified: bool,
    /// Where the blobs went (came from): CONTAINER/PREFIX.
    pub destination: String,
    /// Relay runs: QUIC's smoothed RTT and its lost/sent packets on the run's
    /// (last) connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<crate::ui::report::QuicStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub direction: Direction,
    pub rows: Vec<Row>,
    /// Median relay goodput over median direct goodput (verified runs only).
    pub ratio_relay_direct: Option<f64>,
    /// Median relay goodput over median AzCopy goodput (verified runs only);
    /// absent when AzCopy did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_relay_azcopy: Option<f64>,
    /// AzCopy's runs: which AzCopy, or why it did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azcopy: Option<AzcopyNote>,
    /// Round-trip time QUIC measured on a connection to the relay opened after
    /// the runs (its handshake).
    pub rtt_ms: Option<f64>,
    /// The TCP congestion control of the direct runs' connections (the
    /// system's default for new sockets); `None` without direct runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct_tcp_congestion: Option<String>,
    /// Blobs deleted afterwards (0 with --keep or without storage credentials).
    pub deleted: usize,
    pub kept: bool,
    pub ok: bool,
}

/// Which AzCopy ran (or why none did).
#[derive(Debug, Clone, Serialize)]
pub struct AzcopyNote {
    /// Its binary, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `azcopy --version`'s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its connections and block size, from its first run's log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size_bytes: Option<u64>,
    /// Where its SAS came from: `account-key` (signed per run for the one
    /// container, write or read+list, expiring after the run), `azcopy-sas`,
    /// `storage-url`. Never the SAS itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sas_from: Option<String>,
    /// Why AzCopy did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Report {
    /// An upload report of `rows` alone: whether all verified, and the
    /// relay/direct ratio; the rest is the caller's to fill.
    pub fn of(rows: Vec<Row>) -> Report {
        Report {
            direction: Direction::Upload,
            ratio_relay_direct: ratio(&rows, Method::Direct),
            ratio_relay_azcopy: None,
            azcopy: None,
            rtt_ms: None,
            direct_tcp_congestion: None,
            deleted: 0,
            kept: false,
            ok: !rows.is_empty() && rows.iter().all(|r| r.verified),
            rows,
        }
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Median relay goodput over median `other` goodput, from verified rows.
pub fn ratio(rows: &[Row], other: Method) -> Option<f64> {
    let of = |m: Method| {
        median(
            rows.iter()
                .filter(|r| r.method == m && r.verified)
                .map(|r| r.goodput_mbit_s)
                .collect(),
        )
    };
    match (of(Method::Relay), of(other)) {
        (Some(r), Some(d)) if d > 0.0 => Some(r / d),
        _ => None,
    }
}

pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    if r.direction == Direction::Download {
        out.push_str("download (the files were put in storage once, untimed):\n");
    }
    out.push_str(&format!(
        "{:<9} {:>3} {:>6} {:>12} {:>12} {:>9} {:>10} {:>9} {:>9} {:>7}  {}\n",
        "method",
        "run",
        "files",
        "bytes",
        "on wire",
        "seconds",
        "Mbit/s",
        "CPU s/GiB",
        "RTT ms",
        "loss %",
        "verified"
    ));
    for row in &r.rows {
        out.push_str(&format!(
            "{:<9} {:>3} {:>6} {:>12} {:>12} {:>9.2} {:>10.1} {:>9} {:>9} {:>7}  {}\n",
            row.method.name(),
            row.run,
            row.files,
            row.bytes,
            row.wire_bytes.map_or("-".into(), |w| w.to_string()),
            row.seconds,
            row.goodput_mbit_s,
            row.cpu_s_per_gib.map_or("-".into(), |c| format!("{c:.2}")),
            row.quic.map_or("-".into(), |q| format!("{:.1}", q.rtt_ms)),
            row.quic.map_or("-".into(), |q| format!(
                "{:.2}",
                q.lost_packets as f64 * 100.0 / q.sent_packets.max(1) as f64
            )),
            match (&row.error, row.verified) {
                (Some(e), _) => format!("no: {e}"),
                (None, true) => "yes".to_string(),
                (None, false) => "no".to_string(),
            }
        ));
    }
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |x| format!("{x:.2}{unit}"));
    out.push_str(&format!(
        "ratio relay/direct (median goodput): {}\nQUIC round-trip time to the relay: {}\n",
        opt(r.ratio_relay_direct, ""),
        opt(r.rtt_ms, " ms"),
    ));
    if let Some(cc) = &r.direct_tcp_congestion {
        out.push_str(&format!("direct runs' TCP congestion control: {cc}\n"));
    }
    match &r.azcopy {
        Some(AzcopyNote {
            skipped: Some(why), ..
        }) => out.push_str(&format!("AzCopy not run: {why}\n")),
        Some(a) => {
            out.push_str(&format!(
                "ratio relay/AzCopy (median goodput): {}\n",
                opt(r.ratio_relay_azcopy, "")
            ));
            out.push_str(&format!(
                "AzCopy {} ({}), its defaults: {} connections, {} blocks; SAS from {}\n",
                a.version.as_deref().unwrap_or("?"),
                a.path.as_deref().unwrap_or("?"),
                a.concurrency.map_or("?".into(), |c| c.to_string()),
                a.block_size_bytes
                    .map_or("?".into(), |b| format!("{} MiB", b >> 20)),
                a.sas_from.as_deref().unwrap_or("?"),
            ));
            if r.direct_tcp_congestion.is_some() {
                out.push_str("AzCopy's TCP congestion control: the same as the direct runs'\n");
            }
        }
        None => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(method: Method, mbit: f64, verified: bool) -> Row {
        Row {
            method,
            run: 1,
            files: 1,
            bytes: 1,
            seconds: 1.0,
            goodput_mbit_s: mbit,
            cpu_s: 0.0,
            cpu_s_per_gib: None,
            process_seconds: None,
            wire_bytes: None,
            verified,
            destination: String::new(),
            quic: None,
            error: None,
        }
    }

    #[test]
    fn ratio_uses_medians_of_verified_runs() {
        let rows = [
            row(Method::Relay, 300.0, true),
            row(Method::Relay, 100.0, true),
            row(Method::Relay, 200.0, true),
            row(Method::Relay, 9999.0, false),
            row(Method::Direct, 50.0, true),
            row(Method::Direct, 150.0, true),
        ];
        assert_eq!(ratio(&rows, Method::Direct), Some(2.0));
        assert_eq!(ratio(&rows[..3], Method::Direct), None, "no direct run");
        assert_eq!(ratio(&rows, Method::Azcopy), None, "no AzCopy run");
        assert_eq!(median(vec![]), None);
    }
}
