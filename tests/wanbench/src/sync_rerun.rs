//! `--sync-rerun`: issue 58's WAN target. On one emulated link (client in
//! `site`, Azurite and the relay in `cloud`), a tree is synced once through
//! the relay (verified, not in the ratio); then each round changes K % of
//! its files in place and times, in alternating order, `relay-client sync`
//! of the whole tree (its listing included: a user pays for it) and
//! `relay-client upload` of exactly the changed files to a prefix of their
//! own (what those bytes alone cost). Both are separate processes with the
//! same connection flags, token, path cache (warm start) and relay; the
//! sync keeps its index from the run before (the point of it). Every blob is
//! hashed against its file after every round.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use linklab::{Lab, LinkProfile, Side};
use serde_json::Value;

use crate::child;
use crate::cloud::{self, Cloud, CloudBins, SYNC_TOKEN};
use crate::plan::{Method, Profile};
use crate::storage_delay::DelaySpec;
use crate::sync_report::{Kind, SyncRow};
use crate::sync_tree::{SizeMix, TreeFile};

const CONTAINER: &str = cloud::READABLE_CONTAINER;
/// The sync's prefix; each round's changed-alone upload goes to `changed-rN`.
const SYNC_PREFIX: &str = "sync";
/// The first sync moves the whole tree: minutes at 200 ms, not the timed cap.
const FIRST_SYNC_CAP: Duration = Duration::from_secs(3 * 3600);

/// What `--sync-rerun` runs, from the flags.
pub struct SyncPlan {
    pub files: usize,
    pub change_pct: f64,
    pub mix: SizeMix,
    pub repeats: u32,
    /// Cap of each timed run.
    pub cap: Duration,
    pub relay_congestion: String,
    pub client_args: Vec<String>,
    pub nic_offload: bool,
    pub storage_delay: Option<DelaySpec>,
}

pub struct SyncBench<'a> {
    pub plan: &'a SyncPlan,
    pub cloud_bins: CloudBins,
    pub relay_client: PathBuf,
    pub work: PathBuf,
    pub on_row: &'a mut dyn FnMut(&SyncRow),
}

/// A client run as measured from outside, and what it printed.
struct Measured {
    done: child::Finished,
    relay_cpu_s: f64,
    storage_cpu_s: f64,
    link_up: u64,
    link_down: u64,
    stdout: String,
    stderr: PathBuf,
}

/// One profile's lab, relay and rounds.
struct Stage<'l> {
    lab: &'l Lab,
    cloud: Cloud,
    dir: PathBuf,
    profile: Profile,
}

impl SyncBench<'_> {
    /// One profile: a fresh lab, storage, relay and index; the first sync of
    /// `tree`, then the rounds (numbered from `first_round`, so each profile
    /// changes files of its own).
    pub fn run_profile(
        &mut self,
        profile: Profile,
        tree_root: &Path,
        tree: &mut [TreeFile],
        first_round: u32,
    ) -> anyhow::Result<Vec<SyncRow>> {
        let lab = Lab::start(LinkProfile {
            offload: self.plan.nic_offload,
            ..LinkProfile::new(profile.rtt_ms, profile.loss, profile.rate_mbit)
        })
        .context("start the lab")?;
        let dir = self.work.join(format!(
            "sync-logs-{}",
            crate::bench::slug(&profile.label())
        ));
        std::fs::create_dir_all(&dir).context("create log dir")?;
        // A profile starts cold: no path cache, no index (its storage is new).
        for stale in ["paths.json", "sync-index.sqlite"] {
            let _ = std::fs::remove_file(dir.join(stale));
        }
        let cloud = Cloud::start(
            &lab,
            &self.cloud_bins,
            &self.plan.relay_congestion,
            self.plan.storage_delay,
            &dir,
        )?;
        cloud::ensure_container(&lab, CONTAINER)?;
        let mut stage = Stage {
            lab: &lab,
            cloud,
            dir,
            profile,
        };
        let mut rows = Vec::new();
        let all: Vec<usize> = (0..tree.len()).collect();
        let first = self.sync_run(&mut stage, tree_root, tree, &all, 0, 1, Kind::FirstSync)?;
        eprintln!("{}", progress(&first));
        (self.on_row)(&first);
        if !first.verified {
            bail!(
                "the first sync did not verify: {}",
                first.error.as_deref().unwrap_or("?")
            );
        }
        rows.push(first);
        for k in 0..self.plan.repeats {
            crate::interrupt::check()?;
            stage.cloud.check_alive()?;
            let round = first_round + k;
            let changed =
                crate::sync_tree::change(tree, self.plan.change_pct, round, self.plan.mix);
            writeback();
            // Odd rounds sync first, even rounds upload first: whatever the
            // first run leaves warm (page cache, relay, path cache) favours
            // each kind alike.
            let sync_first = k % 2 == 0;
            for order in 1..=2 {
                crate::interrupt::check()?;
                let row = if (order == 1) == sync_first {
                    self.sync_run(
                        &mut stage,
                        tree_root,
                        tree,
                        &changed,
                        round,
                        order,
                        Kind::SyncRerun,
                    )?
                } else {
                    self.alone_run(&mut stage, tree, &changed, round, order)?
                };
                self.keep(&mut rows, row);
            }
            let row = self.listing_run(&mut stage, tree, round)?;
            self.keep(&mut rows, row);
        }
        Ok(rows)
    }

    /// A finished run: its progress line, the caller's hook, the rows.
    fn keep(&mut self, rows: &mut Vec<SyncRow>, row: SyncRow) {
        eprintln!("{}", progress(&row));
        (self.on_row)(&row);
        rows.push(row);
    }

    /// `relay-client sync TREE CONTAINER/sync`, then every blob of the tree
    /// checked against its file's SHA-256.
    #[allow(clippy::too_many_arguments)]
    fn sync_run(
        &self,
        stage: &mut Stage,
        tree_root: &Path,
        tree: &[TreeFile],
        changed: &[usize],
        round: u32,
        order: u32,
        kind: Kind,
    ) -> anyhow::Result<SyncRow> {
        let tag = format!("{}-r{round}", slug_kind(kind));
        let mut cmd = self.client(stage, "sync");
        cmd.arg(tree_root)
            .arg(format!("{CONTAINER}/{SYNC_PREFIX}"))
            .arg("--index")
            .arg(stage.dir.join("sync-index.sqlite"));
        let cap = if kind == Kind::FirstSync {
            FIRST_SYNC_CAP
        } else {
            self.plan.cap
        };
        let m = measure(stage, cmd, &tag, cap)?;
        let expect: Vec<(String, String)> = tree
            .iter()
            .map(|f| (format!("{SYNC_PREFIX}/{}", f.rel), f.sha256.clone()))
            .collect();
        let mut row = self.row(stage, kind, round, order, tree, changed, &m);
        let v: Value = serde_json::from_str(m.stdout.trim()).unwrap_or(Value::Null);
        let sync = v.get("sync");
        let count = |k: &str| sync.and_then(|s| s.get(k)).and_then(Value::as_u64);
        row.files_sent = count("sent").unwrap_or(0);
        row.bytes_read = count("bytes_read");
        row.skipped_unchanged = count("skipped_unchanged");
        let mut why = client_problem(&m, &v);
        if why.is_none() && row.files_sent != changed.len() as u64 {
            why = Some(format!(
                "sent {} files, {} changed",
                row.files_sent,
                changed.len()
            ));
        }
        finish(stage.lab, &mut row, why, expect)?;
        Ok(row)
    }

    /// `relay-client upload` of exactly the changed files (their own paths:
    /// the same bytes, as warm in the page cache as the sync finds them) to
    /// `changed-rN/`, checked, then removed so storage holds what it held.
    fn alone_run(
        &self,
        stage: &mut Stage,
        tree: &[TreeFile],
        changed: &[usize],
        round: u32,
        order: u32,
    ) -> anyhow::Result<SyncRow> {
        let prefix = format!("changed-r{round}");
        let mut cmd = self.client(stage, "upload");
        cmd.args(changed.iter().map(|&i| &tree[i].path))
            .arg("--to")
            .arg(format!("{CONTAINER}/{prefix}"));
        let m = measure(stage, cmd, &format!("alone-r{round}"), self.plan.cap)?;
        let expect: Vec<(String, String)> = changed
            .iter()
            .map(|&i| {
                let base = tree[i].rel.rsplit('/').next().unwrap_or_default();
                (format!("{prefix}/{base}"), tree[i].sha256.clone())
            })
            .collect();
        let blobs: Vec<String> = expect.iter().map(|(b, _)| b.clone()).collect();
        let mut row = self.row(stage, Kind::ChangedAlone, round, order, tree, changed, &m);
        let v: Value = serde_json::from_str(m.stdout.trim()).unwrap_or(Value::Null);
        let report = crate::client::parse(Method::Relay, &m.stdout).ok();
        row.files_sent = report
            .map(|r| r.files.iter().filter(|f| f.committed).count() as u64)
            .unwrap_or(0);
        finish(stage.lab, &mut row, client_problem(&m, &v), expect)?;
        cloud::delete_blobs(stage.lab, CONTAINER, blobs)?;
        Ok(row)
    }

    /// `relay-client ls --json` of the synced prefix, on the same
    /// connection flags: what the listing alone costs on this link. Verified
    /// when it lists every file of the tree.
    fn listing_run(
        &self,
        stage: &mut Stage,
        tree: &[TreeFile],
        round: u32,
    ) -> anyhow::Result<SyncRow> {
        let mut cmd = self.connection(stage, "ls");
        cmd.arg(format!("{CONTAINER}/{SYNC_PREFIX}/")).arg("--json");
        let m = measure(stage, cmd, &format!("ls-r{round}"), self.plan.cap)?;
        let mut row = self.row(stage, Kind::BareListing, round, 3, tree, &[], &m);
        // One JSON line per blob, then the total.
        let listed = m
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "blob")
            .count();
        row.error = if m.done.exit_code != Some(0) {
            Some(format!("ls failed: {}", last_line(&m.stderr)))
        } else if listed != tree.len() {
            Some(format!("ls listed {listed} of {} blobs", tree.len()))
        } else {
            None
        };
        row.verified = row.error.is_none();
        Ok(row)
    }

    /// relay-client SUBCOMMAND with the connection flags both kinds share.
    fn client(&self, stage: &Stage, sub: &str) -> Command {
        let mut cmd = self.connection(stage, sub);
        cmd.args(["--json", "--quiet"]);
        cmd
    }

    /// relay-client SUBCOMMAND with the relay, its certificate, the
    /// controller, the path cache, the extra client flags and the token.
    fn connection(&self, stage: &Stage, sub: &str) -> Command {
        let mut cmd = Command::new(&self.relay_client);
        cmd.arg(sub)
            .arg("--relay")
            .arg(stage.cloud.relay_addr.to_string())
            .args(["--relay-cert-sha256", &stage.cloud.fingerprint])
            .args(["--congestion", &self.plan.relay_congestion])
            .arg("--path-cache")
            .arg(stage.dir.join("paths.json"))
            .args(&self.plan.client_args)
            .env("RELAY_TOKEN", SYNC_TOKEN);
        cloud::strip_proxies(&mut cmd);
        cmd
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        stage: &Stage,
        kind: Kind,
        round: u32,
        order: u32,
        tree: &[TreeFile],
        changed: &[usize],
        m: &Measured,
    ) -> SyncRow {
        let report = crate::client::parse(Method::Relay, &m.stdout).ok();
        SyncRow {
            profile: stage.profile,
            kind,
            round,
            order,
            tree_files: tree.len(),
            tree_bytes: tree.iter().map(|f| f.bytes).sum(),
            changed_files: changed.len(),
            changed_bytes: changed.iter().map(|&i| tree[i].bytes).sum(),
            files_sent: 0,
            bytes_read: None,
            skipped_unchanged: None,
            wall_seconds: m.done.wall.as_secs_f64(),
            client_seconds: report.as_ref().map_or(0.0, |r| r.seconds),
            client_cpu_s: m.done.cpu_s,
            relay_cpu_s: m.relay_cpu_s,
            storage_cpu_s: m.storage_cpu_s,
            peak_rss_mib: m.done.max_rss_kib as f64 / 1024.0,
            link_up_bytes: m.link_up,
            link_down_bytes: m.link_down,
            warm_start: report.and_then(|r| r.warm_start),
            verified: false,
            error: None,
            commit: crate::bench::source_commit(),
        }
    }
}

/// Runs `cmd` in `site` (stdout and stderr to TAG.json / TAG.err in the
/// profile's log dir), with the relay's CPU and the link's bytes around it.
fn measure(stage: &Stage, mut cmd: Command, tag: &str, cap: Duration) -> anyhow::Result<Measured> {
    let out_path = stage.dir.join(format!("{tag}.json"));
    let err_path = stage.dir.join(format!("{tag}.err"));
    let create =
        |p: &Path| std::fs::File::create(p).with_context(|| format!("create {}", p.display()));
    cmd.stdin(std::process::Stdio::null())
        .stdout(create(&out_path)?)
        .stderr(create(&err_path)?);
    stage.lab.enter_on_spawn(Side::Site, &mut cmd)?;
    let relay_pid = stage.cloud.relay_pid();
    let storage_pid = stage.cloud.azurite_pid();
    let relay0 = child::cpu_seconds(relay_pid)?;
    let storage0 = child::cpu_seconds(storage_pid)?;
    let s0 = stage.lab.stats();
    let done = child::run_capped(cmd, cap)?;
    let s1 = stage.lab.stats();
    Ok(Measured {
        done,
        relay_cpu_s: child::cpu_seconds(relay_pid)? - relay0,
        storage_cpu_s: child::cpu_seconds(storage_pid)? - storage0,
        link_up: s1.site_to_cloud.forwarded_bytes - s0.site_to_cloud.forwarded_bytes,
        link_down: s1.cloud_to_site.forwarded_bytes - s0.cloud_to_site.forwarded_bytes,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: err_path,
    })
}

/// Why the client's own account of the run is not a success, if it is not.
fn client_problem(m: &Measured, v: &Value) -> Option<String> {
    if m.done.capped {
        return Some("capped".into());
    }
    if m.done.exit_code != Some(0) || v.get("ok").and_then(Value::as_bool) != Some(true) {
        return Some(format!(
            "exit {:?}: {}",
            m.done.exit_code,
            last_line(&m.stderr)
        ));
    }
    None
}

/// Hashes every expected blob (from the cloud side: the link's counters and
/// path are left alone) and settles the row's verdict.
fn finish(
    lab: &Lab,
    row: &mut SyncRow,
    why: Option<String>,
    expect: Vec<(String, String)>,
) -> anyhow::Result<()> {
    let n = expect.len();
    let verdicts = cloud::check_blobs(lab, CONTAINER, expect)?;
    let bad = verdicts
        .iter()
        .filter(|v| **v != cloud::Verdict::Same)
        .count();
    row.error = match (why, bad) {
        (Some(w), _) => Some(w),
        (None, 0) => None,
        (None, b) => Some(format!("{b} of {n} blobs do not hash to their file")),
    };
    row.verified = row.error.is_none();
    Ok(())
}

/// Written back before the next run, so no run pays for the kernel's flush
/// of the files just changed (as `workload::Files::generate` does).
pub fn writeback() {
    if let Err(e) = Command::new("sync").status() {
        eprintln!("wanbench: sync after writing the files: {e}");
    }
}

fn slug_kind(k: Kind) -> &'static str {
    match k {
        Kind::FirstSync => "first-sync",
        Kind::SyncRerun => "sync-rerun",
        Kind::ChangedAlone => "alone",
        Kind::BareListing => "ls",
    }
}

fn last_line(p: &Path) -> String {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no stderr".into())
}

fn progress(r: &SyncRow) -> String {
    format!(
        "wanbench: {:<16} {:<13} #{} ({}) {:>8.2} s, {} of {} files sent ({} changed, {:.2} MB), up {:.2} MB, cpu {:.2} s, {}",
        r.profile.label(),
        r.kind.name(),
        r.round,
        r.order,
        r.wall_seconds,
        r.files_sent,
        r.tree_files,
        r.changed_files,
        r.changed_bytes as f64 / 1e6,
        r.link_up_bytes as f64 / 1e6,
        r.client_cpu_s,
        if r.verified {
            "verified".to_string()
        } else {
            format!("NOT verified: {}", r.error.as_deref().unwrap_or("?"))
        }
    )
}

/// Everything `--sync-rerun` needs from `main`.
pub struct Setup {
    pub plan: SyncPlan,
    pub profiles: Vec<Profile>,
    pub cloud_bins: CloudBins,
    pub relay_client: PathBuf,
    pub work: PathBuf,
    pub out: PathBuf,
    /// The work dir was made here (removed at the end) rather than given.
    pub own_work: bool,
}

/// The default link: the matrix's 200 ms / 1 % profile (issue 58's target).
pub const DEFAULT_PROFILE: Profile = Profile::new(200.0, 0.01, 200.0);

/// Generates the tree, runs every profile, writes `sync-rerun.json` and
/// `sync-rerun.md` into `out`; exit 1 unless every run verified.
pub fn run(setup: Setup) -> anyhow::Result<std::process::ExitCode> {
    let t0 = std::time::Instant::now();
    let root = setup.work.join("sync-tree");
    let _ = std::fs::remove_dir_all(&root);
    let mut tree = crate::sync_tree::generate(&root, setup.plan.files, setup.plan.mix);
    writeback();
    let tree_bytes: u64 = tree.iter().map(|f| f.bytes).sum();
    eprintln!(
        "wanbench: sync re-run: {} files ({}, {:.1} MB) in {:.0} s, {} % changed per round, {} rounds per profile, work dir {}",
        tree.len(),
        setup.plan.mix.label(),
        tree_bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64(),
        setup.plan.change_pct,
        setup.plan.repeats,
        setup.work.display()
    );
    let partial = setup.out.join("sync-rerun.partial.json");
    let mut saved: Vec<SyncRow> = Vec::new();
    let mut on_row = |r: &SyncRow| {
        saved.push(r.clone());
        // Best effort: an interrupted run still leaves its rows.
        if let Ok(text) = serde_json::to_string_pretty(&saved) {
            let _ = std::fs::write(&partial, text);
        }
    };
    let mut bench = SyncBench {
        plan: &setup.plan,
        cloud_bins: setup.cloud_bins,
        relay_client: setup.relay_client,
        work: setup.work.clone(),
        on_row: &mut on_row,
    };
    let mut rows = Vec::new();
    for (i, &profile) in setup.profiles.iter().enumerate() {
        let first_round = 1 + i as u32 * setup.plan.repeats;
        rows.extend(
            bench
                .run_profile(profile, &root, &mut tree, first_round)
                .with_context(|| profile.label())?,
        );
    }
    let setup_line = format!(
        "{} files, {} ({:.1} MB), {} % changed in place per round (every other one a new size), {} rounds, relay QUIC controller {}{}; \
         sync and changed-alone upload alternate first; both through the same relay with the same flags, token and path cache; bench took {:.0} s.",
        tree.len(),
        setup.plan.mix.label(),
        tree_bytes as f64 / 1e6,
        setup.plan.change_pct,
        setup.plan.repeats,
        setup.plan.relay_congestion,
        if setup.plan.client_args.is_empty() {
            String::new()
        } else {
            format!(", relay-client `{}`", setup.plan.client_args.join(" "))
        },
        t0.elapsed().as_secs_f64()
    );
    crate::sync_report::write(&setup.out, &rows, &setup_line)?;
    let _ = std::fs::remove_file(&partial);
    if setup.own_work {
        let _ = std::fs::remove_dir_all(&setup.work);
    }
    let bad = rows.iter().filter(|r| !r.verified).count();
    eprintln!(
        "wanbench: {} sync runs, {} verified; results in {}",
        rows.len(),
        rows.len() - bad,
        setup.out.display()
    );
    Ok(if bad == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}
