//! The headline cards: the WAN-lab matrix's medians as README.md and
//! docs/BENCHMARKS.md show them, rendered from the results files they cite, so
//! the figures a reader sees can be checked against the runs behind them.
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

    /// Methods in the card's row order, with the name a reader knows them by.
    fn methods(self) -> [(&'static str, &'static str); 4] {
        match self {
            Kind::Upload => [
                ("relay", "relay (QUIC to the relay)"),
                ("direct-bbr", "direct, kernel BBR"),
                ("direct-cubic", "direct, TCP CUBIC"),
                ("python-sdk", "Azure Python SDK"),
            ],
            Kind::Download => [
                ("relay-dl", "relay (QUIC from the relay)"),
                ("direct-dl-bbr", "direct, kernel BBR"),
                ("direct-dl-cubic", "direct, TCP CUBIC"),
                ("python-sdk-dl", "Azure Python SDK"),
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
/// method and link, with each link's share of its TCP ceiling for the relay,
/// and the commit the runs were measured on.
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
    let mut workloads: Vec<(String, usize, u64)> = Vec::new();
    for g in &gs {
        if !workloads.iter().any(|(w, _, _)| *w == g.workload) {
            workloads.push((g.workload.clone(), g.files, g.bytes));
        }
    }
    for (workload, files, bytes) in workloads {
        let _ = write!(s, "| {}: goodput Mbit/s, median |", title(files, bytes));
        for p in &places {
            let _ = write!(s, " {p} |");
        }
        s.push_str("\n|---|");
        s.push_str(&"---:|".repeat(places.len()));
        s.push('\n');
        for (method, name) in kind.methods() {
            let _ = write!(s, "| {name} |");
            for p in &places {
                let cell = gs
                    .iter()
                    .find(|g| g.workload == workload && g.method == method && &g.place == p)
                    .map(cell)
                    .unwrap_or_else(|| "–".into());
                let _ = write!(s, " {cell} |");
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s.push_str("† capped: the runs were stopped at the time cap; the figure is what the link carried until then.");
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
    let capped = if g.capped > 0 { "†" } else { "" };
    let tcp = match g.tcp_reference_mbit {
        Some(t) if g.capped > 0 => format!("; TCP {t:.1}"),
        _ => String::new(),
    };
    format!(
        "{:.1}{capped} ({:.0} %{tcp})",
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
    format!(
        "{} runs, up to {repeats} repeats per cell; (x %) is the share of the link's TCP goodput ceiling; {commit}.",
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

    /// The check the test suite runs: both documents' cards, one per
    /// direction, are what the committed results render to.
    #[test]
    fn readme_and_benchmarks_cards_match_the_results_files() {
        for kind in [Kind::Upload, Kind::Download] {
            let rows = committed_rows(kind);
            assert_eq!(Kind::of(&rows), kind, "{}", kind.results());
            let expected = card(kind, &rows);
            for doc in ["README.md", "docs/BENCHMARKS.md"] {
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
