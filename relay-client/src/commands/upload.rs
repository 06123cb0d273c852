//! The `upload` command: walks the sources lazily, runs files at once up to
//! `--parallel` and the relay's windows, reports each file as it finishes, and
//! stops cleanly on Ctrl-C or on a refusal that no file can get past (token,
//! grant, missing container: one setup error, not one line per file).

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{AbortHandle, JoinSet};

use crate::commands::args::{OverwriteMode, UploadArgs};
use crate::commands::in_flight::InFlight;
use crate::commands::interrupt::Interrupt;
use crate::commands::setup::{self, ModeFlags, SetupError};
use crate::relay::links::RelayLinks;
use crate::transfer::file::{Job, one_file, walk_report};
use crate::transfer::filter::Filter;
use crate::transfer::manifest::Manifest;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::Refusal;
use crate::transfer::sync::SyncRule;
use crate::transfer::walk::{Found, Walk, WalkOptions, check_sources};
use crate::ui::live_list::LiveList;
use crate::ui::progress::{Found as FoundSoFar, Reporter};
use crate::ui::report::Summary;
use crate::ui::weather::WeatherSink;

/// How a run ended (setup errors aside).
pub enum Outcome {
    Done(Summary),
    /// Ctrl-C, or patience ran out: what was done, and what was stopped.
    Interrupted {
        summary: Summary,
        in_flight: usize,
        in_flight_bytes: u64,
        cause: Cause,
    },
}

/// Why a run stopped before every file was done (exit 130 either way: the
/// rerun resumes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Ctrl-C.
    Interrupt,
    /// The relay could not be reached for longer than `--patience`.
    Patience(Duration),
}

/// After Ctrl-C, how long the files whose every byte is already staged may take
/// to be committed (their Receipt), so the report says what is committed
/// rather than "may be". A second Ctrl-C ends the wait at once.
const COMMIT_WAIT: Duration = Duration::from_secs(30);

/// A file in flight: its task and its bar (where its bytes are).
struct Running {
    task: AbortHandle,
    bar: ProgressBar,
}

impl Running {
    /// Every byte staged (the bar counts the relay's `Progress`, or direct
    /// mode's accepted Put Blocks): only its commit is left.
    fn all_staged(&self) -> bool {
        self.bar
            .length()
            .is_some_and(|len| len > 0 && self.bar.position() >= len)
    }
}

/// What the walk hands the upload loop at most this far ahead.
const WALK_AHEAD: usize = 256;

pub async fn run(
    args: UploadArgs,
    reporter: Arc<Reporter>,
    mut interrupt: Interrupt,
) -> Result<Outcome, SetupError> {
    check_sources(&args.paths, args.follow_symlinks)?;
    let dest = setup::destination(&args)?;
    let opts = setup::options(&args, &dest)?;
    let walk_opts = walk_options(&args, &dest.prefix)?;
    let weather: WeatherSink = {
        let r = reporter.clone();
        Arc::new(move |w| r.weather(w))
    };
    let flags = ModeFlags::from(&args);
    let mode = tokio::select! {
        m = setup::mode(&args.connection, &flags, &opts.token, &dest.container, weather) => m?,
        _ = interrupt.wait() => {
            let name = if args.direct { "direct" } else { "relay" };
            return Ok(Outcome::Interrupted {
                summary: reporter.summary(name),
                in_flight: 0,
                in_flight_bytes: 0,
                cause: Cause::Interrupt,
            });
        }
    };
    let mode = Arc::new(mode);
    let patience = args.connection.patience;
    let sync = match args.overwrite {
        OverwriteMode::IfDifferent => Some(SyncRule::IfDifferent),
        OverwriteMode::IfNewer => Some(SyncRule::IfNewer),
        OverwriteMode::Never | OverwriteMode::Always => None,
    };
    let job = Arc::new(Job {
        mode: mode.clone(),
        opts,
        sync,
        attempts: args.attempts.max(1),
        dry_run: args.dry_run,
    });

    spawn_count(&args, walk_opts.clone(), reporter.clone());
    let mut found = spawn_walk(&args, walk_opts);
    let ticker = spawn_ticker(&reporter, args.status_interval);

    let t0 = Instant::now();
    let slots = Arc::new(Semaphore::new(args.parallel.max(1)));
    // Each relay connection has its own window (`--relay-connections`).
    let connections = match mode.as_ref() {
        Mode::Relay(links) => links.all().len(),
        Mode::Direct(_) => 1,
    };
    let window = InFlight::new(&setup::windows(&args.connection, &flags), connections);
    let mut tasks: JoinSet<Option<Refusal>> = JoinSet::new();
    let mut running: LiveList<Running> = LiveList::default();
    let stop = 'walk: loop {
        let item = tokio::select! {
            item = found.recv() => item,
            _ = interrupt.wait() => break 'walk Stop::Interrupted,
            _ = gave_up(&mode) => break 'walk Stop::OutOfPatience,
        };
        let src = match item {
            None => break Stop::Finished,
            Some(Found::File(src)) => src,
            Some(other) => {
                reporter.finish_file(None, walk_report(other, &job.opts.container), 0);
                continue;
            }
        };
        // Files in flight: at most --parallel, and at most what the relay's windows
        // take at once (each file counts min(size, stream window)).
        let permits = tokio::select! {
            p = async { tokio::join!(slots.clone().acquire_owned(), window.acquire(src.size)) } => p,
            _ = interrupt.wait() => break 'walk Stop::Interrupted,
            _ = gave_up(&mode) => break 'walk Stop::OutOfPatience,
        };
        while let Some(done) = tasks.try_join_next() {
            if let Some(fatal) = done.ok().flatten() {
                break 'walk Stop::Fatal(fatal);
            }
        }
        let wait_ms = t0.elapsed().as_millis() as u64;
        let bar = reporter.start(&src.blob);
        let (job, reporter, file_bar) = (job.clone(), reporter.clone(), bar.clone());
        let task = tasks.spawn(async move {
            let _permits = permits;
            one_file(&job, &reporter, src, file_bar, wait_ms).await
        });
        running.push(Running { task, bar }, |r| !r.task.is_finished());
    };
    let stop = match stop {
        Stop::Finished => drain(&mut tasks, &mut interrupt, &mode).await,
        other => other,
    };
    if let Some(t) = ticker {
        t.abort();
    }
    // No commit can land while the relay is unreachable: no point waiting.
    let offline = matches!(mode.as_ref(), Mode::Relay(links) if links.waiting());
    if matches!(stop, Stop::Interrupted) && !offline {
        await_commits(&mut tasks, &running, &reporter).await;
    }
    finish(stop, tasks, &mode, &reporter, patience).await
}

/// Resolves once the relay link ran out of patience (never in direct mode).
async fn gave_up(mode: &Mode) {
    match mode {
        Mode::Relay(links) => links.wait_gave_up().await,
        Mode::Direct(_) => std::future::pending().await,
    }
}

/// After Ctrl-C: stops every file that still has bytes to stage (its stream is
/// reset; the relay keeps what it staged for the rerun) and gives the ones
/// whose bytes are all staged up to `COMMIT_WAIT` to be committed.
async fn await_commits(
    tasks: &mut JoinSet<Option<Refusal>>,
    running: &LiveList<Running>,
    reporter: &Reporter,
) {
    let mut committing = 0;
    for r in running.iter().filter(|r| !r.task.is_finished()) {
        if r.all_staged() {
            committing += 1;
        } else {
            r.task.abort();
        }
    }
    if committing == 0 {
        return;
    }
    reporter.notice(&format!(
        "relay-client: stopping; waiting up to {} s for {committing} file(s) whose bytes are all staged \
         to be committed (Ctrl-C again to exit now)",
        COMMIT_WAIT.as_secs()
    ));
    let _ = tokio::time::timeout(COMMIT_WAIT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

/// Status lines (or bar redraws) at the reporter's pace, until aborted.
fn spawn_ticker(
    reporter: &Arc<Reporter>,
    status_interval: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    reporter.tick_every(status_interval).map(|every| {
        let r = reporter.clone();
        tokio::spawn(async move {
            // The first line after one interval, not at once: a short run needs none.
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                t.tick().await;
                r.tick();
            }
        })
    })
}

enum Stop {
    Finished,
    Interrupted,
    /// The relay stayed unreachable for longer than `--patience`.
    OutOfPatience,
    /// A refusal every file would get: one setup error.
    Fatal(Refusal),
}

/// Waits for the files in flight, unless Ctrl-C or a fatal refusal comes first.
async fn drain(
    tasks: &mut JoinSet<Option<Refusal>>,
    interrupt: &mut Interrupt,
    mode: &Mode,
) -> Stop {
    loop {
        tokio::select! {
            done = tasks.join_next() => match done {
                None => return Stop::Finished,
                Some(Ok(Some(fatal))) => return Stop::Fatal(fatal),
                Some(_) => {}
            },
            _ = interrupt.wait() => return Stop::Interrupted,
            _ = gave_up(mode) => return Stop::OutOfPatience,
        }
    }
}

async fn finish(
    stop: Stop,
    mut tasks: JoinSet<Option<Refusal>>,
    mode: &Mode,
    reporter: &Reporter,
    patience: Duration,
) -> Result<Outcome, SetupError> {
    if !matches!(stop, Stop::Finished) {
        // Dropping a file's task resets its stream: the relay commits nothing of
        // it and keeps what it staged for the rerun to resume.
        tasks.abort_all();
        if let Mode::Relay(links) = mode {
            links.abort().await;
        }
        while tasks.join_next().await.is_some() {}
    }
    // Files stopped in flight never finished: their bars are still active.
    let stopped = reporter.progress();
    let (in_flight, in_flight_bytes) = (stopped.files_in_flight, stopped.in_flight_bytes);
    let mut summary_connections = None;
    let mut direct = None;
    let (warm_start, quic) = match mode {
        Mode::Direct(d) => {
            direct = Some(crate::ui::report::DirectReport {
                block_size_bytes: d.block_size,
                connections: d.connections,
                storage_rtt_ms: d.storage_rtt.map(|r| r.as_secs_f64() * 1e3),
                fell_back: d.fell_back,
            });
            (None, None)
        }
        Mode::Relay(links) => {
            let quic = quic_stats(links).await;
            links.close().await;
            summary_connections = Some(links.connections());
            (Some(links.remember_path()), quic)
        }
    };
    let mut summary = reporter.summary(mode.name());
    summary.warm_start = warm_start;
    summary.quic = quic;
    summary.connections = summary_connections;
    summary.direct = direct;
    let interrupted = |cause| {
        Ok(Outcome::Interrupted {
            summary: summary.clone(),
            in_flight,
            in_flight_bytes,
            cause,
        })
    };
    match stop {
        Stop::Finished => Ok(Outcome::Done(summary)),
        Stop::Interrupted => interrupted(Cause::Interrupt),
        Stop::OutOfPatience => interrupted(Cause::Patience(patience)),
        Stop::Fatal(refusal) => Err(SetupError::Stopped(refusal)),
    }
}

/// What QUIC saw on the run's (last) connections: the first one's round trip
/// and packet train, the packets of all of them.
async fn quic_stats(links: &RelayLinks) -> Option<crate::ui::report::QuicStats> {
    let mut stats: Option<crate::ui::report::QuicStats> = None;
    for link in links.all() {
        let Some(p) = link.current.lock().await.as_ref().map(|c| c.stats().path) else {
            continue;
        };
        match &mut stats {
            Some(s) => {
                s.sent_packets += p.sent_packets;
                s.lost_packets += p.lost_packets;
            }
            None => {
                stats = Some(crate::ui::report::QuicStats {
                    rtt_ms: p.rtt.as_secs_f64() * 1e3,
                    sent_packets: p.sent_packets,
                    lost_packets: p.lost_packets,
                    train_mbit: link.observer.train_mbit(),
                })
            }
        }
    }
    stats
}

fn walk_options(args: &UploadArgs, prefix: &str) -> Result<WalkOptions, SetupError> {
    let manifest = match &args.checksums {
        Some(file) => Some(Arc::new(Manifest::load(file)?)),
        None => None,
    };
    Ok(WalkOptions {
        prefix: prefix.to_string(),
        filter: Filter::new(&args.include, &args.exclude)?,
        follow_symlinks: args.follow_symlinks,
        manifest,
    })
}

/// The walk on a blocking thread, a bounded distance ahead of the uploads.
fn spawn_walk(args: &UploadArgs, opts: WalkOptions) -> mpsc::Receiver<Found> {
    let (tx, rx) = mpsc::channel(WALK_AHEAD);
    let paths = args.paths.clone();
    tokio::task::spawn_blocking(move || {
        for found in Walk::new(&paths, opts) {
            if tx.blocking_send(found).is_err() {
                return; // the upload stopped
            }
        }
    });
    rx
}

/// A second, counting walk, so status lines and ETAs know the total early
/// without the upload walk holding every entry in memory.
fn spawn_count(args: &UploadArgs, opts: WalkOptions, reporter: Arc<Reporter>) {
    let paths = args.paths.clone();
    tokio::task::spawn_blocking(move || {
        let mut so_far = FoundSoFar::default();
        for found in Walk::new(&paths, opts) {
            if let Found::File(src) = found {
                so_far.files += 1;
                so_far.bytes += src.size;
                if so_far.files % 1000 == 0 {
                    reporter.set_found(so_far);
                }
            }
        }
        so_far.complete = true;
        reporter.set_found(so_far);
    });
}
