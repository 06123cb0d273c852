//! A sync from a local folder to `container/prefix`: the folder's walk
//! merged with the prefix's listing; each file to send goes through the
//! upload driver (`transfer::file::report_of`, with its retries and skip
//! rules), and after a verified send the index records the Receipt's ETag,
//! the SHA-256 this client computed and the `stat` the walk took before the
//! read, if the file is still that file after it.

use std::path::PathBuf;
use std::sync::Arc;

use indicatif::ProgressBar;
use relay_proto::protocol::Overwrite;
use relay_proto::sync::delete::DeleteRules;
use relay_proto::sync::entry::{LocalEntry, RemoteEntry};
use relay_proto::sync::order::NameOrder;
use relay_proto::sync::plan::{CompareFlags, UploadDecision, UploadPlan};
use relay_proto::sync::unchanged::SendReason;
use relay_transport::quic::Windows;

use super::counts::{Counts, bump};
use super::deletes::{DeleteTarget, conclude, delete_set};
use super::drive::{start_listing, start_plan};
use super::hash::hash_unchanged;
use super::lookahead::read_ahead;
use super::planner::{self, Shown, Step};
use super::record::{Moved, lookup, lookup_ahead, lookup_many, remember};
use super::remote::{RemoteEntries, listing_prefix};
use super::tree::{file_stat, local_entries};
use crate::download::job::Job as ListJob;
use crate::index::{Index, MANY};
use crate::run::in_flight::Uploads;
use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::file::{Job, blank, failed, report_of};
use crate::transfer::filter::Filter;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::{Refusal, fatal};
use crate::transfer::send::Options;
use crate::transfer::source::{FileId, Reading};
use crate::transfer::walk::{Source, blob_name};
use crate::ui::progress::Reporter;
use crate::ui::report::{Status, SyncReport};

/// An upload sync as the command set it up.
pub struct UploadSync {
    pub mode: Arc<Mode>,
    /// The listing's way of reading (the run's connection).
    pub lister: Arc<ListJob>,
    /// What every send carries (its `overwrite` is set per file).
    pub opts: Options,
    pub attempts: u32,
    pub dry_run: bool,
    pub root: PathBuf,
    /// Below the container, no leading or trailing `/`.
    pub prefix: String,
    pub index: Option<Arc<Index>>,
    pub filter: Filter,
    pub order: NameOrder,
    pub flags: CompareFlags,
    pub rules: DeleteRules,
    /// The relay connections' windows: files in flight are paced by them,
    /// as `upload`'s are.
    pub windows: Windows,
}

/// What each send shares.
struct Ctx {
    s: UploadSync,
    reporter: Arc<Reporter>,
    counts: Arc<Counts>,
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
    let target = DeleteTarget::Remote {
        mode: s.mode.clone(),
        opts: s.opts.clone(),
        below: listing_prefix(&s.prefix),
        attempts: s.attempts,
    };
    let plan = move |tx| {
        let blob = |name: &str| blob_name(&prefix, &[name]);
        let (local, records) = read_ahead(local, MANY, |names: &[&str]| {
            lookup_many(index.as_deref(), &container, blob, names)
        });
        let look =
            |name: &str| lookup_ahead(&records, index.as_deref(), &container, &blob(name), name);
        let plan = UploadPlan::new(local, remote, s.order, look, s.flags);
        let settle = |d| settle(d, &shown, index.as_deref(), &container, &prefix);
        planner::run(
            plan,
            |p| (p.completion(), p.tally()),
            settle,
            deletes,
            &shown,
            &tx,
        )
    };
    let mut uploads = Uploads::new(&s.windows, &s.mode);
    let ctx = Arc::new(Ctx {
        s,
        reporter: reporter.clone(),
        counts: counts.clone(),
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

/// A file the planner hands on to be sent.
struct ToSend {
    local: LocalEntry,
    reason: SendReason,
    /// The blob listed under its name, the only version it may replace.
    listed: Option<RemoteEntry>,
}

/// A decision settled on the planner thread, or the file to send.
fn settle(
    d: UploadDecision,
    shown: &Shown,
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
            shown.expect(local.stat.size);
            return Step::Work(ToSend {
                local,
                reason,
                listed,
            });
        }
        UploadDecision::Delete(c) => return Step::Delete(c),
        UploadDecision::Gap(side, gap) => shown.gap(side, &gap),
    }
    Step::Done
}

fn why(reason: SendReason) -> &'static str {
    match reason {
        SendReason::New => "new",
        SendReason::NotIndexed => "not in this machine's index",
        SendReason::ChangedLocally => "changed here",
        SendReason::ChangedRemotely => "the blob changed",
        SendReason::Checksum => "--checksum",
    }
}

/// One file through the upload driver (under `bar`), its report, and its
/// index row.
async fn send(ctx: &Ctx, item: ToSend, bar: ProgressBar) -> Option<Refusal> {
    let ToSend {
        local,
        reason,
        listed,
    } = item;
    let s = &ctx.s;
    let src = Source {
        path: s.root.join(&local.name),
        blob: blob_name(&s.prefix, &[&local.name]),
        size: local.stat.size,
        sha256: None,
        // The walk never follows a link, nor does the read; and it reads
        // only the file the walk saw.
        reading: Reading {
            follow: false,
            file: local.stat.identity.map(|i| FileId {
                dev: i.dev,
                ino: i.ino,
            }),
        },
    };
    if s.dry_run {
        let mut r = blank(
            &src.path.display().to_string(),
            &s.opts.container,
            &src.blob,
            Status::Planned,
        );
        r.reason = Some(format!("would send {} bytes ({})", src.size, why(reason)));
        r.bytes = src.size;
        ctx.reporter.finish_file(Some(&bar), r, 0);
        return None;
    }
    if let Some(blob) = &listed
        && let Some(sha256) = identical_to(ctx, &local, &src, blob).await
    {
        keep_identical(ctx, &local, &src, blob, &sha256, bar);
        return None;
    }
    let job = Job {
        mode: s.mode.clone(),
        opts: Options {
            overwrite: replacing(listed.as_ref()),
            ..s.opts.clone()
        },
        sync: None,
        attempts: s.attempts,
        dry_run: false,
    };
    ctx.counts.read(src.size);
    let report = match report_of(&job, &src, &bar, 0).await {
        Ok(r) => r,
        Err((e, attempts)) => {
            if let Some(refusal) = fatal(&e, &job.opts) {
                bar.finish_and_clear();
                return Some(refusal);
            }
            let path = src.path.display().to_string();
            let mut r = failed(&path, &s.opts.container, &src.blob, e);
            r.attempts = attempts;
            ctx.reporter.finish_file(Some(&bar), r, src.size);
            return None;
        }
    };
    match report.status {
        Status::Committed => bump(&ctx.counts.sent),
        _ => bump(&ctx.counts.identical),
    }
    if let (Some(etag), Some(sha256)) = (&report.etag, &report.sha256) {
        record_sent(ctx, &local, &src, etag, sha256);
    }
    ctx.reporter.finish_file(Some(&bar), report, src.size);
    None
}

/// What a send may replace. A name the listing did not have is never put
/// over a blob written since (the relay skips the same bytes, refuses
/// others). A listed blob is replaced only in the version listed (`If-Match`
/// its ETag): the source wins, but never over a version nobody looked at;
/// a blob written after the listing fails the send, and the next run
/// compares again. Asking for exactly that version at once (not "never",
/// then again on the `exists` refusal) sends the bytes once: a small file
/// is all in flight before any refusal could come back.
fn replacing(listed: Option<&RemoteEntry>) -> Overwrite {
    match listed {
        None => Overwrite::Never,
        Some(blob) => Overwrite::IfMatch {
            etag: blob.etag.clone(),
        },
    }
}

/// The file's SHA-256 when the relay's seal vouches that the listed blob
/// holds exactly these bytes (a file touched, or an index lost, but not
/// changed): read here, not sent. None when the listing vouches for nothing,
/// the bytes differ, or the file changed while it was read.
async fn identical_to(
    ctx: &Ctx,
    local: &LocalEntry,
    src: &Source,
    blob: &RemoteEntry,
) -> Option<String> {
    let vouched = blob.vouched_sha256.clone()?;
    if blob.size != local.stat.size {
        return None;
    }
    ctx.counts.read(src.size);
    let (path, stat) = (src.path.clone(), local.stat);
    let ours = tokio::task::spawn_blocking(move || hash_unchanged(&path, &stat))
        .await
        .ok()??;
    ours.eq_ignore_ascii_case(&vouched).then_some(ours)
}

/// A file the listed blob already holds: nothing moves; the index takes the
/// blob's version, and the report says identical.
fn keep_identical(
    ctx: &Ctx,
    local: &LocalEntry,
    src: &Source,
    blob: &RemoteEntry,
    sha256: &str,
    bar: ProgressBar,
) {
    let s = &ctx.s;
    record(ctx, local, src, (&blob.etag, blob.last_modified), sha256);
    bump(&ctx.counts.identical);
    let mut r = blank(
        &src.path.display().to_string(),
        &s.opts.container,
        &src.blob,
        Status::Skipped,
    );
    r.reason = Some("identical".into());
    r.bytes = src.size;
    r.sha256 = Some(sha256.to_string());
    r.etag = Some(blob.etag.clone());
    ctx.reporter.finish_file(Some(&bar), r, src.size);
}

/// The index row of a verified send, only if the file is still the one the
/// walk saw before it was read (else the bytes sent may not be its bytes now).
fn record_sent(ctx: &Ctx, local: &LocalEntry, src: &Source, etag: &str, sha256: &str) {
    let now = std::fs::symlink_metadata(&src.path).map(|m| file_stat(&m));
    if !now.is_ok_and(|now| now.same_file_as(&local.stat)) {
        return;
    }
    record(ctx, local, src, (etag, None), sha256);
}

/// The index row for `local` as the blob version `(etag, last_modified)`
/// holding `sha256`.
fn record(
    ctx: &Ctx,
    local: &LocalEntry,
    src: &Source,
    (etag, last_modified): (&str, Option<u64>),
    sha256: &str,
) {
    let s = &ctx.s;
    remember(
        s.index.as_deref(),
        &Moved {
            name: &local.name,
            container: &s.opts.container,
            blob: &src.blob,
            etag,
            last_modified,
            sha256,
            stat: &local.stat,
        },
    );
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
        assert!(matches!(
            settle(d, &shown, Some(&index), "c", "p"),
            Step::Done
        ));
        let row = lookup(Some(&index), "c", "p/f", "f").expect("row");
        assert_eq!((row.etag.as_str(), row.sha256.as_str()), ("\"new\"", "ab"));
        assert_eq!(row.stat, stat);
        assert_eq!(shown.counts.adopted.load(Relaxed), 1);
        let gap = UploadDecision::Gap(Side::Source, Gap("x: unreadable".into()));
        assert!(matches!(
            settle(gap, &shown, Some(&index), "c", "p"),
            Step::Done
        ));
        assert_eq!(shown.counts.gaps.load(Relaxed), 1);
        assert!(matches!(
            settle(UploadDecision::Skip("f".into()), &shown, None, "c", "p"),
            Step::Done
        ));
        assert_eq!(shown.counts.skipped_unchanged.load(Relaxed), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
