//! One settled file: looked up in the journal, uploaded like `upload` does,
//! recorded after its commit, then kept, deleted or moved.

use std::path::Path;
use std::sync::Arc;

use indicatif::ProgressBar;

use crate::transfer::file::{Job, failed, report_of};
use crate::transfer::manifest::Manifest;
use crate::transfer::refusal::{Refusal, fatal};
use crate::transfer::source::Reading;
use crate::transfer::walk::Source;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, Status};

use super::after::{After, act};
use super::journal::{Entry, Journal};
use super::roots::Roots;
use super::settle::Stat;

/// What every upload of a watch shares.
pub struct Ctx {
    pub job: Job,
    pub roots: Roots,
    pub journal: Option<Arc<Journal>>,
    pub after: After,
    pub reporter: Arc<Reporter>,
    pub manifest: Option<Arc<Manifest>>,
    pub follow_symlinks: bool,
}

impl Ctx {
    /// The journal says this file, as it is, is committed to this blob.
    pub fn committed(&self, path: &Path, blob: &str, stat: Stat) -> bool {
        let Some(j) = &self.journal else {
            return false;
        };
        let Some(p) = path.to_str() else {
            return false;
        };
        match j.has(p, &self.job.opts.container, blob, stat) {
            Ok(has) => has,
            Err(e) => {
                tracing::warn!(error = %e, "journal lookup failed; asking the relay");
                false
            }
        }
    }
}

/// How one file's turn ended.
#[derive(Debug)]
pub enum Done {
    Committed {
        bytes: u64,
    },
    /// The blob already held these bytes (skip rules): nothing sent.
    Identical,
    /// The journal had it: no request at all.
    Known,
    Failed,
    /// The file changed during its upload: settles again, uploaded again.
    Changed,
    /// A refusal every file gets: the watch stops.
    Fatal(Refusal),
}

pub async fn upload(ctx: &Ctx, path: &Path, stat: Stat) -> Done {
    let Some(named) = ctx.roots.name(path) else {
        return Done::Known;
    };
    if journalled(ctx, path, &named.blob, stat).await {
        return Done::Known;
    }
    let container = ctx.job.opts.container.clone();
    let sha256 = match &ctx.manifest {
        None => None,
        Some(m) => match m.lookup(path) {
            Some(h) => Some(h.to_string()),
            None => {
                let e = FileError::new(
                    ErrorCode::NotInManifest,
                    format!("not listed in {}; not uploaded", m.file().display()),
                    false,
                );
                let r = failed(&path.display().to_string(), &container, &named.blob, e);
                ctx.reporter.finish_file(None, r, 0);
                return Done::Failed;
            }
        },
    };
    let src = Source {
        path: path.to_path_buf(),
        blob: named.blob.clone(),
        size: stat.size,
        sha256,
        // The settled `stat` has no inode: any regular file at the name.
        reading: Reading {
            follow: ctx.follow_symlinks,
            file: None,
        },
    };
    let bar = ctx.reporter.start(&src.blob);
    let report = match report_of(&ctx.job, &src, &bar, 0).await {
        Ok(r) => r,
        Err((e, attempts)) => return not_uploaded(ctx, &src, &bar, e, attempts),
    };
    // Only a blob the relay (or direct mode) verified and committed, or found
    // to hold exactly these bytes, is journalled and acted on.
    let verified = match (&report.status, &report.sha256, &report.etag) {
        (Status::Committed, Some(sha), Some(etag)) => Some((sha.clone(), etag.clone(), false)),
        (Status::Skipped, Some(sha), Some(etag)) => Some((sha.clone(), etag.clone(), true)),
        _ => None,
    };
    let Some((sha256, etag, identical)) = verified else {
        let done = if report.status == Status::Failed {
            Done::Failed
        } else {
            Done::Identical
        };
        ctx.reporter.finish_file(Some(&bar), report, src.size);
        return done;
    };
    let bytes = report.bytes;
    let now = std::fs::metadata(path).ok().map(|m| Stat::of(&m));
    if now != Some(stat) {
        // The blob holds the version that was sent (checked whole); the file
        // has moved on since: not journalled, not acted on, uploaded again.
        ctx.reporter.finish_file(Some(&bar), report, src.size);
        return Done::Changed;
    }
    record(ctx, &src, stat, sha256, etag).await;
    ctx.reporter.finish_file(Some(&bar), report, src.size);
    if let Err(why) = act(&ctx.after, path, &named.relative, stat) {
        ctx.reporter
            .notice(&format!("relay-client: {}: {why}", path.display()));
    }
    if identical {
        Done::Identical
    } else {
        Done::Committed { bytes }
    }
}

/// Whether the journal says this file, as it is, is committed to `blob`
/// (looked up off the runtime's threads: a disk read).
async fn journalled(ctx: &Ctx, path: &Path, blob: &str, stat: Stat) -> bool {
    let (path, blob) = (path.to_path_buf(), blob.to_string());
    let journal = ctx.journal.clone();
    let container = ctx.job.opts.container.clone();
    tokio::task::spawn_blocking(move || {
        let (Some(j), Some(p)) = (journal, path.to_str()) else {
            return false;
        };
        j.has(p, &container, &blob, stat).unwrap_or(false)
    })
    .await
    .unwrap_or(false)
}

/// A file whose upload failed: a refusal every file gets stops the watch;
/// a file that changed meanwhile settles again; any other failure is
/// reported.
fn not_uploaded(ctx: &Ctx, src: &Source, bar: &ProgressBar, e: FileError, attempts: u32) -> Done {
    if let Some(refusal) = fatal(&e, &ctx.job.opts) {
        bar.finish_and_clear();
        return Done::Fatal(refusal);
    }
    if e.code == ErrorCode::SourceChanged {
        bar.finish_and_clear();
        tracing::info!(path = %src.path.display(), "changed during its upload; nothing committed; waiting for it to settle again");
        return Done::Changed;
    }
    let path = src.path.display().to_string();
    let mut r = failed(&path, &ctx.job.opts.container, &src.blob, e);
    r.attempts = attempts;
    ctx.reporter.finish_file(Some(bar), r, src.size);
    Done::Failed
}

/// The commit of `src` as it was (`stat`) into the journal, if there is one.
async fn record(ctx: &Ctx, src: &Source, stat: Stat, sha256: String, etag: String) {
    let (Some(j), Some(p)) = (&ctx.journal, src.path.to_str()) else {
        return;
    };
    let entry = Entry {
        path: p.to_string(),
        container: ctx.job.opts.container.clone(),
        blob: src.blob.clone(),
        stat,
        sha256,
        etag,
    };
    let j = j.clone();
    match tokio::task::spawn_blocking(move || j.record(&entry)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => ctx.reporter.notice(&format!("relay-client: {e}")),
        Err(e) => ctx.reporter.notice(&format!("relay-client: journal: {e}")),
    }
}
