//! The `upload` command: walks the sources lazily, runs files at once up to
//! `--parallel` and the relay's windows, reports each file as it finishes, and
//! stops cleanly on Ctrl-C or on a refusal that no file can get past (token,
//! grant, missing container: one setup error, not one line per file).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::commands::args::UploadArgs;
use crate::commands::setup::{self, ModeFlags, SetupError};
use crate::relay::links::RelayLinks;
use crate::run::in_flight::Uploads;
use crate::run::interrupt::Interrupt;
use crate::run::outcome::{Outcome, Stop};
use crate::run::runner::Runner;
use crate::transfer::file::{Job, one_file, walk_report};
use crate::transfer::filter::Filter;
use crate::transfer::manifest::Manifest;
use crate::transfer::mode::Mode;
use crate::transfer::walk::{Found, Walk, WalkOptions, check_sources};
use crate::ui::progress::{Found as FoundSoFar, Reporter};
use crate::ui::report::Summary;

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
    let weather = reporter.weather_sink();
    let flags = ModeFlags::from(&args);
    let mode = tokio::select! {
        m = setup::mode(&args.connection, &flags, &opts.token, &dest.container, weather) => Arc::new(m?),
        _ = interrupt.wait() => {
            let name = if args.direct { "direct" } else { "relay" };
            return Ok(Outcome::before_start(reporter.summary(name)));
        }
    };
    let job = Arc::new(Job {
        mode: mode.clone(),
        opts,
        sync: args.overwrite.sync_rule(),
        attempts: args.attempts.max(1),
        dry_run: args.dry_run,
    });
    spawn_count(&args, walk_opts.clone(), reporter.clone());
    let found = spawn_walk(&args, walk_opts);
    let mut uploads = Uploads::new(&setup::windows(&args.connection, &flags), &mode);
    let mut runner = Runner::new(
        mode,
        interrupt,
        args.parallel,
        &reporter,
        args.output.status_interval,
    );
    let stop = match feed(&mut runner, found, &job, &reporter, &mut uploads).await {
        Stop::Finished => runner.drain().await,
        other => other,
    };
    runner.stop_ticker();
    uploads.settle(&mut runner, &stop, &reporter).await;
    let mode = runner.end(&stop).await;
    // Files stopped in flight never finished: their bars are still active
    // until the summary.
    let stopped = reporter.progress();
    let summary = summary(&mode, &reporter).await;
    Ok(stop.outcome(summary, &stopped, args.connection.patience)?)
}

/// The walk's files into the runner, each as `one_file`, until the walk
/// ends or the run stops.
async fn feed(
    runner: &mut Runner,
    mut found: mpsc::Receiver<Found>,
    job: &Arc<Job>,
    reporter: &Arc<Reporter>,
    uploads: &mut Uploads,
) -> Stop {
    let t0 = Instant::now();
    loop {
        let src = match runner.unless_stopped(found.recv()).await {
            Err(stop) => return stop,
            Ok(None) => return Stop::Finished,
            Ok(Some(Found::File(src))) => src,
            Ok(Some(other)) => {
                reporter.finish_file(None, walk_report(other, &job.opts.container), 0);
                continue;
            }
        };
        // Files in flight: at most --parallel, and at most what the relay's windows
        // take at once (each file counts min(size, stream window)).
        let (job, r) = (job.clone(), reporter.clone());
        let (blob, size) = (src.blob.clone(), src.size);
        let started = uploads.start(runner, reporter, &blob, size, |bar| {
            let wait_ms = t0.elapsed().as_millis() as u64;
            async move { one_file(&job, &r, src, bar, wait_ms).await }
        });
        if let Err(stop) = started.await {
            return stop;
        }
    }
}

/// The run's summary: what the reporter counted, and what the mode saw
/// (direct mode's sizing; the relay's connections, path and QUIC figures).
async fn summary(mode: &Mode, reporter: &Reporter) -> Summary {
    let (mut direct, mut quic, mut connections, mut warm_start) = (None, None, None, None);
    match mode {
        Mode::Direct(d) => {
            direct = Some(crate::ui::report::DirectReport {
                block_size_bytes: d.block_size,
                connections: d.connections,
                storage_rtt_ms: d.storage_rtt.map(|r| r.as_secs_f64() * 1e3),
                fell_back: d.fell_back,
            });
        }
        Mode::Relay(links) => {
            quic = quic_stats(links).await;
            links.close().await;
            connections = Some(links.connections());
            warm_start = Some(links.remember_path());
        }
    }
    Summary {
        direct,
        quic,
        connections,
        warm_start,
        ..reporter.summary(mode.name())
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
