//! `--sync-rerun`'s results: one row per timed run, the medians of each
//! kind, the paired ratios, and the text table and JSON they are written as.

use serde::{Deserialize, Serialize};

use crate::plan::Profile;

/// What a timed run was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `relay-client sync TREE PREFIX` after the round's changes.
    SyncRerun,
    /// `relay-client upload` of exactly the round's changed files, to a
    /// prefix of their own: what those bytes alone cost on the same link.
    ChangedAlone,
    /// The first, untimed-in-the-ratio sync of the whole tree.
    FirstSync,
    /// `relay-client ls` of the synced prefix after the round: the listing
    /// every re-run pays before it knows what changed, alone (not in the
    /// ratio; it says how much of the re-run's time is the listing).
    BareListing,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::SyncRerun => "sync re-run",
            Kind::ChangedAlone => "changed alone",
            Kind::FirstSync => "first sync",
            Kind::BareListing => "bare listing",
        }
    }
}

/// One run, measured from outside the client (wall, CPU, RSS, link) and
/// from its `--json` (its own clock, files sent, bytes read).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SyncRow {
    pub profile: Profile,
    pub kind: Kind,
    pub round: u32,
    /// 1 or 2: whether it ran first or second in its round.
    pub order: u32,
    pub tree_files: usize,
    pub tree_bytes: u64,
    pub changed_files: usize,
    pub changed_bytes: u64,
    /// Files the client committed (the sync's `sync.sent`).
    pub files_sent: u64,
    /// Sync only: the bytes of local files it read (`sync.bytes_read`).
    pub bytes_read: Option<u64>,
    /// Sync only: files it left unread by the index (`sync.skipped_unchanged`).
    pub skipped_unchanged: Option<u64>,
    /// Spawn to exit.
    pub wall_seconds: f64,
    /// The client's own clock (`totals.seconds`).
    pub client_seconds: f64,
    pub client_cpu_s: f64,
    pub relay_cpu_s: f64,
    /// CPU seconds of the storage process (Azurite, single-threaded, or the
    /// stand-in) during the run: where a listing and the sends share it.
    #[serde(default)]
    pub storage_cpu_s: f64,
    pub peak_rss_mib: f64,
    /// IP bytes the link forwarded site -> cloud and cloud -> site.
    pub link_up_bytes: u64,
    pub link_down_bytes: u64,
    pub warm_start: Option<bool>,
    pub verified: bool,
    pub error: Option<String>,
    pub commit: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Medians over one profile's rounds, and the ratios the issue asks for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub profile: Profile,
    pub rounds: usize,
    pub changed_files: f64,
    pub changed_bytes: f64,
    pub rerun_wall_s: f64,
    pub alone_wall_s: f64,
    pub rerun_link_up_bytes: f64,
    pub alone_link_up_bytes: f64,
    pub rerun_files_sent: f64,
    pub rerun_bytes_read: f64,
    pub rerun_cpu_s: f64,
    pub alone_cpu_s: f64,
    /// Median wall of the bare listings (0 when none ran).
    #[serde(default)]
    pub listing_wall_s: f64,
    /// Median storage CPU seconds of the re-runs, the changed-alone uploads
    /// and the bare listings (0 when none ran).
    #[serde(default)]
    pub storage_cpu_s: [f64; 3],
    /// Median over rounds of (re-run wall / changed-alone wall of the same round).
    pub wall_ratio: f64,
    /// Median over rounds of (re-run link bytes up / changed bytes).
    pub link_ratio: f64,
    /// The same for the changed-alone upload (its own protocol overhead).
    pub alone_link_ratio: f64,
    pub all_verified: bool,
}

/// One summary per profile, in the order the rows name them.
pub fn summarize(rows: &[SyncRow]) -> Vec<Summary> {
    let mut profiles: Vec<Profile> = Vec::new();
    for r in rows {
        if !profiles.contains(&r.profile) {
            profiles.push(r.profile);
        }
    }
    profiles
        .into_iter()
        .map(|p| summarize_profile(p, rows))
        .collect()
}

fn summarize_profile(profile: Profile, rows: &[SyncRow]) -> Summary {
    let of = |k: Kind| -> Vec<&SyncRow> {
        rows.iter()
            .filter(|r| r.profile == profile && r.kind == k)
            .collect()
    };
    let (rerun, alone) = (of(Kind::SyncRerun), of(Kind::ChangedAlone));
    let listings = of(Kind::BareListing);
    let med =
        |v: &[&SyncRow], f: &dyn Fn(&SyncRow) -> f64| median(v.iter().map(|r| f(r)).collect());
    let pairs: Vec<(&SyncRow, &SyncRow)> = rerun
        .iter()
        .filter_map(|s| alone.iter().find(|a| a.round == s.round).map(|a| (*s, *a)))
        .collect();
    let per_byte = |up: u64, changed: u64| up as f64 / (changed.max(1)) as f64;
    Summary {
        profile,
        rounds: pairs.len(),
        changed_files: med(&rerun, &|r| r.changed_files as f64),
        changed_bytes: med(&rerun, &|r| r.changed_bytes as f64),
        rerun_wall_s: med(&rerun, &|r| r.wall_seconds),
        alone_wall_s: med(&alone, &|r| r.wall_seconds),
        rerun_link_up_bytes: med(&rerun, &|r| r.link_up_bytes as f64),
        alone_link_up_bytes: med(&alone, &|r| r.link_up_bytes as f64),
        rerun_files_sent: med(&rerun, &|r| r.files_sent as f64),
        rerun_bytes_read: med(&rerun, &|r| r.bytes_read.unwrap_or(0) as f64),
        rerun_cpu_s: med(&rerun, &|r| r.client_cpu_s),
        alone_cpu_s: med(&alone, &|r| r.client_cpu_s),
        storage_cpu_s: [&rerun, &alone, &listings].map(|runs| {
            if runs.is_empty() {
                0.0
            } else {
                med(runs, &|r| r.storage_cpu_s)
            }
        }),
        listing_wall_s: if listings.is_empty() {
            0.0
        } else {
            med(&listings, &|r| r.wall_seconds)
        },
        wall_ratio: median(
            pairs
                .iter()
                .map(|(s, a)| s.wall_seconds / a.wall_seconds.max(f64::MIN_POSITIVE))
                .collect(),
        ),
        link_ratio: median(
            pairs
                .iter()
                .map(|(s, _)| per_byte(s.link_up_bytes, s.changed_bytes))
                .collect(),
        ),
        alone_link_ratio: median(
            pairs
                .iter()
                .map(|(_, a)| per_byte(a.link_up_bytes, a.changed_bytes))
                .collect(),
        ),
        all_verified: rows
            .iter()
            .filter(|r| r.profile == profile)
            .all(|r| r.verified),
    }
}

fn mb(b: f64) -> String {
    format!("{:.2}", b / 1e6)
}

/// The medians table (Markdown, also printed).
pub fn summary_table(sums: &[Summary]) -> String {
    let mut t = String::from(
        "| profile | rounds | changed files | changed MB | re-run s | changed-alone s | bare listing s | **re-run / alone** | re-run up MB | **re-run up / changed** | alone up / changed | files sent | bytes read MB | CPU s re-run / alone | storage CPU s re-run / alone / listing | verified |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for s in sums {
        t.push_str(&format!(
            "| {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | **{:.2}×** | {} | **{:.3}×** | {:.3}× | {:.0} | {} | {:.2} / {:.2} | {:.2} / {:.2} / {:.2} | {} |\n",
            s.profile.label(),
            s.rounds,
            s.changed_files,
            mb(s.changed_bytes),
            s.rerun_wall_s,
            s.alone_wall_s,
            s.listing_wall_s,
            s.wall_ratio,
            mb(s.rerun_link_up_bytes),
            s.link_ratio,
            s.alone_link_ratio,
            s.rerun_files_sent,
            mb(s.rerun_bytes_read),
            s.rerun_cpu_s,
            s.alone_cpu_s,
            s.storage_cpu_s[0],
            s.storage_cpu_s[1],
            s.storage_cpu_s[2],
            if s.all_verified { "yes" } else { "NO" },
        ));
    }
    t
}

/// Every run (Markdown).
pub fn runs_table(rows: &[SyncRow]) -> String {
    let mut t = String::from(
        "| profile | round | order | run | changed files | changed MB | sent | read MB | wall s | client s | CPU s | relay CPU s | storage CPU s | peak RSS MiB | up MB | down MB | warm | verified |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {} | {} | {} | {} |\n",
            r.profile.label(),
            r.round,
            r.order,
            r.kind.name(),
            r.changed_files,
            mb(r.changed_bytes as f64),
            r.files_sent,
            r.bytes_read.map(|b| mb(b as f64)).unwrap_or_else(|| "-".into()),
            r.wall_seconds,
            r.client_seconds,
            r.client_cpu_s,
            r.relay_cpu_s,
            r.storage_cpu_s,
            r.peak_rss_mib,
            mb(r.link_up_bytes as f64),
            mb(r.link_down_bytes as f64),
            match r.warm_start {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            },
            if r.verified {
                "yes".to_string()
            } else {
                format!("NO: {}", r.error.as_deref().unwrap_or("?"))
            },
        ));
    }
    t
}

/// `sync-rerun.json` (setup, medians, every run) and `sync-rerun.md`; the
/// medians table also goes to stdout.
pub fn write(out: &std::path::Path, rows: &[SyncRow], setup: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let sums = summarize(rows);
    let json = serde_json::json!({ "setup": setup, "summary": sums, "runs": rows });
    let text = serde_json::to_string_pretty(&json).context("encode")?;
    std::fs::write(out.join("sync-rerun.json"), text + "\n").context("write sync-rerun.json")?;
    let table = summary_table(&sums);
    let md = format!(
        "# wanbench --sync-rerun\n\n{setup}\n\n## Medians\n\n{table}\n\
         re-run / alone: the median over rounds of the sync's wall time (spawn to exit, its \
         listing included) over the changed-alone upload's of the same round. up / changed: \
         IP bytes the link carried site -> cloud over the changed files' bytes.\n\n\
         ## Every run\n\n{}",
        runs_table(rows)
    );
    std::fs::write(out.join("sync-rerun.md"), md).context("write sync-rerun.md")?;
    print!("{table}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: Kind, round: u32, wall: f64, up: u64) -> SyncRow {
        SyncRow {
            profile: Profile::new(200.0, 0.01, 200.0),
            kind,
            round,
            order: 1,
            tree_files: 100,
            tree_bytes: 1000,
            changed_files: 1,
            changed_bytes: 100,
            files_sent: 1,
            bytes_read: Some(100),
            skipped_unchanged: Some(99),
            wall_seconds: wall,
            client_seconds: wall,
            client_cpu_s: 0.1,
            relay_cpu_s: 0.1,
            storage_cpu_s: wall / 2.0,
            peak_rss_mib: 10.0,
            link_up_bytes: up,
            link_down_bytes: 0,
            warm_start: Some(true),
            verified: true,
            error: None,
            commit: None,
        }
    }

    #[test]
    fn ratios_pair_each_round_and_take_the_median() {
        let rows = vec![
            row(Kind::FirstSync, 0, 100.0, 100_000),
            row(Kind::SyncRerun, 1, 3.0, 120),
            row(Kind::ChangedAlone, 1, 2.0, 110),
            row(Kind::ChangedAlone, 2, 2.0, 110),
            row(Kind::SyncRerun, 2, 2.2, 130),
            row(Kind::SyncRerun, 3, 2.4, 125),
            row(Kind::ChangedAlone, 3, 2.0, 110),
        ];
        let s = &summarize(&rows)[0];
        assert_eq!(s.rounds, 3);
        // Per round 1.5, 1.1, 1.2: the median is 1.2 (not 2.4 / 2.0 by chance).
        assert!((s.wall_ratio - 1.2).abs() < 1e-9, "{}", s.wall_ratio);
        assert!((s.link_ratio - 1.25).abs() < 1e-9, "{}", s.link_ratio);
        assert!((s.alone_link_ratio - 1.1).abs() < 1e-9);
        // Storage CPU: medians of the re-runs (1.5, 1.1, 1.2) and the
        // uploads alone; no listing ran.
        assert_eq!(s.storage_cpu_s, [1.2, 1.0, 0.0]);
        assert!(s.all_verified);
        assert!(summary_table(&summarize(&rows)).contains("**1.20×**"));
        assert_eq!(runs_table(&rows).lines().count(), 2 + rows.len());
    }
}
