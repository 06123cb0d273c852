//! One file from the walk to its report: checks that need no network (name,
//! readable), the upload with retries and capped backoff (reconnecting and
//! resuming), `--overwrite=if-different|if-newer`'s second step, and `--dry-run`.

use indicatif::ProgressBar;

use crate::relay::link::out_of_patience;
use crate::relay::links::Lane;
use crate::relay::retry::Tries;
use crate::transfer::direct::{Direct, upload_file};
use crate::transfer::mode::Mode;
use crate::transfer::probe::{self, Verdict};
use crate::transfer::refusal::{Refusal, fatal};
use crate::transfer::send::{Options, Sent, send_file};
use crate::transfer::send_failure::unreadable;
use crate::transfer::source::{Snapshot, open};
use crate::transfer::sync::{Decision, SyncRule, decide};
use crate::transfer::walk::{Found, Source};
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{ClientTimings, FileError, FileReport, Spent, Status};

/// What every file of a run shares.
pub struct Job {
    pub mode: std::sync::Arc<Mode>,
    pub opts: Options,
    /// `--overwrite=if-different|if-newer`: what to do with a blob in the way
    /// that does not hold this file.
    pub sync: Option<SyncRule>,
    pub attempts: u32,
    pub dry_run: bool,
}

/// Uploads (or probes) one file under `bar` (from `Reporter::start`) and
/// reports it; returns the refusal when it is one every file would get, so the
/// run stops with one setup error.
pub async fn one_file(
    job: &Job,
    reporter: &Reporter,
    src: Source,
    bar: ProgressBar,
    wait_ms: u64,
) -> Option<Refusal> {
    let report = match report_of(job, &src, &bar, wait_ms).await {
        Ok(r) => r,
        Err((e, attempts)) => {
            if let Some(fatal) = fatal(&e, &job.opts) {
                bar.finish_and_clear();
                return Some(fatal);
            }
            let mut r = failed(
                &src.path.display().to_string(),
                &job.opts.container,
                &src.blob,
                e,
            );
            r.attempts = attempts;
            r.client_ms.wait_ms = wait_ms;
            r
        }
    };
    reporter.finish_file(Some(&bar), report, src.size);
    None
}

/// The upload (with its retries and `--overwrite` second step) of one file,
/// as its report; the error with the attempts made when it failed.
pub async fn report_of(
    job: &Job,
    src: &Source,
    bar: &ProgressBar,
    wait_ms: u64,
) -> Result<FileReport, (FileError, u32)> {
    // Checks before any attempt: a failure here costs none.
    let before = |e: FileError| (e, 0);
    relay_proto::blob_name::validate_blob_name(&src.blob)
        .map_err(|e| before(FileError::new(ErrorCode::InvalidName, e.to_string(), false)))?;
    readable(src).map_err(before)?;
    let opts = with_content_type(&job.opts, src);
    if job.dry_run {
        return planned(job, src, &opts).await.map_err(|e| (e, 1));
    }
    let (sent, tries) = match (with_retries(job, src, &opts, bar).await, job.sync) {
        (Err((e, tries)), Some(rule)) if e.code == ErrorCode::Exists => {
            match decide(rule, e.existing.as_ref(), source_mtime(src)) {
                Decision::Replace(overwrite) => {
                    let replace = Options { overwrite, ..opts };
                    with_retries(job, src, &replace, bar).await?
                }
                Decision::Skip(reason) => return Ok(kept(job, src, reason, &e, tries)),
                Decision::Refuse(why) => {
                    return Err((FileError::new(ErrorCode::Exists, why, false), tries));
                }
            }
        }
        (other, _) => other?,
    };
    let mut r = FileReport {
        path: src.path.display().to_string(),
        container: job.opts.container.clone(),
        blob: src.blob.clone(),
        status: Status::Committed,
        reason: None,
        bytes: sent.bytes,
        sha256: Some(sent.sha256),
        etag: Some(sent.etag),
        content_md5: sent.content_md5,
        bytes_resumed: sent.bytes_resumed,
        bytes_sent: sent.bytes_sent,
        wire_bytes: sent.wire_bytes,
        retries: sent.retries,
        reconnects: sent.reconnects,
        storage_requests: sent.storage_requests,
        abandoned: sent.abandoned.map(Into::into),
        attempts: tries,
        client_ms: ClientTimings {
            wait_ms,
            ..sent.timings
        },
        relay_ms: sent.relay_timings,
        error: None,
        check: None,
        compared: None,
    };
    if earlier_runs_work(sent.identical, tries, sent.reconnects) {
        r.status = Status::Skipped;
        r.reason = Some("identical".into());
        r.bytes_resumed = 0;
    }
    Ok(r)
}

/// Whether a file the relay found already committed (`identical`: its seal
/// says the blob holds exactly these bytes) is an earlier run's work, reported
/// as skipped. Only if this run never sent it before: after a retry, or a
/// reconnect within the attempt (an outage between the relay's commit and its
/// Receipt), it may be this run's own commit whose Receipt was lost, and is
/// reported committed, as it is.
fn earlier_runs_work(identical: bool, tries: u32, reconnects: u32) -> bool {
    identical && tries == 1 && reconnects == 0
}

/// The file's modification time now (the user's notion of "newer").
fn source_mtime(src: &Source) -> Option<std::time::SystemTime> {
    Snapshot::take(&src.path, src.reading)
        .ok()
        .and_then(|s| s.mtime)
}

/// A file left out because its blob is kept (`--overwrite=if-newer`).
fn kept(job: &Job, src: &Source, reason: &str, refusal: &FileError, tries: u32) -> FileReport {
    let mut r = blank(
        &src.path.display().to_string(),
        &job.opts.container,
        &src.blob,
        Status::Skipped,
    );
    r.reason = Some(reason.into());
    r.bytes = src.size;
    r.etag = refusal.existing.as_ref().map(|e| e.etag.clone());
    r.attempts = tries;
    r
}

/// Fails fast, and says why, on a file this user cannot read, or that is no
/// longer the regular file the walk saw (a link swapped in: `symlink`).
fn readable(src: &Source) -> Result<(), FileError> {
    open(&src.path, src.reading).map(drop).map_err(unreadable)
}

/// `--content-type` if given, else a type from the file's extension (as AzCopy
/// and rclone do), else none (the service's default, application/octet-stream).
fn with_content_type(opts: &Options, src: &Source) -> Options {
    let mut o = opts.clone();
    if o.content_type.is_none() {
        o.content_type = mime_guess::from_path(&src.path)
            .first_raw()
            .map(str::to_string);
    }
    o
}

/// The upload with its retries (`relay::retry`): each attempt resumes what
/// the relay (or storage) staged; what the failed attempts sent and cost is
/// counted in the report too.
async fn with_retries(
    job: &Job,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
) -> Result<(Sent, u32), (FileError, u32)> {
    // The run's connection this file goes on, for every attempt.
    let route = Route::of(job.mode.as_ref(), src.size);
    let link = match &route {
        Route::Relay(lane) => Some(lane.link()),
        Route::Direct(_) => None,
    };
    let mut tries = Tries::new(link, job.attempts, src.path.display().to_string());
    let mut spent = Spent::default();
    let sent: Result<Sent, FileError> = async {
        loop {
            let conn = tries.begin().await?;
            let sent = match (&route, &conn) {
                (Route::Relay(lane), Some(conn)) => {
                    send_file(conn, &lane.link().open_turns, src, opts, bar).await
                }
                (Route::Direct(d), _) => upload_file(d, src, opts, bar).await,
                (Route::Relay(_), None) => Err(FileError::new(
                    ErrorCode::Internal,
                    "no connection to send on",
                    false,
                )),
            };
            match sent {
                Ok(sent) => return Ok(sent),
                Err(e) => {
                    spent += e.spent;
                    tries.failed(e, conn.as_ref()).await?;
                }
            }
        }
    }
    .await;
    match sent {
        Ok(mut sent) => {
            sent.reconnects = tries.retries.reconnects;
            sent.bytes_sent += spent.bytes_sent;
            sent.storage_requests += spent.storage_requests;
            Ok((sent, tries.attempts()))
        }
        Err(mut e) => {
            e.spent = spent;
            Err((e, tries.attempts()))
        }
    }
}

/// How one file travels: on one of the run's relay connections, or direct.
enum Route<'a> {
    Relay(Lane<'a>),
    Direct(&'a Direct),
}

impl<'a> Route<'a> {
    fn of(mode: &'a Mode, bytes: u64) -> Self {
        match mode {
            Mode::Relay(links) => Route::Relay(links.assign(bytes)),
            Mode::Direct(d) => Route::Direct(d),
        }
    }
}

/// `--dry-run`: what would happen, from the relay's (or storage's) own answer.
async fn planned(job: &Job, src: &Source, opts: &Options) -> Result<FileReport, FileError> {
    let verdict = match Route::of(job.mode.as_ref(), src.size) {
        Route::Relay(lane) => {
            let conn = match lane.link().get().await {
                Ok(c) => c,
                // The run stops resumably; this file is not a failure.
                Err(_) if lane.link().gave_up() => match out_of_patience().await {},
                Err(e) => return Err(e),
            };
            probe::through_relay(&conn, src, opts).await?
        }
        Route::Direct(d) => probe::direct(d, src, opts).await?,
    };
    let reason = match (verdict, job.sync) {
        (Verdict::Identical, _) => "would skip (identical)".to_string(),
        (Verdict::Exists(existing), Some(rule)) => {
            match decide(rule, existing.as_ref(), source_mtime(src)) {
                Decision::Replace(_) if rule == SyncRule::IfNewer => {
                    "would replace (the source is newer)".into()
                }
                Decision::Replace(_) => "would replace (the blob differs)".into(),
                Decision::Skip(why) => format!("would skip ({why})"),
                Decision::Refuse(why) => format!("would refuse ({why})"),
            }
        }
        (Verdict::Exists(_), None) => {
            "would refuse (a blob with this name exists; see --overwrite)".into()
        }
        (Verdict::Upload { resume_offset: 0 }, _) => format!("would upload {} bytes", src.size),
        (Verdict::Upload { resume_offset }, _) => {
            format!(
                "would upload {} bytes (resuming at {resume_offset})",
                src.size
            )
        }
    };
    let mut r = blank(
        &src.path.display().to_string(),
        &opts.container,
        &src.blob,
        Status::Planned,
    );
    r.reason = Some(reason);
    r.bytes = src.size;
    Ok(r)
}

/// A walk entry that is not a file to upload: skipped, or failed.
pub fn walk_report(found: Found, container: &str) -> FileReport {
    match found {
        Found::Skipped { path, reason } => {
            let mut r = blank(&path.display().to_string(), container, "", Status::Skipped);
            r.reason = Some(reason);
            r
        }
        Found::Failed {
            path,
            code,
            message,
        } => failed(
            &path.display().to_string(),
            container,
            "",
            FileError::new(code, message, false),
        ),
        Found::File(src) => failed(
            &src.path.display().to_string(),
            container,
            &src.blob,
            FileError::new(ErrorCode::Internal, "a file reached the walk report", false),
        ),
    }
}

pub fn failed(path: &str, container: &str, blob: &str, e: FileError) -> FileReport {
    blank(path, container, blob, Status::Failed).failed_with(e)
}

pub(crate) fn blank(path: &str, container: &str, blob: &str, status: Status) -> FileReport {
    FileReport {
        path: path.to_string(),
        container: container.to_string(),
        blob: blob.to_string(),
        status,
        reason: None,
        bytes: 0,
        sha256: None,
        etag: None,
        content_md5: None,
        bytes_resumed: 0,
        bytes_sent: 0,
        wire_bytes: None,
        retries: 0,
        reconnects: 0,
        storage_requests: 0,
        abandoned: None,
        attempts: 0,
        client_ms: ClientTimings::default(),
        relay_ms: None,
        error: None,
        check: None,
        compared: None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_commit_whose_receipt_was_lost_is_not_an_earlier_runs_work() {
        use super::earlier_runs_work;
        assert!(earlier_runs_work(true, 1, 0));
        // The outage hit between the relay's commit and its Receipt: the file
        // went again over a new connection and found its own commit.
        assert!(!earlier_runs_work(true, 1, 1));
        assert!(!earlier_runs_work(true, 2, 0));
        assert!(!earlier_runs_work(false, 1, 0));
    }

    use super::*;

    fn src(name: &str) -> Source {
        Source {
            path: name.into(),
            blob: name.into(),
            size: 0,
            sha256: None,
            reading: Default::default(),
        }
    }

    #[test]
    fn content_type_from_the_extension_unless_given() {
        let opts = Options {
            token: crate::sign_in::Bearer::Static(relay_proto::protocol::Secret(String::new())),
            container: "c".into(),
            overwrite: relay_proto::protocol::Overwrite::Never,
            block_size: None,
            content_type: None,
            metadata: Default::default(),
            put_md5: false,
            compress: Default::default(),
            order: Default::default(),
        };
        let t = |o: &Options, n: &str| with_content_type(o, &src(n)).content_type;
        assert_eq!(t(&opts, "a/notes.txt").as_deref(), Some("text/plain"));
        assert_eq!(t(&opts, "x.json").as_deref(), Some("application/json"));
        assert_eq!(t(&opts, "blob.zzzunknown"), None);
        let given = Options {
            content_type: Some("application/x-mine".into()),
            ..opts
        };
        assert_eq!(t(&given, "a.txt").as_deref(), Some("application/x-mine"));
    }
}
