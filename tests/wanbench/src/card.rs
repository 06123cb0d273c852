//! The headline cards: the WAN-lab matrix's medians as docs/BENCHMARKS.md
//! shows them ([`DOCS`]; README.md quotes a few ratios and links there),
//! rendered from the results files they cite, so the figures a reader sees
//! can be checked against the runs behind them.
//!
//! A workload measured on a text-like data set (`--data logs`) gets a table of
//! its own, with the relay's row without compression (`relay-off`,
//! `relay-dl-off`) beside the compressed one and the ratio between them.
//!
//! There are two cards, one per direction ([`Kind`]). Each document holds a
//! card between its `begin` and [`CARD_END`] markers. `wanbench --render FILE
//! --out DIR --card` rewrites the card of the direction FILE's rows measured;
//! this module's test fails when a block no longer equals what the committed
//! results file renders to (a figure edited by hand, or results regenerated
//! without the documents).

use std::fmt::Write as _;

use crate::row::Row;
use crate::summary::{Group, groups, is_download};

pub const CARD_END: &str = "<!-- /card -->";

/// The documents that hold the cards, relative to the repository's root.
pub const DOCS: [&str; 1] = ["docs/BENCHMARKS.md"];

/// Which direction a card shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Upload,
    Download,
}

impl Kind {
    /// The direction `rows` measured: download when every row is a download row.
    pub fn of(rows: &[Row]) -> Kind {
        if !rows.is_empty() && rows.iter().all(|r| is_download(&r.method)) {
            Kind::Download
        } else {
            Kind::Upload
        }
    }

    /// The committed results file the card is rendered from.
    #[cfg(test)]
    pub fn results(self) -> &'static str {
        match self {
            Kind::Upload => "docs/bench/results.json",
            Kind::Download => "docs/bench/download/results.json",
        }
    }

    /// The opening marker; the results file the card is rendered from is named in it.
    pub fn begin(self) -> &'static str {
        match self {
            Kind::Upload => {
                "<!-- card: docs/bench/results.json (wanbench --render docs/bench/results.json --out docs/bench --card); checked by `cargo test -p wanbench card` -->"
            }
            Kind::Download => {
                "<!-- card: docs/bench/download/results.json (wanbench --render docs/bench/download/results.json --out docs/bench/download --card); checked by `cargo test -p wanbench card` -->"
            }
        }
    }

    /// The relay without compression, shown where a table measured it, and
    /// the name a reader knows it by.
    fn off(self) -> (&'static str, &'static str) {
        match self {
            Kind::Upload => ("relay-off", "relay, `--compress off`"),
            Kind::Download => ("relay-dl-off", "relay, `--compress off`"),
        }
    }

    /// Methods in the card's row order, with the name a reader knows them by
    /// (a method the results do not hold gets no row).
    fn methods(self) -> [(&'static str, &'static str); 8] {
        match self {
            Kind::Upload => [
                ("relay", "relay (QUIC to the relay)"),
                ("direct-bbr", "direct, kernel BBR"),
                ("direct-cubic", "direct, TCP CUBIC"),
                ("python-sdk", "Azure Python SDK"),
                ("azcopy-bbr", "AzCopy, kernel BBR"),
                ("azcopy-cubic", "AzCopy, TCP CUBIC"),
                (
                    "azcopy-tuned-bbr",
                    "AzCopy tuned (AUTO, 16 MiB), kernel BBR",
                ),
                (
                    "azcopy-tuned-cubic",
                    "AzCopy tuned (AUTO, 16 MiB), TCP CUBIC",
                ),
            ],
            Kind::Download => [
                ("relay-dl", "relay (QUIC from the relay)"),
                ("direct-dl-bbr", "direct, kernel BBR"),
                ("direct-dl-cubic", "direct, TCP CUBIC"),
                ("python-sdk-dl", "Azure Python SDK"),
                ("azcopy-dl-bbr", "AzCopy, kernel BBR"),
                ("azcopy-dl-cubic", "AzCopy, TCP CUBIC"),
                (
                    "azcopy-tuned-dl-bbr",
                    "AzCopy tuned (AUTO, 16 MiB), kernel BBR",
                ),
                (
                    "azcopy-tuned-dl-cubic",
                    "AzCopy tuned (AUTO, 16 MiB), TCP CUBIC",
                ),
            ],
        }
    }
}

/// Why a document's card does not match the results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    #[error("no card block ({begin} … {CARD_END})")]
    Missing { begin: &'static str },
    #[error(
        "the card differs from what the results render to:\n--- document\n{found}\n--- results\n{expected}"
    )]
    Differs { found: String, expected: String },
}

/// The card for `rows`: one table per workload, goodput medians (Mbit/s) per
/// method and link, with each link's share of its TCP ceiling and the
/// client's CPU seconds per GiB, and the commit the runs were measured on.
pub fn card(kind: Kind, rows: &[Row]) -> String {
    let gs: Vec<Group> = groups(rows)
        .into_iter()
        .filter(|g| !g.place.contains(','))
        .collect();
    let mut places: Vec<String> = Vec::new();
    for g in &gs {
        if !places.contains(&g.place) {
            places.push(g.place.clone());
        }
    }
    let mut s = String::new();
    let _ = writeln!(s, "{}\n", provenance(rows));
    let mut workloads: Vec<&Group> = Vec::new();
    for g in &gs {
        if !workloads.iter().any(|w| w.workload == g.workload) {
            workloads.push(g);
        }
    }
    for w in workloads {
        table(&mut s, kind, &gs, w, &places);
    }
    s.push_str("† capped: the runs were stopped at the time cap; the figure is what the link carried until then.");
    if gs.iter().any(|g| g.data.is_some()) {
        s.push_str(
            " On a text-like data set the figures count the files' bytes, which the relay's rows carry compressed (so above the link's ceiling); \"× off\": the compressed relay's goodput over the same relay's with `--compress off`.",
        );
    }
    if gs
        .iter()
        .any(|g| g.capped > 0 && g.tcp_reference_mbit.is_some())
    {
        s.push_str(
            " \"TCP n\" beside a capped direct figure: what as many plain TCP flows of the same controller carried on that link right after (`--tcp-reference`), the path's own ceiling.",
        );
    }
    s
}

/// One workload's table: a row per method, a column per place.
fn table(s: &mut String, kind: Kind, gs: &[Group], w: &Group, places: &[String]) {
    let find = |method: &str, place: &str| {
        gs.iter()
            .find(|g| g.workload == w.workload && g.method == method && g.place == place)
    };
    let mut title = title(w.files, w.bytes);
    if let Some(data) = &w.data {
        let _ = write!(title, " (`{data}` data set)");
    }
    let _ = write!(
        s,
        "| {title}: goodput Mbit/s (of ceiling) · client CPU s/GiB, median |"
    );
    for p in places {
        let _ = write!(s, " {p} |");
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(places.len()));
    s.push('\n');
    let (off, off_name) = kind.off();
    let measured_off = places.iter().any(|p| find(off, p).is_some());
    let mut methods = kind.methods().to_vec();
    if measured_off {
        methods.insert(1, (off, off_name));
    }
    // A table shows only what was measured on it.
    methods.retain(|(m, _)| places.iter().any(|p| find(m, p).is_some()));
    for (i, (method, name)) in methods.into_iter().enumerate() {
        let _ = write!(s, "| {name} |");
        for p in places {
            let text = match (find(method, p), i == 0 && measured_off) {
                (Some(g), true) => with_gain(g, find(off, p)),
                (Some(g), false) => cell(g),
                (None, _) => "–".into(),
            };
            let _ = write!(s, " {text} |");
        }
        s.push('\n');
    }
    s.push('\n');
}

/// The compressed relay's figure with its gain over the same relay without
/// compression on that link, where both were measured.
fn with_gain(g: &Group, off: Option<&Group>) -> String {
    match off.filter(|o| o.goodput_mbit > 0.0) {
        Some(o) => cell_noting(g, &format!("; {:.2}× off", g.goodput_mbit / o.goodput_mbit)),
        None => cell(g),
    }
}

/// "1 file of 256 MiB", "200 files of 256 KiB".
fn title(files: usize, bytes: u64) -> String {
    let each = bytes / files.max(1) as u64;
    let size = if each >= 1 << 20 {
        format!("{} MiB", each >> 20)
    } else {
        format!("{} KiB", each >> 10)
    };
    let plural = if files == 1 { "" } else { "s" };
    format!("{files} file{plural} of {size}")
}

/// One figure: the median, its share of the TCP ceiling, and a mark for capped runs.
fn cell(g: &Group) -> String {
    cell_noting(g, "")
}

/// A cell with `note` inside its brackets, after the share of the ceiling.
fn cell_noting(g: &Group, note: &str) -> String {
    let capped = if g.capped > 0 { "†" } else { "" };
    let tcp = match g.tcp_reference_mbit {
        Some(t) if g.capped > 0 => format!("; TCP {t:.1}"),
        _ => String::new(),
    };
    let cpu = g
        .client_cpu_s_per_gib
        .map_or_else(|| "–".to_string(), |c| format!("{c:.2}"));
    format!(
        "{:.1}{capped} ({:.0} %{tcp}{note}) · {cpu}",
        g.goodput_mbit,
        g.goodput_mbit / g.ceiling_mbit * 100.0
    )
}

/// Runs, repeats and the commit they were measured on, as the rows record it.
fn provenance(rows: &[Row]) -> String {
    let mut commits: Vec<&str> = rows.iter().filter_map(|r| r.commit.as_deref()).collect();
    commits.sort_unstable();
    commits.dedup();
    let unrecorded = rows.iter().filter(|r| r.commit.is_none()).count();
    let commit = match (commits.as_slice(), unrecorded) {
        ([one], 0) => format!("measured on commit {one}"),
        ([], _) => "the commit is not recorded (these results predate the field)".to_string(),
        (many, _) => format!(
            "measured on {} commits ({}){}",
            many.len(),
            many.join(", "),
            if unrecorded > 0 {
                format!(", {unrecorded} runs unrecorded")
            } else {
                String::new()
            }
        ),
    };
    let repeats = rows.iter().map(|r| r.repeat).max().unwrap_or(0);
    let mut azcopy: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.azcopy.as_ref()?.version.as_deref())
        .collect();
    azcopy.sort_unstable();
    azcopy.dedup();
    let azcopy = if azcopy.is_empty() {
        String::new()
    } else {
        format!("; AzCopy {}", azcopy.join(", "))
    };
    format!(
        "{} runs, up to {repeats} repeats per cell; (x %) is the share of the link's TCP goodput ceiling, · the client's CPU seconds per GiB moved; {commit}{azcopy}.",
        rows.len()
    )
}

/// The card block of `doc`, markers excluded, trimmed.
fn block(kind: Kind, doc: &str) -> Option<&str> {
    let start = doc.find(kind.begin())? + kind.begin().len();
    let end = start + doc[start..].find(CARD_END)?;
    Some(doc[start..end].trim())
}

/// Whether `doc`'s card equals `expected`.
pub fn check(kind: Kind, doc: &str, expected: &str) -> Result<(), CardError> {
    let found = block(kind, doc).ok_or(CardError::Missing {
        begin: kind.begin(),
    })?;
    if found == expected.trim() {
        Ok(())
    } else {
        Err(CardError::Differs {
            found: found.to_string(),
            expected: expected.trim().to_string(),
        })
    }
}

/// `doc` with its card block replaced by `card`.
pub fn replace(kind: Kind, doc: &str, card: &str) -> Result<String, CardError> {
    let missing = CardError::Missing {
        begin: kind.begin(),
    };
    let start = doc.find(kind.begin()).ok_or(missing.clone())? + kind.begin().len();
    let end = start + doc[start..].find(CARD_END).ok_or(missing)?;
    Ok(format!(
        "{}\n\n{}\n\n{}",
        &doc[..start],
        card.trim(),
        &doc[end..]
    ))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn committed_rows(kind: Kind) -> Vec<Row> {
        let path = kind.results();
        let text =
            std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The check the test suite runs: the documents' cards, one per
    /// direction, are what the committed results render to.
    #[test]
    fn benchmarks_cards_match_the_results_files() {
        for kind in [Kind::Upload, Kind::Download] {
            let rows = committed_rows(kind);
            assert_eq!(Kind::of(&rows), kind, "{}", kind.results());
            let expected = card(kind, &rows);
            for doc in DOCS {
                let text = std::fs::read_to_string(repo().join(doc))
                    .unwrap_or_else(|e| panic!("{doc}: {e}"));
                if let Err(e) = check(kind, &text, &expected) {
                    panic!(
                        "{doc}: {e}\nregenerate with: wanbench --render {} --out DIR --card",
                        kind.results()
                    );
                }
            }
        }
    }

    /// The check can fail: one figure changed by hand is caught, and so is a
    /// document without the block.
    #[test]
    fn an_edited_figure_or_a_missing_block_is_caught() {
        let kind = Kind::Upload;
        let rows = committed_rows(kind);
        let expected = card(kind, &rows);
        let doc = replace(
            kind,
            &format!("intro\n{}\n{CARD_END}\nrest\n", kind.begin()),
            &expected,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check(kind, &doc, &expected), Ok(()));
        assert!(doc.starts_with("intro\n") && doc.ends_with("rest\n"));
        // Change one digit of the relay's first figure.
        let row = expected
            .find("| relay (QUIC to the relay) | ")
            .unwrap_or_else(|| panic!("no relay row in:\n{expected}"));
        let pos = row
            + expected[row..]
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or_else(|| panic!("no figure in the relay row"));
        let mut edited = expected.clone();
        let other = if &expected[pos..=pos] == "9" {
            "8"
        } else {
            "9"
        };
        edited.replace_range(pos..=pos, other);
        let tampered = replace(kind, &doc, &edited).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            check(kind, &tampered, &expected),
            Err(CardError::Differs { .. })
        ));
        assert_eq!(
            check(kind, "no card here", &expected),
            Err(CardError::Missing {
                begin: kind.begin()
            })
        );
        // The other direction's block is not this one's.
        assert!(matches!(
            check(Kind::Download, &doc, &expected),
            Err(CardError::Missing { .. })
        ));
    }

    /// A workload measured on the logs data set gets a table of its own,
    /// with the relay's row without compression and the gain beside the
    /// compressed one; the random-data tables stay as they were.
    #[test]
    fn a_log_data_run_gets_its_own_table_with_the_gain_over_off() {
        // The committed matrix's random-data rows only: the logs rows this
        // test makes are then the only ones, whatever the results file holds.
        let rows: Vec<Row> = committed_rows(Kind::Download)
            .into_iter()
            .filter(|r| r.data.is_none())
            .collect();
        let plain = card(Kind::Download, &rows);
        let one: Vec<Row> = rows
            .iter()
            .filter(|r| r.files == 1 && r.profile.rtt_ms == 200.0 && r.profile.loss == 0.01)
            .cloned()
            .collect();
        assert!(
            !one.is_empty(),
            "a 200 ms / 1 % download row in the results"
        );
        let mut logs: Vec<Row> = Vec::new();
        for r in one.iter().filter(|r| r.method == "relay-dl") {
            let mut on = r.clone();
            on.data = Some("logs".into());
            on.goodput_mbit = 3.0 * r.goodput_mbit;
            let mut off = r.clone();
            off.data = Some("logs".into());
            off.method = "relay-dl-off".into();
            logs.extend([on, off]);
        }
        for r in one.iter().filter(|r| r.method == "direct-dl-bbr") {
            let mut d = r.clone();
            d.data = Some("logs".into());
            logs.push(d);
        }
        let text = card(Kind::Download, &[rows.clone(), logs].concat());
        let at = text
            .find("| 1 file of 256 MiB (`logs` data set): goodput Mbit/s (of ceiling) · client CPU s/GiB, median |")
            .unwrap_or_else(|| panic!("no logs table in:\n{text}"));
        let logs_table = &text[at..];
        assert!(logs_table.contains("; 3.00× off) · "), "{logs_table}");
        assert!(
            logs_table.contains("| relay, `--compress off` |"),
            "{logs_table}"
        );
        assert!(
            !logs_table.contains("Python"),
            "only what was measured: {logs_table}"
        );
        assert!(logs_table.contains("\"× off\""), "{logs_table}");
        // The random tables are what they were (only the run count above
        // them changed): no off row, no gain.
        let tables = |t: &str| {
            let start = t.find("\n\n").unwrap_or(0);
            t[start..t.find("\n†").unwrap_or(t.len())].to_string()
        };
        assert!(tables(&text).starts_with(&tables(&plain)), "{text}");
        assert!(!text[..at].contains("× off"), "{text}");
    }

    /// Rows from more than one commit, or without one, say so.
    #[test]
    fn provenance_names_the_commit_or_says_it_is_unrecorded() {
        let mut rows = committed_rows(Kind::Upload);
        rows.truncate(2);
        rows[0].commit = None;
        rows[1].commit = None;
        assert!(provenance(&rows).contains("not recorded"));
        rows[0].commit = Some("abc1234".into());
        rows[1].commit = Some("abc1234".into());
        assert!(provenance(&rows).contains("measured on commit abc1234"));
        rows[1].commit = Some("def5678".into());
        assert!(provenance(&rows).contains("2 commits"));
    }

    /// AzCopy rows take their place beside the relay once the results hold
    /// them, with the AzCopy version they ran in the provenance line; a
    /// method the results lack gets no row.
    #[test]
    fn azcopy_rows_appear_with_their_version_and_cpu() {
        let rows = committed_rows(Kind::Upload);
        let before = card(Kind::Upload, &rows);
        assert!(!before.contains("AzCopy"), "{before}");
        let mut with: Vec<Row> = rows.clone();
        for r in rows.iter().filter(|r| r.method == "direct-bbr") {
            let mut a = r.clone();
            a.method = "azcopy-bbr".into();
            a.goodput_mbit = 12.5;
            a.client_cpu_s = 0.0;
            a.azcopy = Some(crate::row::AzcopyRun {
                version: Some("10.32.2".into()),
                tuning: "defaults".into(),
                concurrency: Some(32),
                block_size_bytes: Some(8 << 20),
                job_end_logged: true,
                process_seconds: a.seconds + 1.0,
            });
            with.push(a);
        }
        let text = card(Kind::Upload, &with);
        assert!(text.contains("| AzCopy, kernel BBR | 12.5 ("), "{text}");
        assert!(text.contains(" · 0.00 |"), "{text}");
        assert!(!text.contains("AzCopy, TCP CUBIC"), "{text}");
        assert!(text.contains("; AzCopy 10.32.2."), "{text}");
    }

    /// A capped direct cell carries the plain-TCP ceiling measured beside its
    /// runs, and the footnote says what it is; without a reference, neither.
    #[test]
    fn a_capped_direct_cell_shows_the_tcp_ceiling_beside_it() {
        let mut rows: Vec<Row> = committed_rows(Kind::Upload)
            .into_iter()
            .filter(|r| r.method == "direct-cubic" && r.files == 1)
            .take(1)
            .collect();
        assert_eq!(rows.len(), 1, "a direct-cubic row in the results");
        rows[0].capped = true;
        assert!(!card(Kind::Upload, &rows).contains("TCP 4.4"));
        rows[0].tcp_reference = Some(crate::row::TcpReference {
            cc: "cubic".into(),
            flows: 8,
            seconds: 60.0,
            goodput_mbit: 4.44,
        });
        let text = card(Kind::Upload, &rows);
        assert!(text.contains("%; TCP 4.4)"), "{text}");
        assert!(
            text.contains("\"TCP n\" beside a capped direct figure"),
            "{text}"
        );
        // Not capped: the figure stands alone.
        rows[0].capped = false;
        assert!(!card(Kind::Upload, &rows).contains("TCP 4.4"));
    }
}
