//! A sync from `container/prefix` to a local folder: the prefix's listing
//! merged with the folder's walk; each blob to fetch goes through the
//! download driver (`download::retried`: a private partial file, verified,
//! then renamed into place, never over a file nobody compared), which
//! records the placed file in the index. A local file changed since this
//! machine placed it is a conflict, left as it is, unless `--overwrite`.

use std::sync::Arc;

use relay_proto::logsafe::safe;
use relay_proto::sync::delete::DeleteRules;
use relay_proto::sync::entry::{LocalEntry, RemoteEntry};
use relay_proto::sync::join::Gap;
use relay_proto::sync::order::NameOrder;
use relay_proto::sync::plan::{CompareFlags, DownloadDecision, DownloadPlan};
use relay_proto::sync::unchanged::{ConflictReason, FetchReason};

use super::counts::{Counts, bump};
use super::deletes::{DeleteTarget, conclude, delete_set};
use super::drive::{drive, start_listing};
use super::hash::hash_unchanged;
use super::lookahead::read_ahead;
use super::planner::{self, Shown, Step};
use super::record::{Moved, lookup, lookup_ahead, lookup_many, remember};
use super::remote::{RemoteEntries, listed, listing_prefix};
use super::spelling::{Spelled, misspelled};
use super::tree::{file_stat, local_entries};
use crate::download::fetch::Done;
use crate::download::job::Job;
use crate::download::place::components;
use crate::download::report::{self, Ended};
use crate::download::retried;
use crate::index::{Index, MANY};
use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::file::{blank, failed};
use crate::transfer::filter::Filter;
use crate::transfer::refusal::Refusal;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, Status, SyncReport};

/// A download sync as the command set it up.
pub struct DownloadSync {
    /// The download job over the run's connection, its index the sync's,
    /// its `overwrite` never (a new file never replaces one that appeared).
    pub job: Arc<Job>,
    /// The same job, replacing the file it looked at (a blob's new version
    /// over the file placed from the old one, or `--overwrite`).
    pub replacing: Arc<Job>,
    /// Below the container, no leading or trailing `/`.
    pub prefix: String,
    pub filter: Filter,
    pub order: NameOrder,
    pub flags: CompareFlags,
    pub rules: DeleteRules,
    pub dry_run: bool,
}

/// What the planner hands the runner.
pub enum Work {
    Fetch(RemoteEntry, FetchReason),
    Compare(LocalEntry, RemoteEntry),
}

struct Ctx {
    s: DownloadSync,
    below: String,
    reporter: Arc<Reporter>,
    counts: Arc<Counts>,
    spelled: Spelled,
}

/// Runs the sync in `runner`: how it stopped, its counts, and whether the
/// deletes' verdict lets the run end well.
pub async fn run(
    s: DownloadSync,
    runner: &mut Runner,
    reporter: &Arc<Reporter>,
) -> (Stop, SyncReport, bool) {
    let counts = Arc::new(Counts::default());
    let below = listing_prefix(&s.prefix);
    let started = match start_listing(s.job.clone(), below.clone()).await {
        Ok(started) => started,
        Err(refusal) => return (Stop::Fatal(refusal), counts.report("download"), false),
    };
    let container = s.job.opts.container.clone();
    let shown = Shown {
        reporter: reporter.clone(),
        counts: counts.clone(),
        container: container.clone(),
        below: below.clone(),
        dry_run: s.dry_run,
        deleting: s.rules.delete,
    };
    let root = s.job.root_path();
    let remote = RemoteEntries::new(started, &s.prefix, s.filter.clone());
    // With `--dry-run` a folder not made yet is an empty one.
    let local: Box<dyn Iterator<Item = Result<LocalEntry, Gap>> + Send> = if s.job.root.is_some() {
        Box::new(local_entries(&root, s.order, s.filter.clone()))
    } else {
        Box::new(std::iter::empty())
    };
    let index = s.job.index.clone();
    let (order, flags, rules, dry_run) = (s.order, s.flags, s.rules, s.dry_run);
    let deletes = delete_set(rules, index.as_deref());
    let target = DeleteTarget::Local { job: s.job.clone() };
    let plan = {
        let (below, counts) = (below.clone(), counts.clone());
        move |tx| {
            let blob = |name: &str| format!("{below}{name}");
            let (local, records) = read_ahead(local, MANY, |names: &[&str]| {
                lookup_many(index.as_deref(), &container, blob, names)
            });
            let look = |name: &str| {
                lookup_ahead(&records, index.as_deref(), &container, &blob(name), name)
            };
            let plan = DownloadPlan::new(remote, local, order, look, flags);
            let settle = |d| settle(d, &shown, &counts, index.as_deref(), &container, &below);
            planner::run(
                plan,
                |p| (p.completion(), p.tally()),
                settle,
                deletes,
                &shown,
                &tx,
            )
        }
    };
    let ctx = Arc::new(Ctx {
        s,
        below,
        reporter: reporter.clone(),
        counts: counts.clone(),
        spelled: Spelled::default(),
    });
    let (stop, planned) = drive(runner, plan, |w: Work| {
        let ctx = ctx.clone();
        async move { work(&ctx, w).await }
    })
    .await;
    let mut report = counts.report("download");
    let ok = match planned {
        Some(p) => conclude(p, dry_run, reporter, &mut report, &target).await,
        None => true,
    };
    (stop, report, ok)
}

/// A decision settled on the planner thread, or the work for the runner.
fn settle(
    d: DownloadDecision,
    shown: &Shown,
    counts: &Counts,
    index: Option<&Index>,
    container: &str,
    below: &str,
) -> Step<Work> {
    match d {
        DownloadDecision::Skip(_) => bump(&counts.skipped_unchanged),
        DownloadDecision::Adopt { local, remote } => {
            let blob = format!("{below}{}", local.name);
            if let Some(rec) = lookup(index, container, &blob, &local.name) {
                remember(
                    index,
                    &Moved {
                        name: &local.name,
                        container,
                        blob: &blob,
                        etag: &remote.etag,
                        last_modified: remote.last_modified,
                        sha256: &rec.sha256,
                        stat: &local.stat,
                    },
                );
            }
            bump(&counts.adopted);
        }
        DownloadDecision::Fetch { remote, reason } => {
            shown.expect(remote.size);
            return Step::Work(Work::Fetch(remote, reason));
        }
        DownloadDecision::Compare { local, remote } => {
            shown.expect(remote.size);
            return Step::Work(Work::Compare(local, remote));
        }
        DownloadDecision::Conflict {
            local,
            remote: _,
            reason,
        } => {
            shown.expect(0);
            conflict(shown, &local.name, below, reason);
        }
        DownloadDecision::Delete(c) => return Step::Delete(c),
        DownloadDecision::Gap(side, gap) => shown.gap(side, &gap),
    }
    Step::Done
}

/// A local file changed since it was placed: one failed line, nothing moved.
fn conflict(shown: &Shown, name: &str, below: &str, reason: ConflictReason) {
    bump(&shown.counts.conflicts);
    let why = match reason {
        ConflictReason::ChangedLocally => "the local file changed since this machine placed it",
        ConflictReason::ChangedOnBothSides => {
            "the local file changed since this machine placed it, and the blob has a new version too"
        }
    };
    let e = FileError::new(
        ErrorCode::SyncConflict,
        format!("{why}; left as it is (--overwrite replaces it with the blob)"),
        false,
    );
    let blob = format!("{below}{name}");
    let r = failed(name, &shown.container, &safe(&blob).to_string(), e);
    shown.reporter.finish_file(None, r, 0);
}

/// A new file whose path the file system holds under another spelling
/// (it folds case): one failed line, nothing fetched, nothing replaced.
fn spelled_otherwise(shown: &Shown, name: &str, below: &str, wanted: &str, on_disk: &str) {
    bump(&shown.counts.conflicts);
    let e = FileError::new(
        ErrorCode::SyncConflict,
        format!(
            "this file system folds case and {on_disk:?} is already there, so {wanted:?} would be it; not fetched (another blob's name differs from this one only in case)"
        ),
        false,
    );
    let blob = format!("{below}{name}");
    let r = failed(name, &shown.container, &safe(&blob).to_string(), e);
    shown.reporter.finish_file(None, r, 0);
}

async fn work(ctx: &Ctx, w: Work) -> Option<Refusal> {
    match w {
        Work::Fetch(remote, reason) => {
            // A file placed from the old version is replaced only if it is
            // still that file now (it may have changed since the walk).
            if reason == FetchReason::ChangedRemotely && changed_since_placed(ctx, &remote.name) {
                let shown = shown(ctx);
                shown.unexpect(true, remote.size);
                conflict(
                    &shown,
                    &remote.name,
                    &ctx.below,
                    ConflictReason::ChangedOnBothSides,
                );
                return None;
            }
            let job = match reason {
                FetchReason::New => &ctx.s.job,
                FetchReason::ChangedRemotely | FetchReason::Overwrite => &ctx.s.replacing,
            };
            fetch(ctx, job, &remote).await.err()
        }
        Work::Compare(local, remote) => compare(ctx, local, remote).await,
    }
}

fn shown(ctx: &Ctx) -> Shown {
    Shown {
        reporter: ctx.reporter.clone(),
        counts: ctx.counts.clone(),
        container: ctx.s.job.opts.container.clone(),
        below: ctx.below.clone(),
        dry_run: ctx.s.dry_run,
        deleting: ctx.s.rules.delete,
    }
}

/// Whether the local file of `name` is no longer the one the index recorded.
fn changed_since_placed(ctx: &Ctx, name: &str) -> bool {
    let job = &ctx.s.job;
    let blob = format!("{}{name}", ctx.below);
    let Some(rec) = lookup(job.index.as_deref(), &job.opts.container, &blob, name) else {
        return true;
    };
    let path = job.root_path().join(name);
    !std::fs::symlink_metadata(path).is_ok_and(|m| file_stat(&m).same_file_as(&rec.stat))
}

/// A local file the index knows nothing of (or `--checksum`): read and
/// hashed; the blob's vouched hash decides, else the download driver
/// compares it with the blob (seal, MD5), and an identical file is recorded.
async fn compare(ctx: &Ctx, local: LocalEntry, remote: RemoteEntry) -> Option<Refusal> {
    let s = &ctx.s;
    let path = s.job.root_path().join(&local.name);
    if s.dry_run {
        let mut r = blank(
            &path.display().to_string(),
            &s.job.opts.container,
            &remote.name,
            Status::Planned,
        );
        r.reason =
            Some("a local file the index does not know: would compare it with the blob".into());
        ctx.reporter.finish_file(None, r, 0);
        return None;
    }
    let blob = format!("{}{}", ctx.below, remote.name);
    if let Some(vouched) = &remote.vouched_sha256 {
        ctx.counts.read(local.stat.size);
        let hashed = tokio::task::spawn_blocking({
            let (path, stat) = (path.clone(), local.stat);
            move || hash_unchanged(&path, &stat)
        })
        .await
        .ok()
        .flatten();
        if let Some(sha256) = hashed.filter(|h| h.eq_ignore_ascii_case(vouched)) {
            record_compared(ctx, &local, &remote, &blob, &sha256);
            bump(&ctx.counts.identical);
            // Identical: no line, nothing moved.
            shown(ctx).unexpect(false, remote.size);
            return None;
        }
        if !s.flags.overwrite {
            let shown = shown(ctx);
            shown.unexpect(true, remote.size);
            conflict(
                &shown,
                &local.name,
                &ctx.below,
                ConflictReason::ChangedLocally,
            );
            return None;
        }
        return fetch(ctx, &s.replacing, &remote).await.err();
    }
    // Nothing vouched in the listing: the driver compares (it reads the file
    // too; never replacing without --overwrite), and a file it finds
    // identical is hashed here for its row: two reads until the listing
    // vouches for blobs.
    ctx.counts.read(local.stat.size);
    let job = if s.flags.overwrite {
        &s.replacing
    } else {
        &s.job
    };
    match fetch(ctx, job, &remote).await {
        Err(refusal) => Some(refusal),
        Ok(Some(Ended::Done(Done::Skipped { .. }, _))) => {
            ctx.counts.read(local.stat.size);
            let stat = local.stat;
            let hashed = tokio::task::spawn_blocking(move || hash_unchanged(&path, &stat))
                .await
                .ok()
                .flatten();
            if let Some(sha256) = hashed {
                record_compared(ctx, &local, &remote, &blob, &sha256);
            }
            None
        }
        Ok(_) => None,
    }
}

fn record_compared(ctx: &Ctx, local: &LocalEntry, remote: &RemoteEntry, blob: &str, sha256: &str) {
    let job = &ctx.s.job;
    remember(
        job.index.as_deref(),
        &Moved {
            name: &local.name,
            container: &job.opts.container,
            blob,
            etag: &remote.etag,
            last_modified: remote.last_modified,
            sha256,
            stat: &local.stat,
        },
    );
}

/// One blob through the download driver into its place below the folder,
/// and its report line; how it ended (a skip is kept for `compare`), or the
/// refusal every blob would get.
async fn fetch(ctx: &Ctx, job: &Job, remote: &RemoteEntry) -> Result<Option<Ended>, Refusal> {
    let listed = listed(remote, &ctx.below);
    let shown = safe(&listed.name).to_string();
    let container = &job.opts.container;
    let (path, ended, bar) = match components(&listed.name, &remote.name, job.name_max) {
        Err(e) => {
            let e = FileError::new(ErrorCode::InvalidName, e.to_string(), false);
            (format!("{container}/{shown}"), Ended::BadName(e), None)
        }
        Ok(comps) => {
            let path = comps.iter().fold(job.root_path(), |p, c| p.join(c));
            if ctx.s.dry_run {
                let mut r = blank(
                    &path.display().to_string(),
                    container,
                    &shown,
                    Status::Planned,
                );
                r.reason = Some(format!("would fetch {} bytes", listed.size));
                r.bytes = listed.size;
                ctx.reporter.finish_file(None, r, 0);
                return Ok(None);
            }
            let parent = job.root.as_ref().map(|root| root.parent_of(&comps, true));
            // The folders are made (or found) now: a name the file system
            // answers to under another spelling is refused before a byte.
            if let Some((wanted, on_disk)) = misspelled(&job.root_path(), &comps, &ctx.spelled) {
                let s = self::shown(ctx);
                s.unexpect(true, remote.size);
                spelled_otherwise(&s, &remote.name, &ctx.below, &wanted, &on_disk);
                return Ok(None);
            }
            let bar = ctx.reporter.start(&shown);
            let ended = match retried::download(job, parent, &comps, &listed, &bar).await {
                Ok((done, attempts)) => Ended::Done(done, attempts),
                Err((e, attempts)) => Ended::Failed(e, attempts),
            };
            (path.display().to_string(), ended, Some(bar))
        }
    };
    let keep = counted(ctx, &ended);
    let size = listed.size;
    match report::line(&path, container, &shown, size, ended, &job.opts) {
        Ok(mut r) => {
            // A local file the driver would not replace: the sync's conflict.
            if r.error
                .as_ref()
                .is_some_and(|e| e.code == ErrorCode::Exists)
            {
                bump(&ctx.counts.conflicts);
                if let Some(e) = r.error.as_mut() {
                    e.code = ErrorCode::SyncConflict;
                }
            }
            ctx.reporter.finish_file(bar.as_ref(), r, size);
            Ok(keep)
        }
        Err(refusal) => {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            Err(refusal)
        }
    }
}

/// Counts how a fetch ended; a skip (found identical) is handed back for
/// `compare` to record.
fn counted(ctx: &Ctx, ended: &Ended) -> Option<Ended> {
    match ended {
        Ended::Done(Done::Placed { .. }, _) => {
            bump(&ctx.counts.fetched);
            None
        }
        Ended::Done(
            Done::Skipped {
                reason,
                etag,
                compared,
            },
            a,
        ) => {
            bump(&ctx.counts.identical);
            let skipped = Done::Skipped {
                reason: reason.clone(),
                etag: etag.clone(),
                compared: *compared,
            };
            Some(Ended::Done(skipped, *a))
        }
        _ => None,
    }
}
