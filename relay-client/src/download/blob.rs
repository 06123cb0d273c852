//! One listed blob to its report: its local name checked, then with
//! `--dry-run` what would happen, else the download with its retries
//! (`relay::retry`), each attempt resuming from what is on disk.

use indicatif::ProgressBar;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{Check, Listed};

use super::attempt;
use super::fetch::{self, Done, Target, Way};
use super::job::Job;
use super::place::{Selection, components};
use crate::relay::retry::Tries;
use crate::transfer::file::{blank, failed};
use crate::transfer::refusal::{Refusal, fatal};
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, FileReport, Status};
use relay_proto::session::download::{self as session, Blob};

/// One listed blob to its report; the refusal when it is one every file
/// would get (the run stops with one setup error).
pub async fn one_blob(
    job: &Job,
    reporter: &Reporter,
    selection: &Selection,
    listed: Listed,
) -> Option<Refusal> {
    let container = &job.opts.container;
    let shown = safe(&listed.name).to_string();
    let size = listed.size;
    let placed = selection
        .local_name(&listed.name)
        .and_then(|local| components(&listed.name, local, job.name_max));
    let comps = match placed {
        Ok(c) => c,
        Err(e) => {
            let e = FileError::new(ErrorCode::InvalidName, e.to_string(), false);
            let r = failed(&format!("{container}/{shown}"), container, &shown, e);
            reporter.finish_file(None, r, size);
            return None;
        }
    };
    let local_path = comps.iter().fold(job.root_path(), |p, c| p.join(c));
    let path = local_path.display().to_string();
    if job.dry_run {
        reporter.finish_file(None, planned(job, &comps, &listed, &path), size);
        return None;
    }
    let bar = reporter.start(&shown);
    let report = match with_retries(job, &comps, &listed, &bar).await {
        Ok((done, attempts)) => {
            let mut r = blank(&path, container, &shown, Status::Downloaded);
            r.attempts = attempts;
            r.bytes = size;
            fill(&mut r, done);
            r
        }
        Err((e, attempts)) => {
            if let Some(refusal) = fatal(&e, &job.opts) {
                bar.finish_and_clear();
                return Some(refusal);
            }
            let mut r = failed(&path, container, &shown, e);
            r.attempts = attempts;
            r
        }
    };
    reporter.finish_file(Some(&bar), report, size);
    None
}

/// A downloaded (or skipped) file's report from how it ended.
fn fill(r: &mut FileReport, done: Done) {
    match done {
        Done::Placed {
            size,
            sha256,
            etag,
            check,
            resumed,
            received,
            md5,
            wire,
            ..
        } => {
            r.bytes = size;
            r.sha256 = Some(sha256);
            r.etag = Some(etag);
            r.check = Some(check_name(check));
            r.content_md5 = (check == Check::ContentMd5).then_some(md5);
            r.bytes_resumed = resumed;
            r.bytes_sent = received;
            r.wire_bytes = wire;
        }
        Done::Skipped {
            reason,
            etag,
            compared,
        } => {
            r.status = Status::Skipped;
            r.reason = Some(reason);
            r.etag = Some(etag);
            r.compared = Some(compared.label());
        }
    }
}

fn check_name(c: Check) -> &'static str {
    match c {
        Check::Sealed => "sealed",
        Check::ContentMd5 => "content_md5",
        Check::Ranges => "ranges",
    }
}

/// `--dry-run`: what would happen, from what is on disk (nothing is asked of
/// the relay per file, nothing written).
fn planned(job: &Job, comps: &[&str], listed: &Listed, path: &str) -> FileReport {
    let mut r = blank(
        path,
        &job.opts.container,
        &safe(&listed.name).to_string(),
        Status::Planned,
    );
    r.bytes = listed.size;
    let here = job
        .root
        .as_ref()
        .and_then(|root| root.parent_of(comps, false).ok())
        .and_then(|parent| {
            let leaf = comps.last().copied().unwrap_or_default();
            fetch::local(&parent, leaf).ok()
        })
        .unwrap_or(session::Local::Absent);
    r.reason = Some(match here {
        session::Local::Absent => format!("would download {} bytes", listed.size),
        session::Local::File { .. } => format!(
            "a local file exists: would compare it with the blob (--overwrite={:?})",
            job.overwrite
        ),
        _ => "would refuse (something other than a file is at its name)".into(),
    });
    r
}

/// The download with its retries: each attempt starts from what is on disk
/// (a partial file resumes); an outage waited out within `--patience` is not
/// an attempt.
async fn with_retries(
    job: &Job,
    comps: &[&str],
    listed: &Listed,
    bar: &ProgressBar,
) -> Result<(Done, u32), (FileError, u32)> {
    let root = job.root.as_ref().ok_or_else(|| {
        let e = FileError::new(ErrorCode::Internal, "no destination folder", false);
        (e, 0)
    })?;
    let parent = root
        .parent_of(comps, true)
        .map_err(|e| (FileError::new(e.code(), e.to_string(), false), 0))?;
    let target = Target {
        token: &job.opts.token,
        container: &job.opts.container,
        blob: &listed.name,
        listed: Blob {
            size: listed.size,
            etag: listed.etag.clone(),
            last_modified: listed.last_modified,
        },
        folder: &parent,
        leaf: comps.last().copied().unwrap_or_default(),
        overwrite: job.overwrite,
        received: Default::default(),
        index: job.index.as_deref(),
        index_path: comps.join("/"),
        patience: job.patience,
        wire: Default::default(),
    };
    let lane = job.relay().map(|links| links.assign(listed.size));
    let link = lane.as_ref().map(|l| l.link());
    let mut tries = Tries::new(link, job.attempts, safe(&listed.name).to_string());
    let done = async {
        loop {
            let conn = tries.begin().await?;
            let way = match (&conn, link, job.direct.as_deref()) {
                (Some(conn), Some(link), _) => Way::Relay {
                    conn,
                    turns: &link.open_turns,
                    compress: job.opts.compress,
                },
                (_, _, Some(d)) => Way::Direct(d),
                _ => return Err(FileError::new(ErrorCode::Internal, "no way to read", false)),
            };
            match attempt::download(way, &target, bar).await {
                Ok(done) => return Ok(done),
                Err(e) => tries.failed(e, conn.as_ref()).await?,
            }
        }
    }
    .await;
    match done {
        Ok(done) => Ok((done, tries.attempts())),
        Err(e) => Err((e, tries.attempts())),
    }
}
