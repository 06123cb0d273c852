//! One file of an upload sync through the upload driver: as the merge
//! decided it (replacing only the version listed), or early (only the
//! version this machine placed; declined, it falls back to the merge), then
//! its line, its count and its index row. Also what every send shares: the
//! sync as the command set it up, and the early sends not yet settled.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use indicatif::ProgressBar;
use relay_proto::protocol::Overwrite;
use relay_proto::sync::delete::DeleteRules;
use relay_proto::sync::early::{EarlySends, End};
use relay_proto::sync::entry::{IndexRecord, LocalEntry, RemoteEntry};
use relay_proto::sync::order::NameOrder;
use relay_proto::sync::plan::CompareFlags;
use relay_proto::sync::unchanged::SendReason;
use relay_transport::quic::Windows;

use super::counts::{Counts, bump};
use super::hash::hash_unchanged;
use super::record::{Moved, remember};
use super::tree::file_stat;
use crate::download::job::Job as ListJob;
use crate::index::Index;
use crate::transfer::file::{Job, blank, failed, report_of};
use crate::transfer::filter::Filter;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::{Refusal, fatal};
use crate::transfer::send::Options;
use crate::transfer::source::{FileId, Reading};
use crate::transfer::walk::{Source, blob_name};
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, FileReport, Status};

fn why(reason: SendReason) -> &'static str {
    match reason {
        SendReason::New => "new",
        SendReason::NotIndexed => "not in this machine's index",
        SendReason::ChangedLocally => "changed here",
        SendReason::ChangedRemotely => "the blob changed",
        SendReason::Checksum => "--checksum",
    }
}

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
    /// How many walk entries may run ahead of the merge ([`walk_lead`](super::upload::walk_lead)).
    pub lead: usize,
}

/// The early sends not yet settled with the merge; the view each falls
/// back to is the blob the listing showed under its name, with the file's
/// SHA-256 if the declined attempt read it.
pub(super) type Early = Mutex<Sends>;
pub(super) type Sends = EarlySends<Option<RemoteEntry>, Option<String>>;

pub(super) fn settled(early: &Early) -> MutexGuard<'_, Sends> {
    // A panic elsewhere while holding it leaves the map as consistent as
    // any single call leaves it.
    early
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What each send shares.
pub(super) struct Ctx {
    pub(super) s: UploadSync,
    pub(super) reporter: Arc<Reporter>,
    pub(super) counts: Arc<Counts>,
    pub(super) early: Arc<Early>,
}

/// A file handed on to be sent.
pub(super) struct ToSend {
    pub(super) local: LocalEntry,
    pub(super) reason: SendReason,
    pub(super) basis: Basis,
    /// The file's SHA-256, if an early attempt read it (not read again).
    pub(super) hashed: Option<String>,
}

/// Which version of the blob a send may replace.
pub(super) enum Basis {
    /// The merge's: the blob listed under its name, if any.
    Listed(Option<RemoteEntry>),
    /// Early: the version this machine placed (the index's row).
    Placed(IndexRecord),
}

/// One file through the upload driver (under `bar`), its report, and its
/// index row.
pub(super) async fn send(ctx: &Ctx, item: ToSend, bar: ProgressBar) -> Option<Refusal> {
    let ToSend {
        local,
        reason,
        basis,
        mut hashed,
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
    let listed = match basis {
        Basis::Listed(listed) => listed,
        Basis::Placed(placed) => match send_early(ctx, &local, &src, &placed, &bar).await {
            EarlyEnd::Ended(refusal) => {
                settled(&ctx.early).ended(&local.name, End::Done);
                return refusal;
            }
            EarlyEnd::Declined(learned) => {
                let fallback = settled(&ctx.early).ended(&local.name, End::Declined(learned));
                match fallback {
                    // The merge has been here: its view, now.
                    Some((listed, learned)) => {
                        bar.set_position(0);
                        hashed = learned;
                        listed
                    }
                    // The merge sends it when it gets here.
                    None => {
                        bar.finish_and_clear();
                        return None;
                    }
                }
            }
        },
    };
    if let Some(blob) = &listed
        && let Some(sha256) = identical_to(ctx, &local, &src, blob, hashed).await
    {
        keep_identical(ctx, &local, &src, blob, &sha256, bar);
        return None;
    }
    let job = job(ctx, replacing(listed.as_ref()));
    ctx.counts.read(src.size);
    let result = report_of(&job, &src, &bar, 0).await;
    finish(ctx, &local, &src, &job, result, &bar)
}

/// How an early send ended.
enum EarlyEnd {
    /// As any send ends (its line reported, or the run's refusal).
    Ended(Option<Refusal>),
    /// Not this way: the blob is no longer the version placed, or the file
    /// holds the bytes placed (touched only; its SHA-256, read). The merge
    /// decides.
    Declined(Option<String>),
}

/// A file changed since this machine placed its blob, sent before the
/// listing reached it: it replaces only the version placed.
async fn send_early(
    ctx: &Ctx,
    local: &LocalEntry,
    src: &Source,
    placed: &IndexRecord,
    bar: &ProgressBar,
) -> EarlyEnd {
    if local.stat.size == placed.stat.size {
        // Maybe only touched: its bytes decide, read here, not on the link.
        ctx.counts.read(src.size);
        let (path, stat) = (src.path.clone(), local.stat);
        let ours = tokio::task::spawn_blocking(move || hash_unchanged(&path, &stat)).await;
        if let Ok(Some(ours)) = ours
            && ours.eq_ignore_ascii_case(&placed.sha256)
        {
            return EarlyEnd::Declined(Some(ours));
        }
    }
    let job = job(
        ctx,
        Overwrite::IfMatch {
            etag: placed.etag.clone(),
        },
    );
    ctx.counts.read(src.size);
    match report_of(&job, src, bar, 0).await {
        // Changed or removed since: nothing was written.
        Err((e, _)) if e.code == ErrorCode::Conflict => {
            tracing::debug!(name = %local.name, error = %e.message, "early send declined: the blob is not the version placed");
            EarlyEnd::Declined(None)
        }
        result => EarlyEnd::Ended(finish(ctx, local, src, &job, result, bar)),
    }
}

/// The upload driver's job for one send replacing what `overwrite` allows.
fn job(ctx: &Ctx, overwrite: Overwrite) -> Job {
    let s = &ctx.s;
    Job {
        mode: s.mode.clone(),
        opts: Options {
            overwrite,
            ..s.opts.clone()
        },
        sync: None,
        attempts: s.attempts,
        dry_run: false,
    }
}

/// A send's end: its line, its count and (verified) its index row; or the
/// run's refusal.
fn finish(
    ctx: &Ctx,
    local: &LocalEntry,
    src: &Source,
    job: &Job,
    result: Result<FileReport, (FileError, u32)>,
    bar: &ProgressBar,
) -> Option<Refusal> {
    let report = match result {
        Ok(r) => r,
        Err((e, attempts)) => {
            if let Some(refusal) = fatal(&e, &job.opts) {
                bar.finish_and_clear();
                return Some(refusal);
            }
            let path = src.path.display().to_string();
            let mut r = failed(&path, &ctx.s.opts.container, &src.blob, e);
            r.attempts = attempts;
            ctx.reporter.finish_file(Some(bar), r, src.size);
            return None;
        }
    };
    match report.status {
        Status::Committed => bump(&ctx.counts.sent),
        _ => bump(&ctx.counts.identical),
    }
    if let (Some(etag), Some(sha256)) = (&report.etag, &report.sha256) {
        record_sent(ctx, local, src, etag, sha256);
    }
    ctx.reporter.finish_file(Some(bar), report, src.size);
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
/// changed): read here (unless `hashed` already says), not sent. None when
/// the listing vouches for nothing, the bytes differ, or the file changed
/// while it was read.
async fn identical_to(
    ctx: &Ctx,
    local: &LocalEntry,
    src: &Source,
    blob: &RemoteEntry,
    hashed: Option<String>,
) -> Option<String> {
    let vouched = blob.vouched_sha256.clone()?;
    if blob.size != local.stat.size {
        return None;
    }
    let ours = match hashed {
        Some(ours) => ours,
        None => {
            ctx.counts.read(src.size);
            let (path, stat) = (src.path.clone(), local.stat);
            tokio::task::spawn_blocking(move || hash_unchanged(&path, &stat))
                .await
                .ok()??
        }
    };
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
