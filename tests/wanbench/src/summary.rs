//! Medians per (profile, workload, method) and the Markdown tables.

use std::fmt::Write as _;

use crate::plan::Profile;
use crate::row::Row;

/// One line of the summary table.
#[derive(Clone, Debug)]
pub struct Group {
    pub profile: Profile,
    /// `Row::place`: the link (or loopback) and storage delay.
    pub place: String,
    pub files: usize,
    pub bytes: u64,
    /// `Row::workload_label`: the workload, with the data set if not random.
    pub workload: String,
    /// The data set when not random (`--data`).
    pub data: Option<String>,
    pub method: String,
    pub runs: usize,
    pub verified: usize,
    pub capped: usize,
    pub seconds: f64,
    pub goodput_mbit: f64,
    pub goodput_min: f64,
    pub goodput_max: f64,
    pub ceiling_mbit: f64,
    /// Median goodput over the median goodput of direct-cubic (direct-bbr) on the
    /// same link and files; for a download row, of direct-dl-cubic (direct-dl-bbr).
    pub vs_direct_cubic: Option<f64>,
    pub vs_direct_bbr: Option<f64>,
    pub client_cpu_s: f64,
    /// Median over runs of the client's CPU seconds per GiB it moved.
    pub client_cpu_s_per_gib: Option<f64>,
    pub relay_cpu_s: f64,
    pub peak_rss_mib: f64,
    pub relay_peak_rss_mib: f64,
    pub retries: f64,
    pub reattempts: f64,
    pub queue_loss_pct: f64,
    pub random_loss_pct: f64,
    pub azurite_cpu_s: f64,
    /// Median storage requests per run, where the client counts them.
    pub storage_requests: Option<f64>,
    /// Median goodput of the plain TCP flows measured beside the runs
    /// (`--tcp-reference`), where every run has them: the path's own ceiling
    /// for a direct row.
    pub tcp_reference_mbit: Option<f64>,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Groups in first-seen order, which is the run order: profile, workload, method.
pub fn groups(rows: &[Row]) -> Vec<Group> {
    let mut keys: Vec<(String, String, String)> = Vec::new();
    for r in rows {
        let k = (r.place(), r.workload_label(), r.method.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut out: Vec<Group> = keys
        .iter()
        .filter_map(|(place, workload, method)| {
            let rs: Vec<&Row> = rows
                .iter()
                .filter(|r| {
                    r.place() == *place && r.workload_label() == *workload && r.method == *method
                })
                .collect();
            let first = rs.first()?;
            let m = |f: fn(&Row) -> f64| median(rs.iter().map(|r| f(r)).collect());
            let gp: Vec<f64> = rs.iter().map(|r| r.goodput_mbit).collect();
            let reqs: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.storage_requests.map(|n| n as f64))
                .collect();
            Some(Group {
                profile: first.profile,
                place: place.clone(),
                files: first.files,
                bytes: first.bytes,
                azurite_cpu_s: m(|r| r.azurite_cpu_s),
                storage_requests: (reqs.len() == rs.len()).then(|| median(reqs)),
                workload: workload.clone(),
                data: first.data.clone(),
                method: method.clone(),
                runs: rs.len(),
                verified: rs.iter().filter(|r| r.verified).count(),
                capped: rs.iter().filter(|r| r.capped).count(),
                seconds: m(|r| r.seconds),
                goodput_mbit: median(gp.clone()),
                goodput_min: gp.iter().copied().fold(f64::INFINITY, f64::min),
                goodput_max: gp.iter().copied().fold(0.0, f64::max),
                ceiling_mbit: first.profile.ceiling_mbit(),
                vs_direct_cubic: None,
                vs_direct_bbr: None,
                client_cpu_s: m(|r| r.client_cpu_s),
                client_cpu_s_per_gib: {
                    let c: Vec<f64> = rs.iter().filter_map(|r| r.client_cpu_s_per_gib()).collect();
                    (!c.is_empty()).then(|| median(c))
                },
                relay_cpu_s: m(|r| r.relay_cpu_s),
                peak_rss_mib: m(|r| r.peak_rss_mib),
                relay_peak_rss_mib: m(|r| r.relay_peak_rss_mib),
                retries: m(|r| r.retries as f64),
                reattempts: m(|r| r.reattempts as f64),
                queue_loss_pct: m(|r| r.queue_loss_pct),
                random_loss_pct: m(|r| r.random_loss_pct),
                tcp_reference_mbit: {
                    let t: Vec<f64> = rs
                        .iter()
                        .filter_map(|r| r.tcp_reference.as_ref().map(|t| t.goodput_mbit))
                        .collect();
                    (t.len() == rs.len()).then(|| median(t))
                },
            })
        })
        .collect();
    // A download row is compared with direct downloads (direct-dl-cubic,
    // direct-dl-bbr), an upload row with direct uploads.
    let ratios = |cc: &str| -> Vec<Option<f64>> {
        out.iter()
            .map(|g| {
                let method = if is_download(&g.method) {
                    format!("direct-dl-{cc}")
                } else {
                    format!("direct-{cc}")
                };
                out.iter()
                    .find(|b| b.method == method && b.place == g.place && b.workload == g.workload)
                    .and_then(|b| (b.goodput_mbit > 0.0).then(|| g.goodput_mbit / b.goodput_mbit))
            })
            .collect()
    };
    let (cubic, bbr) = (ratios("cubic"), ratios("bbr"));
    for ((g, c), b) in out.iter_mut().zip(cubic).zip(bbr) {
        g.vs_direct_cubic = c;
        g.vs_direct_bbr = b;
    }
    out
}

/// The download rows' names: `relay-dl`, `relay-dl-off`, `direct-dl-cubic`,
/// `direct-dl-bbr`, `python-sdk-dl`, `azcopy-dl-cubic`, `azcopy-tuned-dl-bbr`, ...
pub fn is_download(method: &str) -> bool {
    method.ends_with("-dl") || method.contains("-dl-")
}

/// CPU cores per 100 Mbit/s of goodput over a run of `seconds`.
fn cores_per_100mbit(cpu_s: f64, seconds: f64, goodput_mbit: f64) -> f64 {
    if seconds <= 0.0 || goodput_mbit <= 0.0 {
        return 0.0;
    }
    cpu_s / seconds / (goodput_mbit / 100.0)
}

/// The summary table (medians).
pub fn summary_table(groups: &[Group]) -> String {
    let mut s = String::new();
    s.push_str(
        "| Link (RTT, loss, rate) | Files | Method | Runs: verified / capped | Time s | Goodput Mbit/s (min–max) | of ceiling | × direct-cubic | × direct-bbr | Client CPU s | Client CPU s per GiB | Relay CPU s | CPU cores per 100 Mbit/s client / relay | Peak RSS MiB client / relay | Retries / re-attempts | Queue loss % | Random loss % |\n\
         |---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for g in groups {
        let is_relay = g.method.starts_with("relay");
        let time = if g.capped > 0 {
            format!("{:.1}†", g.seconds)
        } else {
            format!("{:.2}", g.seconds)
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}/{} / {} | {} | {:.1} ({:.1}–{:.1}) | {:.0} % | {} | {} | {:.2} | {} | {} | {} | {:.0} / {} | {:.0} / {:.0} | {:.2} | {:.2} |",
            g.place,
            g.workload,
            g.method,
            g.verified,
            g.runs,
            g.capped,
            time,
            g.goodput_mbit,
            g.goodput_min,
            g.goodput_max,
            g.goodput_mbit / g.ceiling_mbit * 100.0,
            ratio(g.vs_direct_cubic),
            ratio(g.vs_direct_bbr),
            g.client_cpu_s,
            g.client_cpu_s_per_gib
                .map_or("–".into(), |c| format!("{c:.2}")),
            if is_relay {
                format!("{:.2}", g.relay_cpu_s)
            } else {
                "–".into()
            },
            if is_relay {
                format!(
                    "{:.2} / {:.2}",
                    cores_per_100mbit(g.client_cpu_s, g.seconds, g.goodput_mbit),
                    cores_per_100mbit(g.relay_cpu_s, g.seconds, g.goodput_mbit)
                )
            } else {
                format!(
                    "{:.2} / –",
                    cores_per_100mbit(g.client_cpu_s, g.seconds, g.goodput_mbit)
                )
            },
            g.peak_rss_mib,
            if is_relay {
                format!("{:.0}", g.relay_peak_rss_mib)
            } else {
                "–".into()
            },
            g.retries,
            g.reattempts,
            g.queue_loss_pct,
            g.random_loss_pct,
        );
    }
    s
}

/// Many-file workloads next to one file of the same bytes (same place and
/// method): the time ratio, files/s, and what storage did (requests/s where
/// the client counts them, Azurite's CPU in cores). Empty when the run has no
/// such pair.
pub fn small_vs_one(groups: &[Group]) -> String {
    let mut s = String::new();
    for g in groups.iter().filter(|g| g.files > 1) {
        let Some(one) = groups.iter().find(|o| {
            o.files == 1 && o.bytes == g.bytes && o.place == g.place && o.method == g.method
        }) else {
            continue;
        };
        if s.is_empty() {
            s.push_str(
                "| Where | Files | Method | Many files s | One file s | Ratio many / one | Files/s | Storage requests per file | Requests/s | Azurite CPU cores (many) |\n\
                 |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
            );
        }
        let mark = |x: &Group| if x.capped > 0 { "†" } else { "" };
        // A capped run did not upload every file: its rates are unknown and
        // its ratio is a lower bound.
        let done = g.capped == 0 && g.seconds > 0.0;
        let per_s = |n: f64| {
            if done {
                format!("{:.0}", n / g.seconds)
            } else {
                "–".into()
            }
        };
        let ratio = if one.seconds > 0.0 {
            g.seconds / one.seconds
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            "| {} | {} vs 1 | {} | {:.2}{} | {:.2}{} | {}{:.2} | {} | {} | {} | {:.2} |",
            g.place,
            g.workload,
            g.method,
            g.seconds,
            mark(g),
            one.seconds,
            mark(one),
            if g.capped > 0 { "≥ " } else { "" },
            ratio,
            per_s(g.files as f64),
            g.storage_requests
                .filter(|_| done)
                .map(|n| format!("{:.2}", n / g.files as f64))
                .unwrap_or_else(|| "–".into()),
            g.storage_requests.map(per_s).unwrap_or_else(|| "–".into()),
            if g.seconds > 0.0 {
                g.azurite_cpu_s / g.seconds
            } else {
                0.0
            },
        );
    }
    s
}

fn ratio(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "–".into())
}

/// Every run, in run order.
pub fn runs_table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| Link | Files | Method | # | Verified | Capped | Time s | Wall s | Goodput Mbit/s | Client CPU s | Relay CPU s | Azurite CPU s | RSS MiB | Retries | Re-attempts | Queue drops | Random drops | CC | Note |\n\
         |---|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0} | {} | {} | {} | {} | {} | {} |",
            r.place(),
            r.workload,
            r.method,
            r.repeat,
            if r.verified { "yes" } else { "no" },
            if r.capped { "yes" } else { "" },
            r.seconds,
            r.wall_seconds,
            r.goodput_mbit,
            r.client_cpu_s,
            r.relay_cpu_s,
            r.azurite_cpu_s,
            r.peak_rss_mib,
            r.retries,
            r.reattempts,
            r.link.up_dropped_queue,
            r.link.up_dropped_loss,
            match r.warm_start {
                Some(true) => format!("{} (warm)", r.congestion),
                _ => r.congestion.clone(),
            },
            r.error.as_deref().unwrap_or("").replace('|', "/"),
        );
    }
    s
}

/// Direct rows with their sizing, abandoned requests and, with
/// `--tcp-reference`, the plain TCP flows measured beside them: a direct row
/// far below its reference is capped by us, near it by TCP on that path.
pub fn direct_table(rows: &[Row]) -> String {
    let direct: Vec<&Row> = rows
        .iter()
        .filter(|r| r.direct_connections.is_some())
        .collect();
    if direct.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "| Link | Files | Method | # | Blocks MiB x in flight | Goodput Mbit/s | Abandoned (while moving) | Plain TCP flows | TCP Mbit/s | Direct / TCP | TCP, same bytes: s, Mbit/s | Direct / same bytes |\n\
         |---|---|---|---:|---|---:|---|---|---:|---:|---:|---:|\n",
    );
    for r in direct {
        let reference = r.tcp_reference.as_ref();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} x {} | {:.1}{} | {} ({}) | {} | {} | {} | {} | {} |",
            r.place(),
            r.workload,
            r.method,
            r.repeat,
            r.direct_block_size.unwrap_or(0) >> 20,
            r.direct_connections.unwrap_or(0),
            r.goodput_mbit,
            if r.verified { "" } else { " (not verified)" },
            r.abandoned.unwrap_or(0),
            r.abandoned_while_moving.unwrap_or(0),
            reference.map_or("-".into(), |t| format!("{} x {}", t.flows, t.cc)),
            reference.map_or("-".into(), |t| format!("{:.1}", t.goodput_mbit)),
            r.share_of_tcp()
                .map_or("-".into(), |x| format!("{:.0} %", x * 100.0)),
            r.tcp_same_bytes.as_ref().map_or("-".into(), |t| format!(
                "{:.2}, {:.1}",
                t.seconds, t.goodput_mbit
            )),
            r.share_of_tcp_same_bytes()
                .map_or("-".into(), |x| format!("{:.0} %", x * 100.0)),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_per_100mbit() {
        // 2 s of CPU over 10 s at 200 Mbit/s: 0.2 cores for 2 × 100 Mbit/s.
        assert!((cores_per_100mbit(2.0, 10.0, 200.0) - 0.1).abs() < 1e-12);
        assert_eq!(cores_per_100mbit(1.0, 0.0, 100.0), 0.0);
    }

    #[test]
    fn download_rows_are_named_apart() {
        assert!(is_download("relay-dl") && is_download("direct-dl-bbr"));
        assert!(is_download("python-sdk-dl") && is_download("relay-dl-off"));
        assert!(!is_download("relay") && !is_download("direct-bbr-32"));
        assert!(!is_download("relay-off") && !is_download("relay-cold-plain"));
        // Every method the plan knows is named as its direction says.
        for m in crate::plan::Method::DEFAULT.iter().chain(&[
            crate::plan::Method::RelayDl,
            crate::plan::Method::RelayDlOff,
            crate::plan::Method::DirectDlCubic,
            crate::plan::Method::DirectDlBbr,
            crate::plan::Method::PythonSdkDl,
            crate::plan::Method::RelayOff,
        ]) {
            assert_eq!(is_download(m.name()), m.is_download(), "{}", m.name());
        }
    }

    /// A run on a text-like data set is a median of its own, never mixed
    /// with random data of the same workload.
    #[test]
    fn data_sets_are_grouped_apart() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../docs/bench/download/results.json"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let rows: Vec<Row> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        let mut one = rows[0].clone();
        one.data = Some("logs".into());
        one.goodput_mbit = 1.0;
        let both = [rows[..1].to_vec(), vec![one]].concat();
        let gs = groups(&both);
        assert_eq!(gs.len(), 2);
        assert_eq!(gs[1].workload, format!("{} logs", rows[0].workload));
        assert_eq!(
            (gs[0].goodput_mbit, gs[1].goodput_mbit),
            (rows[0].goodput_mbit, 1.0)
        );
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
