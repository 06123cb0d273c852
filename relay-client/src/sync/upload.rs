//! A sync from a local folder to `container/prefix`: the folder's walk
//! merged with the prefix's listing; each file to send goes through the
//! upload driver (`transfer::file::report_of`, with its retries and skip
//! rules), and after a verified send the index records the Receipt's ETag,
//! the SHA-256 this client computed and the `stat` the walk took before the
//! read, if the file is still that file after it.
//!
//! The walk runs ahead of the merge (`walk_ahead`), and a file changed since
//! this machine placed its blob is sent as soon as the walk meets it,
//! replacing only the version placed; refused, it falls back to the merge's
//! decision (`relay_proto::sync::early`). So on a long link a re-run's sends
//! do not wait for the listing to reach their names.

use std::sync::Arc;

use relay_proto::sync::early::{Reached, early_basis};
use relay_proto::sync::entry::{IndexRecord, LocalEntry};
use relay_proto::sync::join::Gap;
use relay_proto::sync::plan::{UploadDecision, UploadPlan};
use relay_proto::sync::unchanged::SendReason;
use tokio::sync::mpsc::Sender;

use super::counts::{Counts, bump};
use super::deletes::{DeleteTarget, conclude, delete_set};
use super::drive::{start_listing, start_plan};
use super::lookahead::read_ahead;
use super::planner::{self, Shown, Step};
use super::record::{Moved, lookup, lookup_ahead, lookup_many, remember};
use super::remote::{RemoteEntries, listing_prefix};
use super::tree::local_entries;
pub use super::upload_send::UploadSync;
use super::upload_send::{Basis, Ctx, Early, ToSend, send, settled};
use super::walk_ahead::{Walked, walk_ahead};
use crate::index::{Index, MANY};
use crate::run::in_flight::Uploads;
use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::walk::blob_name;
use crate::ui::progress::Reporter;
use crate::ui::report::SyncReport;

/// The walk's lead over the merge by default: sixteen listing pages, about
/// 4 MiB of entries and records. A file changed here this far ahead of the
/// listing is already being sent when the listing reaches it.
pub const LEAD: usize = 16_384;

/// [`LEAD`], or `RELAY_SYNC_LEAD` (0: nothing is sent before the listing
/// reaches its name, as before early sends).
pub fn walk_lead() -> usize {
    std::env::var("RELAY_SYNC_LEAD")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(LEAD)
}

/// Runs the sync in `runner`: how it stopped, its counts, and whether the
/// deletes' verdict lets the run end well.
pub async fn run(
    s: UploadSync,
    runner: &mut Runner,
    reporter: &Arc<Reporter>,
) -> (Stop, SyncReport, bool) {
    let counts = Arc::new(Counts::default());
    let started = match start_listing(s.lister.clone(), listing_prefix(&s.prefix)).await {
        Ok(started) => started,
        Err(refusal) => return (Stop::Fatal(refusal), counts.report("upload"), false),
    };
    let shown = Shown {
        reporter: reporter.clone(),
        counts: counts.clone(),
        container: s.opts.container.clone(),
        below: listing_prefix(&s.prefix),
        dry_run: s.dry_run,
        deleting: s.rules.delete,
    };
    let remote = RemoteEntries::new(started, &s.prefix, s.filter.clone());
    let local = local_entries(&s.root, s.order, s.filter.clone());
    let (index, container, prefix) = (s.index.clone(), s.opts.container.clone(), s.prefix.clone());
    let deletes = delete_set(s.rules, s.index.as_deref());
    let dry_run = s.dry_run;
    let early = Arc::new(Early::default());
    let lead = s.lead;
    let early_tap = Tap {
        early: early.clone(),
        shown: shown.clone(),
        on: !s.dry_run && lead > 0,
        checksum: s.flags.checksum,
    };
    let reached = early.clone();
    let target = DeleteTarget::Remote {
        mode: s.mode.clone(),
        opts: s.opts.clone(),
        below: listing_prefix(&s.prefix),
        attempts: s.attempts,
    };
    let plan = move |tx: Sender<ToSend>| {
        let blob = |name: &str| blob_name(&prefix, &[name]);
        std::thread::scope(|scope| {
            let walk = {
                let (index, container, prefix) = (index.clone(), container.clone(), prefix.clone());
                move || with_records(local, index, container, prefix)
            };
            let tap = {
                let tx = tx.clone();
                move |l: &LocalEntry, r: Option<&IndexRecord>| early_tap.see(l, r, &tx)
            };
            let (local, records) = walk_ahead(scope, lead, walk, tap);
            let look = |name: &str| {
                lookup_ahead(&records, index.as_deref(), &container, &blob(name), name)
            };
            let plan = UploadPlan::new(local, remote, s.order, look, s.flags);
            let settle = |d| settle(d, &shown, &reached, index.as_deref(), &container, &prefix);
            planner::run(
                plan,
                |p| (p.completion(), p.tally()),
                settle,
                deletes,
                &shown,
                &tx,
            )
        })
    };
    let mut uploads = Uploads::new(&s.windows, &s.mode);
    let ctx = Arc::new(Ctx {
        s,
        reporter: reporter.clone(),
        counts: counts.clone(),
        early,
    });
    let mut planning = start_plan(plan);
    let fed = feed(runner, &mut planning.work, &ctx, &mut uploads).await;
    let (stop, planned) = planning.end(runner, fed).await;
    // Ctrl-C: as `upload`, files whose bytes are all staged may commit.
    uploads.settle(runner, &stop, reporter).await;
    let mut report = counts.report("upload");
    let ok = match planned {
        Some(p) => conclude(p, dry_run, reporter, &mut report, &target).await,
        None => true,
    };
    (stop, report, ok)
}

/// Each file the planner hands on, started as `upload` starts its files
/// (`--parallel` and the relay's windows), until the planner is done or the
/// run stops.
async fn feed(
    runner: &mut Runner,
    work: &mut tokio::sync::mpsc::Receiver<ToSend>,
    ctx: &Arc<Ctx>,
    uploads: &mut Uploads,
) -> Result<(), Stop> {
    while let Some(item) = runner.unless_stopped(work.recv()).await? {
        let blob = blob_name(&ctx.s.prefix, &[&item.local.name]);
        let size = item.local.stat.size;
        let each = ctx.clone();
        let started = uploads.start(runner, &ctx.reporter, &blob, size, |bar| async move {
            send(&each, item, bar).await
        });
        started.await?;
    }
    Ok(())
}

/// The walk's entries with their index records, a batch at a time (on the
/// walk's thread).
fn with_records(
    walk: impl Iterator<Item = Result<LocalEntry, Gap>>,
    index: Option<Arc<Index>>,
    container: String,
    prefix: String,
) -> impl Iterator<Item = Walked> {
    let blob = move |name: &str| blob_name(&prefix, &[name]);
    let fetch = {
        let (index, container, blob) = (index.clone(), container.clone(), blob.clone());
        move |names: &[&str]| lookup_many(index.as_deref(), &container, &blob, names)
    };
    let (entries, records) = read_ahead(walk, MANY, fetch);
    entries.map(move |e| {
        e.map(|local| {
            let (index, name) = (index.as_deref(), local.name.as_str());
            let record = lookup_ahead(&records, index, &container, &blob(name), name);
            (local, record)
        })
    })
}

/// The walk's look at each entry, before the merge's: a file changed since
/// this machine placed its blob is handed on at once, to replace only the
/// version placed.
struct Tap {
    early: Arc<Early>,
    shown: Shown,
    /// Off in a dry run (it sends nothing) and with no lead.
    on: bool,
    checksum: bool,
}

impl Tap {
    fn see(&self, local: &LocalEntry, record: Option<&IndexRecord>, tx: &Sender<ToSend>) {
        if !self.on {
            return;
        }
        let Some(placed) = early_basis(local, record, self.checksum) else {
            return;
        };
        tracing::debug!(name = %local.name, "changed here: sent before the listing reaches it");
        settled(&self.early).started(&local.name);
        self.shown.expect(local.stat.size);
        let item = ToSend {
            local: local.clone(),
            reason: SendReason::ChangedLocally,
            basis: Basis::Placed(placed.clone()),
            hashed: None,
        };
        // A run that stopped takes no more work; the merge ends with it.
        let _ = tx.blocking_send(item);
    }
}

/// A decision settled on the planner thread, or the file to send.
fn settle(
    d: UploadDecision,
    shown: &Shown,
    early: &Early,
    index: Option<&Index>,
    container: &str,
    prefix: &str,
) -> Step<ToSend> {
    match d {
        UploadDecision::Skip(_) => bump(&shown.counts.skipped_unchanged),
        UploadDecision::Adopt { local, remote } => {
            let blob = blob_name(prefix, &[&local.name]);
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
            bump(&shown.counts.adopted);
        }
        UploadDecision::Send {
            local,
            reason,
            listed,
        } => {
            let (listed, hashed) = match settled(early).reached(&local.name, listed) {
                Reached::Early => return Step::Done,
                // Counted when it was handed on early.
                Reached::Fallback(listed, hashed) => (listed, hashed),
                Reached::Merge(listed) => {
                    shown.expect(local.stat.size);
                    (listed, None)
                }
            };
            return Step::Work(ToSend {
                local,
                reason,
                basis: Basis::Listed(listed),
                hashed,
            });
        }
        UploadDecision::Delete(c) => return Step::Delete(c),
        UploadDecision::Gap(side, gap) => shown.gap(side, &gap),
    }
    Step::Done
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use relay_proto::sync::entry::{FileStat, Identity, RemoteEntry};
    use relay_proto::sync::join::Gap;
    use relay_proto::sync::order::Side;

    use super::*;
    use crate::ui::progress::Output;

    /// An adopted blob version moves nothing and takes the row's place: the
    /// next run finds the file unchanged against the new ETag.
    #[test]
    fn adopt_records_the_new_etag_and_moves_nothing() {
        let dir = std::env::temp_dir().join(format!("sync-adopt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let index = Index::open(&dir.join("i.sqlite")).expect("index");
        let stat = FileStat {
            size: 4,
            mtime_ns: 9,
            identity: Some(Identity {
                ino: 1,
                dev: 1,
                ctime_ns: 9,
            }),
        };
        let local = LocalEntry {
            name: "f".into(),
            stat,
        };
        let moved = Moved {
            name: "f",
            container: "c",
            blob: "p/f",
            etag: "\"old\"",
            last_modified: None,
            sha256: "ab",
            stat: &stat,
        };
        remember(Some(&index), &moved);
        let shown = Shown {
            reporter: Arc::new(Reporter::new(Output::Json, true)),
            counts: Arc::new(Counts::default()),
            container: "c".into(),
            below: "p/".into(),
            dry_run: false,
            deleting: false,
        };
        let remote = RemoteEntry {
            name: "f".into(),
            size: 4,
            last_modified: Some(5),
            etag: "\"new\"".into(),
            vouched_sha256: Some("AB".into()),
        };
        let d = UploadDecision::Adopt { local, remote };
        let early = Early::default();
        assert!(matches!(
            settle(d, &shown, &early, Some(&index), "c", "p"),
            Step::Done
        ));
        let row = lookup(Some(&index), "c", "p/f", "f").expect("row");
        assert_eq!((row.etag.as_str(), row.sha256.as_str()), ("\"new\"", "ab"));
        assert_eq!(row.stat, stat);
        assert_eq!(shown.counts.adopted.load(Relaxed), 1);
        let gap = UploadDecision::Gap(Side::Source, Gap("x: unreadable".into()));
        assert!(matches!(
            settle(gap, &shown, &early, Some(&index), "c", "p"),
            Step::Done
        ));
        assert_eq!(shown.counts.gaps.load(Relaxed), 1);
        assert!(matches!(
            settle(
                UploadDecision::Skip("f".into()),
                &shown,
                &early,
                None,
                "c",
                "p"
            ),
            Step::Done
        ));
        assert_eq!(shown.counts.skipped_unchanged.load(Relaxed), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
