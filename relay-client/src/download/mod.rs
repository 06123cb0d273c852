//! The `download` command: blobs back from storage through the relay, each
//! written under a temporary name, verified, then renamed into place.
//!
//! - `args`: the flags; the relay connection is upload's (`setup::mode`).
//! - `list`: one listing stream per source, into a bounded channel.
//! - `place`: where a blob name may go under the destination, and the names
//!   of the partial files no blob name maps to (pure).
//! - `safe_fs`: creating folders and files there without following links.
//! - `session`: one blob's decisions: skip, refuse, resume, restart, verify (pure).
//! - `partial`: the partial file's one writer (its lock) and its sidecar
//!   (which blob and version it holds).
//! - `fetch`: one blob's stream and bytes into the partial file.
//! - `inflating`: compressed sections read as the blob's bytes, within a budget.
//! - `placing`: the final name, never over a file nobody compared.
//! - `attempt`: one attempt at one blob, the session's driver.
//! - `run` (here): sources, filters, files in flight, retries, the index,
//!   the report.

pub mod args;
pub mod attempt;
pub mod cursor;
pub mod direct;
pub mod fetch;
pub mod inflating;
pub mod list;
pub mod partial;
pub mod piece;
pub mod place;
pub mod placing;
pub mod safe_fs;
pub mod session;
pub mod stream;

use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{Check, Listed};
use relay_storage::retry::Backoff;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::commands::interrupt::Interrupt;
use crate::commands::setup::{self, SetupError};
use crate::commands::upload::{Cause, Outcome};
use crate::index::Index;
use crate::relay::links::RelayLinks;
use crate::transfer::file::{blank, failed, out_of_patience, weathered};
use crate::transfer::filter::Filter;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::{Refusal, fatal};
use crate::transfer::send::Options;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, FileReport, Status};
use crate::ui::weather::WeatherSink;
use args::DownloadArgs;
use fetch::{Done, Target};
use place::{Selection, components};
use safe_fs::Folder;
use session::Blob;

/// Names a listing hands the download loop at most this far ahead.
const LIST_AHEAD: usize = 1024;

/// What every file of a run shares.
struct Job {
    links: Arc<Mode>,
    /// `--direct`: storage reads instead of the relay.
    direct: Option<Arc<direct::DirectReads>>,
    opts: Options,
    root: Option<Folder>,
    name_max: usize,
    args_overwrite: crate::commands::args::OverwriteMode,
    attempts: u32,
    dry_run: bool,
    /// What this machine placed in the destination folder.
    index: Option<Arc<Index>>,
    /// How long a file waits for another writer of its partial file that
    /// makes no progress.
    patience: Duration,
}

enum Stop {
    Finished,
    Interrupted,
    OutOfPatience,
    Fatal(Refusal),
}

/// A local name's key for the duplicate check (a prefix of its SHA-256).
fn place_key(local: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(local.as_bytes());
    let mut k = [0u8; 16];
    k.copy_from_slice(&h[..16]);
    k
}

fn check_name(c: Check) -> &'static str {
    match c {
        Check::Sealed => "sealed",
        Check::ContentMd5 => "content_md5",
        Check::Ranges => "ranges",
    }
}

fn relay(mode: &Mode) -> Option<&RelayLinks> {
    match mode {
        Mode::Relay(l) => Some(l),
        Mode::Direct(_) => None,
    }
}

/// Resolves once the relay link ran out of patience (never in direct mode).
async fn gave_up(mode: &Mode) {
    match relay(mode) {
        Some(links) => links.wait_gave_up().await,
        None => std::future::pending().await,
    }
}

pub async fn run(
    args: DownloadArgs,
    reporter: Arc<Reporter>,
    mut interrupt: Interrupt,
) -> Result<Outcome, SetupError> {
    let sources = args::sources(&args.sources)?;
    let filter = Filter::new(&args.include, &args.exclude)?;
    let first = &sources[0];
    args::same_account(&args, &args.sources, &sources)?;
    let opts = Options {
        token: setup::bearer(&args.connection, args.direct)?,
        container: first.container.clone(),
        overwrite: relay_proto::protocol::Overwrite::Never,
        block_size: None,
        content_type: None,
        metadata: Default::default(),
        put_md5: false,
        compress: args.compress,
        order: Default::default(),
    };
    let weather: WeatherSink = {
        let r = reporter.clone();
        Arc::new(move |w| r.weather(w))
    };
    let flags = args::mode_flags(&args);
    let mode = tokio::select! {
        m = setup::mode(&args.connection, &flags, &opts.token, &first.container, weather) => m?,
        _ = interrupt.wait() => {
            let mut summary = reporter.summary("relay");
            summary.download = true;
            return Ok(Outcome::Interrupted { summary, in_flight: 0, in_flight_bytes: 0, cause: Cause::Interrupt });
        }
    };
    let direct = match &mode {
        Mode::Direct(d) => Some(Arc::new(direct::DirectReads {
            storage: d.storage.clone(),
            id_key: d.id_key.clone(),
            ranges_in_flight: d.connections,
            budget: d.budget.clone(),
        })),
        Mode::Relay(_) => None,
    };
    let mode = Arc::new(mode);
    let root = if args.dry_run && !args.to.is_dir() {
        None
    } else {
        Some(
            Folder::root(&args.to, args.umask)
                .map_err(|e| SetupError::Refused(format!("--to: {e}")))?,
        )
    };
    let index = if args.dry_run {
        None
    } else {
        open_index(&args, &reporter)
    };
    let name_max = root.as_ref().map_or(place::NAME_MAX, Folder::name_max);
    let mut job = Job {
        links: mode.clone(),
        direct,
        opts,
        root,
        name_max,
        args_overwrite: args.overwrite,
        attempts: args.attempts.max(1),
        dry_run: args.dry_run,
        index,
        patience: args.connection.patience,
    };
    let ticker = reporter.tick_every(args.status_interval).map(|every| {
        let r = reporter.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                t.tick().await;
                r.tick();
            }
        })
    });
    // Direct mode: at most 16 files at once, their ranges held within
    // --memory-budget (`direct::Ranges`).
    let parallel = if args.direct {
        args.parallel.clamp(1, 16)
    } else {
        args.parallel.max(1)
    };
    let slots = Arc::new(Semaphore::new(parallel));
    let mut tasks: JoinSet<Option<Refusal>> = JoinSet::new();
    let mut stop = Stop::Finished;
    // With several sources, two may name one local file: the first keeps it.
    // 16 bytes per file (only then), as upload's walk keeps per blob name.
    let several = sources.len() > 1;
    let mut places: std::collections::HashSet<[u8; 16]> = Default::default();
    // What the listings found so far, for status lines and the ETA.
    let mut found = crate::ui::progress::Found::default();
    'sources: for (text, dest) in args.sources.iter().zip(&sources) {
        job.opts.container = dest.container.clone();
        let job = Arc::new(Job {
            links: job.links.clone(),
            direct: job.direct.clone(),
            opts: job.opts.clone(),
            root: job.root.as_ref().and_then(|r| r.parent_of(&[], false).ok()),
            name_max: job.name_max,
            args_overwrite: job.args_overwrite,
            attempts: job.attempts,
            dry_run: job.dry_run,
            index: job.index.clone(),
            patience: job.patience,
        });
        let selection = Selection::new(&dest.prefix);
        let (tx, mut rx) = mpsc::channel::<Listed>(LIST_AHEAD);
        let lister = {
            let (job, prefix) = (job.clone(), dest.prefix.clone());
            tokio::spawn(async move { list::listing(&job, &prefix, tx).await })
        };
        let mut matched = 0u64;
        loop {
            let listed = tokio::select! {
                b = rx.recv() => b,
                _ = interrupt.wait() => { stop = Stop::Interrupted; break 'sources; }
                _ = gave_up(&mode) => { stop = Stop::OutOfPatience; break 'sources; }
            };
            let Some(listed) = listed else { break };
            if !selection.takes(&listed.name) || !filter.admits(selection.filter_name(&listed.name))
            {
                continue;
            }
            matched += 1;
            if several
                && let Ok(local) = selection.local_name(&listed.name)
                && !places.insert(place_key(local))
            {
                let shown = safe(&listed.name).to_string();
                let mut r = blank(
                    &format!("{}/{shown}", dest.container),
                    &dest.container,
                    &shown,
                    Status::Failed,
                );
                r.error = Some(crate::ui::report::ErrorReport {
                    code: ErrorCode::Duplicate,
                    message: format!(
                        "another source already downloads to {local:?} in this run; this blob is left out"
                    ),
                });
                reporter.finish_file(None, r, 0);
                continue;
            }
            found.files += 1;
            found.bytes += listed.size;
            reporter.set_found(found);
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p,
                _ = interrupt.wait() => { stop = Stop::Interrupted; break 'sources; }
                _ = gave_up(&mode) => { stop = Stop::OutOfPatience; break 'sources; }
            };
            while let Some(done) = tasks.try_join_next() {
                if let Some(f) = done.ok().flatten() {
                    stop = Stop::Fatal(f);
                    break 'sources;
                }
            }
            let (job, reporter, selection) = (job.clone(), reporter.clone(), selection.clone());
            tasks.spawn(async move {
                let _permit = permit;
                one_blob(&job, &reporter, &selection, listed).await
            });
        }
        match lister.await {
            Ok(Ok(_)) if matched == 0 => {
                let mut r = blank(text, &dest.container, &dest.prefix, Status::Failed);
                r.error = Some(crate::ui::report::ErrorReport {
                    code: ErrorCode::NotFound,
                    message: format!(
                        "no blob named {:?} or under it",
                        safe(&dest.prefix).to_string()
                    ),
                });
                reporter.finish_file(None, r, 0);
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                if let Some(f) = fatal(&e, &job.opts) {
                    stop = Stop::Fatal(f);
                    break 'sources;
                }
                reporter.finish_file(None, failed(text, &dest.container, &dest.prefix, e), 0);
            }
            Err(e) => {
                let e = FileError::new(ErrorCode::Internal, format!("listing: {e}"), false);
                reporter.finish_file(None, failed(text, &dest.container, &dest.prefix, e), 0);
            }
        }
    }
    found.complete = true;
    reporter.set_found(found);
    if matches!(stop, Stop::Finished) {
        stop = loop {
            tokio::select! {
                done = tasks.join_next() => match done {
                    None => break Stop::Finished,
                    Some(Ok(Some(f))) => break Stop::Fatal(f),
                    Some(_) => {}
                },
                _ = interrupt.wait() => break Stop::Interrupted,
                _ = gave_up(&mode) => break Stop::OutOfPatience,
            }
        };
    }
    if let Some(t) = ticker {
        t.abort();
    }
    if !matches!(stop, Stop::Finished) {
        // Dropping a file's task stops its stream; its partial file stays
        // for the rerun to resume.
        tasks.abort_all();
        if let Some(links) = relay(&mode) {
            links.abort().await;
        }
        while tasks.join_next().await.is_some() {}
    }
    let stopped = reporter.progress();
    let mut summary = reporter.summary(mode.name());
    summary.download = true;
    if let Some(links) = relay(&mode) {
        summary.warm_start = Some(links.remember_path());
        links.close().await;
        summary.connections = Some(links.connections());
    }
    let interrupted = |summary, cause| Outcome::Interrupted {
        summary,
        in_flight: stopped.files_in_flight,
        in_flight_bytes: stopped.in_flight_bytes,
        cause,
    };
    match stop {
        Stop::Finished => Ok(Outcome::Done(summary)),
        Stop::Interrupted => Ok(interrupted(summary, Cause::Interrupt)),
        Stop::OutOfPatience => Ok(interrupted(
            summary,
            Cause::Patience(args.connection.patience),
        )),
        Stop::Fatal(refusal) => Err(SetupError::Stopped(refusal)),
    }
}

/// This machine's index of the destination folder (`--index`, else one per
/// folder under $XDG_STATE_HOME); without one (`--no-index`, or it cannot be
/// opened: said once) a rerun cannot compare a file whose blob carries no
/// checksum.
fn open_index(args: &DownloadArgs, reporter: &Reporter) -> Option<Arc<Index>> {
    if args.no_index {
        return None;
    }
    let file = args.index.clone().or_else(|| {
        let dir = std::fs::canonicalize(&args.to).unwrap_or_else(|_| args.to.clone());
        Index::default_file("download", &dir)
    })?;
    match Index::open(&file) {
        Ok(i) => Some(Arc::new(i)),
        Err(e) => {
            reporter.notice(&format!(
                "relay-client: {e}; going on without it (a rerun cannot compare files whose blob has no checksum)"
            ));
            None
        }
    }
}

/// One listed blob to its report; a message when its refusal is one every
/// file would get (the run stops with one setup error).
async fn one_blob(
    job: &Job,
    reporter: &Reporter,
    selection: &Selection,
    listed: Listed,
) -> Option<Refusal> {
    let container = job.opts.container.clone();
    let shown = safe(&listed.name).to_string();
    let size = listed.size;
    let fail = |path: &str, e: FileError| failed(path, &container, &shown, e);
    let placed = selection
        .local_name(&listed.name)
        .and_then(|local| components(&listed.name, local, job.name_max));
    let comps = match placed {
        Ok(c) => c,
        Err(e) => {
            let r = fail(
                &format!("{container}/{shown}"),
                FileError::new(ErrorCode::InvalidName, e.to_string(), false),
            );
            reporter.finish_file(None, r, size);
            return None;
        }
    };
    let local_path = comps.iter().fold(job_root_path(job), |p, c| p.join(c));
    let path = local_path.display().to_string();
    if job.dry_run {
        reporter.finish_file(None, planned(job, &comps, &listed, &path), size);
        return None;
    }
    let bar = reporter.start(&shown);
    let report = match with_retries(job, &comps, &listed, &bar).await {
        Ok((done, attempts)) => {
            let mut r = blank(&path, &container, &shown, Status::Downloaded);
            r.attempts = attempts;
            r.bytes = size;
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
            r
        }
        Err((e, attempts)) => {
            if let Some(f) = fatal(&e, &job.opts) {
                bar.finish_and_clear();
                return Some(f);
            }
            let mut r = fail(&path, e);
            r.attempts = attempts;
            r
        }
    };
    reporter.finish_file(Some(&bar), report, size);
    None
}

fn job_root_path(job: &Job) -> std::path::PathBuf {
    job.root
        .as_ref()
        .map(|r| r.path().to_path_buf())
        .unwrap_or_default()
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
            job.args_overwrite
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
        (
            FileError::new(ErrorCode::Internal, "no destination folder", false),
            0,
        )
    })?;
    let parent = root
        .parent_of(comps, true)
        .map_err(|e| (FileError::new(e.code(), e.to_string(), false), 0))?;
    let leaf = comps.last().copied().unwrap_or_default();
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
        leaf,
        overwrite: job.args_overwrite,
        received: Default::default(),
        index: job.index.as_deref(),
        index_path: comps.join("/"),
        patience: job.patience,
        wire: Default::default(),
    };
    let backoff = Backoff {
        initial: Duration::from_millis(500),
        cap: Duration::from_secs(15),
        max_attempts: job.attempts,
    };
    let mut tries = 0;
    let Some(links) = relay(&job.links) else {
        let d = job.direct.as_deref().ok_or_else(|| {
            (
                FileError::new(ErrorCode::Internal, "no way to read", false),
                0,
            )
        })?;
        loop {
            tries += 1;
            match attempt::download(fetch::Way::Direct(d), &target, bar).await {
                Ok(done) => return Ok((done, tries)),
                Err(e) if e.retryable && backoff.allows(tries) => {
                    tokio::time::sleep(backoff.delay(tries, rand::random::<f64>())).await;
                }
                Err(e) => return Err((e, tries)),
            }
        }
    };
    let lane = links.assign(listed.size);
    loop {
        tries += 1;
        let link = lane.link();
        let conn = match link.get().await {
            Ok(c) => c,
            Err(_) if link.gave_up() => match out_of_patience().await {},
            Err(e) if e.retryable && backoff.allows(tries) => {
                tokio::time::sleep(backoff.delay(tries, rand::random::<f64>())).await;
                continue;
            }
            Err(e) => return Err((e, tries)),
        };
        let outages = link.outages();
        let way = fetch::Way::Relay {
            conn: &conn,
            turns: &link.open_turns,
            compress: job.opts.compress,
        };
        match attempt::download(way, &target, bar).await {
            Ok(done) => return Ok((done, tries)),
            Err(e) if e.retryable => {
                let lost = conn.close_reason().is_some();
                if lost && link.patient() && weathered(link, outages).await {
                    tries -= 1;
                    continue;
                }
                if !backoff.allows(tries) {
                    return Err((e, tries));
                }
                let delay = backoff.delay(tries, rand::random::<f64>());
                tracing::warn!(blob = %safe(&listed.name), attempt = tries, ?delay, error = %e.message, "retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err((e, tries)),
        }
    }
}
