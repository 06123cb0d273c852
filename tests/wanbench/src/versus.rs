//! The relay against AzCopy, side by side in one run: for every link and
//! workload where both ran, the relay's median goodput over each AzCopy row's
//! (defaults and tuned, TCP CUBIC and BBR), and the client's CPU per GiB
//! against AzCopy's. An upload row is set against the relay's upload
//! (`relay`), a download row against the relay's download (`relay-dl`).

use std::fmt::Write as _;

use crate::summary::{Group, is_download};

/// The AzCopy rows in the table's column order, per direction.
const UP: [&str; 4] = [
    "azcopy-cubic",
    "azcopy-bbr",
    "azcopy-tuned-cubic",
    "azcopy-tuned-bbr",
];
const DOWN: [&str; 4] = [
    "azcopy-dl-cubic",
    "azcopy-dl-bbr",
    "azcopy-tuned-dl-cubic",
    "azcopy-tuned-dl-bbr",
];

/// One line: the relay's group and the AzCopy groups beside it.
struct Line<'a> {
    relay: &'a Group,
    azcopy: [Option<&'a Group>; 4],
}

fn lines(groups: &[Group]) -> Vec<Line<'_>> {
    groups
        .iter()
        .filter(|g| g.method == "relay" || g.method == "relay-dl")
        .filter_map(|relay| {
            let names = if is_download(&relay.method) { DOWN } else { UP };
            let azcopy = names.map(|m| {
                groups.iter().find(|g| {
                    g.method == m && g.place == relay.place && g.workload == relay.workload
                })
            });
            azcopy
                .iter()
                .any(Option::is_some)
                .then_some(Line { relay, azcopy })
        })
        .collect()
}

/// Relay median goodput over `other`'s, `≥` when the other's runs were capped
/// (its goodput is then what the link carried by the cap: an upper bound).
fn goodput_ratio(relay: &Group, other: &Group) -> String {
    if other.goodput_mbit <= 0.0 {
        return "–".into();
    }
    let mark = if other.capped > 0 { "≥ " } else { "" };
    format!("{mark}{:.2}×", relay.goodput_mbit / other.goodput_mbit)
}

fn cell(relay: &Group, other: Option<&Group>) -> String {
    match other {
        Some(o) => format!(
            "{:.1}{} ({})",
            o.goodput_mbit,
            if o.capped > 0 { "†" } else { "" },
            goodput_ratio(relay, o)
        ),
        None => "–".into(),
    }
}

/// The client's CPU per GiB: the relay's, then relay / AzCopy for each column.
fn cpu(line: &Line) -> String {
    let Some(relay) = line.relay.client_cpu_s_per_gib else {
        return "–".into();
    };
    let ratios: Vec<String> = line
        .azcopy
        .iter()
        .map(|g| match g.and_then(|g| g.client_cpu_s_per_gib) {
            Some(a) if a > 0.0 => format!("{:.2}", relay / a),
            _ => "–".into(),
        })
        .collect();
    format!("{relay:.2} ({})", ratios.join(" / "))
}

/// The Markdown table, or nothing when no AzCopy row ran beside the relay.
pub fn table(groups: &[Group]) -> String {
    let lines = lines(groups);
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "| Link | Files | Way | Relay Mbit/s | AzCopy CUBIC (relay ×) | AzCopy BBR (relay ×) | AzCopy tuned CUBIC (relay ×) | AzCopy tuned BBR (relay ×) | Relay client CPU s/GiB (÷ AzCopy's, same columns) |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for l in &lines {
        let r = l.relay;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1}{} | {} | {} | {} | {} | {} |",
            r.place,
            r.workload,
            if is_download(&r.method) {
                "download"
            } else {
                "upload"
            },
            r.goodput_mbit,
            if r.capped > 0 { "†" } else { "" },
            cell(r, l.azcopy[0]),
            cell(r, l.azcopy[1]),
            cell(r, l.azcopy[2]),
            cell(r, l.azcopy[3]),
            cpu(l),
        );
    }
    s.push_str(
        "\nMedians over the run's repeats. \"relay ×\": the relay's median goodput over the AzCopy row's; \
         ≥ where AzCopy's runs hit the cap (†: its figure is what the link carried by then). \
         CPU: the client process's user + system seconds per GiB it moved; \
         in brackets the relay client's over AzCopy's (below 1: the relay costs less).\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Profile;

    fn group(method: &str, goodput: f64, cpu_per_gib: f64, capped: usize) -> Group {
        Group {
            profile: Profile::new(200.0, 0.01, 200.0),
            place: "200ms 1% 200M".into(),
            files: 1,
            bytes: 256 << 20,
            workload: "1x256MiB".into(),
            data: None,
            method: method.into(),
            runs: 3,
            verified: 3 - capped,
            capped,
            seconds: 10.0,
            goodput_mbit: goodput,
            goodput_min: goodput,
            goodput_max: goodput,
            ceiling_mbit: 193.1,
            vs_direct_cubic: None,
            vs_direct_bbr: None,
            client_cpu_s: 1.0,
            client_cpu_s_per_gib: Some(cpu_per_gib),
            relay_cpu_s: 0.0,
            peak_rss_mib: 0.0,
            relay_peak_rss_mib: 0.0,
            retries: 0.0,
            reattempts: 0.0,
            queue_loss_pct: 0.0,
            random_loss_pct: 0.0,
            azurite_cpu_s: 0.0,
            storage_requests: None,
            tcp_reference_mbit: None,
        }
    }

    #[test]
    fn ratios_per_azcopy_row_and_a_bound_where_azcopy_was_capped() {
        let gs = [
            group("relay", 176.0, 7.0, 0),
            group("azcopy-cubic", 11.0, 20.0, 3),
            group("azcopy-bbr", 88.0, 14.0, 0),
            group("direct-bbr", 140.0, 4.0, 0),
        ];
        let t = table(&gs);
        assert!(
            t.contains("| 200ms 1% 200M | 1x256MiB | upload | 176.0 |"),
            "{t}"
        );
        assert!(
            t.contains("| 11.0† (≥ 16.00×) | 88.0 (2.00×) | – | – |"),
            "{t}"
        );
        assert!(t.contains("| 7.00 (0.35 / 0.50 / – / –) |"), "{t}");
        // No AzCopy row: no table. A download AzCopy row meets relay-dl only.
        assert_eq!(table(&gs[..1]), "");
        let down = [
            group("relay", 1.0, 1.0, 0),
            group("azcopy-dl-bbr", 1.0, 1.0, 0),
        ];
        assert_eq!(table(&down), "");
        let down = [
            group("relay-dl", 90.0, 1.0, 0),
            group("azcopy-dl-bbr", 45.0, 1.0, 0),
        ];
        assert!(
            table(&down).contains("| download | 90.0 | – | 45.0 (2.00×) |"),
            "{}",
            table(&down)
        );
    }
}
