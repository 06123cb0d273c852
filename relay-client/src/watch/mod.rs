//! The watch driver (the `watch` command, `commands::watch`, sets it up):
//! uploads what is in the folders (skipping what the
//! journal says is committed), then every file that appears or changes, once
//! it has settled (`settle`), through the same per-file upload as `upload`
//! (`crate::transfer::file::report_of`: retries, reconnects, same-source checks, the
//! `--overwrite` rules). Runs until SIGTERM or Ctrl-C, then finishes the
//! uploads under way.
//!
//! Memory is bounded by configuration: files waiting to settle (`--max-pending`),
//! events queued (`events::EVENT_QUEUE`), files in flight (`--parallel`), the
//! scan's lead (`SCAN_AHEAD`); the journal lives on disk. A file dropped for
//! want of room (or an event lost) is found by the next reconcile scan.
//! After a quiet spell the allocator's free pages go back to the system
//! (`idle`), so an idle watch does not keep what its last burst needed.

pub mod after;
pub mod events;
mod idle;
pub mod journal;
pub mod roots;
pub mod settle;
mod status;
pub mod task;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::run::runner::gave_up;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::Refusal;
use crate::ui::report::Summary;
use roots::Roots;
use settle::{Seen, Settle, Stat, Verdict};
use task::{Ctx, Done};

/// Files the scan hands the driver at most this far ahead.
const SCAN_AHEAD: usize = 256;
/// How often due files are checked.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// After a stop, how long uploads under way may take to finish.
const FINISH_WAIT: Duration = Duration::from_secs(60);

/// How a watch ended.
pub enum WatchEnd {
    /// Stopped by a signal, after the uploads under way.
    Stopped(Box<Summary>),
    /// A refusal every file gets (a revoked token, a deleted container).
    Refused(Refusal),
    /// The relay stayed unreachable for longer than `--patience` (the link
    /// said so as it waited); a restart goes on where this one stopped.
    OutOfPatience {
        summary: Box<Summary>,
        patience: Duration,
    },
}

/// Why the watch loop ended.
enum Stop {
    Signal,
    Refused(Refusal),
    OutOfPatience,
}

/// What the watch loop is set to, from the flags.
pub struct Settings {
    /// How long a file must stay unchanged before it is uploaded.
    pub settle: Duration,
    /// Files waiting to settle, at most.
    pub max_pending: usize,
    /// Uploads in flight, at most.
    pub parallel: usize,
    pub status_interval: Duration,
    /// Time between full scans (zero: none but the first).
    pub reconcile: Duration,
    /// `--patience`, as the end of a watch says it.
    pub patience: Duration,
}

/// Watches `roots` until a signal, patience running out, or a refusal every
/// file gets; then ends as `WatchEnd` says.
pub async fn watch(
    ctx: Arc<Ctx>,
    settings: &Settings,
    mut events: events::Events,
    roots: &Roots,
    mode: &Mode,
) -> WatchEnd {
    let mut w = Driver::new(ctx, settings, events.close_events);
    let stop = w.watch(settings, &mut events, roots, mode).await;
    w.end(stop, mode, settings.patience).await
}

async fn close(mode: &Mode) {
    if let Mode::Relay(links) = mode {
        links.close().await;
    }
}

struct Driver {
    settle: Settle,
    ctx: Arc<Ctx>,
    tasks: JoinSet<(PathBuf, Done)>,
    in_flight: HashSet<PathBuf>,
    /// Files that settled again while their upload ran: looked at once it ends.
    again: HashSet<PathBuf>,
    parallel: usize,
    /// The last look at due files found more than it could start.
    backlog: bool,
    counts: status::Counts,
    /// A full scan is running (one at a time).
    scanning: Arc<AtomicBool>,
    /// Files a scan found already in the journal.
    known: Arc<AtomicU64>,
    close_events: bool,
}

/// The check tick's clocks: status lines, reconcile scans, the quiet spell
/// after which memory goes back to the system.
struct Ticks {
    every: Option<Duration>,
    status_at: Option<Instant>,
    reconcile: Option<Duration>,
    reconcile_at: Option<Instant>,
    quiet: idle::Quiet,
}

impl Driver {
    fn new(ctx: Arc<Ctx>, settings: &Settings, close_events: bool) -> Self {
        Driver {
            settle: Settle::new(settings.settle, close_events, settings.max_pending),
            ctx,
            tasks: JoinSet::new(),
            in_flight: HashSet::new(),
            again: HashSet::new(),
            parallel: settings.parallel.max(1),
            backlog: false,
            counts: status::Counts::default(),
            scanning: Arc::new(AtomicBool::new(false)),
            known: Arc::new(AtomicU64::new(0)),
            close_events,
        }
    }

    /// Watches until SIGTERM or Ctrl-C, patience running out, or a refusal
    /// every file gets: the folders scanned first, then each change.
    async fn watch(
        &mut self,
        settings: &Settings,
        events: &mut events::Events,
        roots: &Roots,
        mode: &Mode,
    ) -> Stop {
        let stop = stop_signal();
        let (scan_tx, mut scan_rx) = mpsc::channel::<(PathBuf, Stat)>(SCAN_AHEAD);
        self.scan(&scan_tx, roots.dirs());
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let every = self.ctx.reporter.tick_every(settings.status_interval);
        let reconcile = (!settings.reconcile.is_zero()).then_some(settings.reconcile);
        let mut ticks = Ticks {
            every,
            status_at: every.map(|e| Instant::now() + e),
            reconcile,
            reconcile_at: reconcile.map(|r| Instant::now() + r),
            quiet: idle::Quiet::new(Instant::now().into_std()),
        };
        let mut stop = std::pin::pin!(stop);
        let mut gave_up = std::pin::pin!(gave_up(mode));
        loop {
            let room = self.settle.has_room();
            tokio::select! {
                _ = &mut stop => return Stop::Signal,
                // Files waiting for the link wait for ever once it gave up: stop,
                // as `upload` does, and let the service manager start it again.
                _ = &mut gave_up => return Stop::OutOfPatience,
                Some(change) = events.rx.recv() => {
                    if let Some(dir) = events::new_dir(&change) {
                        events.watch_new_dir(&dir);
                    }
                    self.change(change, &scan_tx)
                }
                Some((path, stat)) = scan_rx.recv(), if room => {
                    self.settle.observe(path, Seen::Found, Some(stat), Instant::now().into_std());
                }
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Some(refusal) = self.finished(done) {
                        return Stop::Refused(refusal);
                    }
                    if self.backlog {
                        self.start_ready();
                    }
                }
                _ = check.tick() => self.tick(&mut ticks, events, &scan_tx, roots),
            }
        }
    }

    /// The check tick: due files started, a reconcile scan when events were
    /// lost or it is time, a status line, memory back after a quiet spell.
    fn tick(
        &mut self,
        t: &mut Ticks,
        events: &events::Events,
        scan_tx: &mpsc::Sender<(PathBuf, Stat)>,
        roots: &Roots,
    ) {
        self.start_ready();
        let lost = events.lost.swap(false, Ordering::Relaxed) | self.settle.take_overflow();
        let due = t.reconcile_at.is_some_and(|at| Instant::now() >= at);
        if lost || due {
            t.reconcile_at = t.reconcile.map(|r| Instant::now() + r);
            let started = self.scan(scan_tx, roots.dirs());
            self.counts.reconciles += u64::from(started);
        }
        if let (Some(at), Some(e)) = (t.status_at, t.every)
            && Instant::now() >= at
        {
            t.status_at = Some(Instant::now() + e);
            status::print(&self.ctx.reporter, &self.status());
        }
        if t.quiet.tick(Instant::now().into_std(), self.busy()) {
            crate::transfer::wire::drop_spare_compressors();
            idle::give_back_free_memory();
        }
    }

    /// How the watch ends after `stop`: a refusal or patience stop what is
    /// in flight; a signal lets the uploads under way finish (or time out).
    async fn end(mut self, stop: Stop, mode: &Mode, patience: Duration) -> WatchEnd {
        let reporter = self.ctx.reporter.clone();
        match stop {
            Stop::Signal => {}
            Stop::Refused(refusal) => {
                self.tasks.abort_all();
                close(mode).await;
                return WatchEnd::Refused(refusal);
            }
            Stop::OutOfPatience => {
                // Nothing in flight can commit while the relay is away: what it
                // staged stays with the relay and the next start resumes it.
                self.tasks.abort_all();
                status::print(&reporter, &self.status());
                close(mode).await;
                return WatchEnd::OutOfPatience {
                    summary: Box::new(reporter.summary(mode.name())),
                    patience,
                };
            }
        }
        let n = self.tasks.len();
        if n > 0 {
            reporter.notice(&format!(
                "relay-client: stopping; finishing {n} upload(s) under way (up to {} s)",
                FINISH_WAIT.as_secs()
            ));
        }
        let deadline = Instant::now() + FINISH_WAIT;
        while let Ok(Some(done)) = tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
            if let Some(refusal) = self.finished(done) {
                close(mode).await;
                return WatchEnd::Refused(refusal);
            }
        }
        self.tasks.abort_all();
        status::print(&reporter, &self.status());
        close(mode).await;
        WatchEnd::Stopped(Box::new(reporter.summary(mode.name())))
    }

    fn status(&self) -> status::Status {
        let now = Instant::now().into_std();
        status::Status {
            waiting: self.settle.waiting(),
            oldest_waiting: self.settle.oldest(now),
            in_flight: self.in_flight.len(),
            known: self.known.load(Ordering::Relaxed),
            ..self.counts.status()
        }
    }

    fn change(&mut self, change: events::Change, scan_tx: &mpsc::Sender<(PathBuf, Stat)>) {
        let now = Instant::now().into_std();
        let (path, seen) = match change {
            events::Change::Dir(dir) => {
                self.scan_dir(scan_tx, dir);
                return;
            }
            events::Change::File(path, seen) => (path, seen),
        };
        if seen == Seen::Removed {
            self.settle.observe(path, seen, None, now);
            return;
        }
        // A write is the hot path: no stat for each (the close brings one).
        let stat = if seen == Seen::Changed && self.settle_needs_close() {
            None
        } else {
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {
                    // A tree moved in: its files raised no events of their own.
                    self.scan_dir(scan_tx, path);
                    return;
                }
                Ok(m) if m.is_file() => Some(Stat::of(&m)),
                Ok(_) => return, // links, FIFOs: not uploaded
                Err(_) => return,
            }
        };
        if self.ctx.roots.name(&path).is_none() {
            return; // a temporary name, filtered out, or our journal
        }
        self.settle.observe(path, seen, stat, now);
    }

    /// Anything waiting to settle, uploading or being scanned.
    fn busy(&self) -> bool {
        self.settle.waiting() > 0
            || !self.in_flight.is_empty()
            || self.scanning.load(Ordering::Relaxed)
    }

    /// Only inotify sends close events; with polling every change is stat-ed.
    fn settle_needs_close(&self) -> bool {
        self.close_events
    }

    /// Files ready to go: checked, then started up to `--parallel`. Called
    /// on each check tick, and as uploads end while more files are due: in a
    /// burst, a slot that frees up is filled at once, not at the next tick
    /// (ticks alone would cap a burst at `--parallel` files per tick).
    fn start_ready(&mut self) {
        let now = Instant::now().into_std();
        loop {
            let room = self.parallel.saturating_sub(self.in_flight.len());
            let batch = self.settle.due(now, room);
            self.backlog = room > 0 && batch.len() == room;
            let mut started = 0;
            for path in batch {
                started += usize::from(self.start_one(path, now));
            }
            // A batch that was not full leaves nothing due. One that started
            // nothing (all waiting again, or gone) ends the look too: with
            // `--settle 0` a file whose stat moved is due again at once and
            // would be looked at for ever.
            if started == 0 || !self.backlog {
                return;
            }
            if self.in_flight.len() >= self.parallel {
                // Full: more may be due; the next upload to end looks.
                self.backlog = true;
                return;
            }
        }
    }

    /// Starts `path`'s upload if it is ready; says whether it did.
    fn start_one(&mut self, path: PathBuf, now: std::time::Instant) -> bool {
        let stat = std::fs::metadata(&path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|m| Stat::of(&m));
        let Verdict::Ready(stat) = self.settle.check(&path, stat, now) else {
            return false;
        };
        // A file found by a scan (one created with its folder, before the
        // folder's watch existed) settles on time alone; if a writer
        // still holds it open, wait for its close, which the watch now
        // in place will report.
        if self.close_events && events::open_for_writing(&path) {
            self.settle.observe(path, Seen::Changed, Some(stat), now);
            return false;
        }
        if self.in_flight.contains(&path) {
            self.again.insert(path);
            return false;
        }
        self.in_flight.insert(path.clone());
        let ctx = self.ctx.clone();
        self.tasks.spawn(async move {
            let done = task::upload(&ctx, &path, stat).await;
            (path, done)
        });
        true
    }

    /// An upload ended; `Some` with the message of a refusal every file gets.
    fn finished(
        &mut self,
        done: Result<(PathBuf, Done), tokio::task::JoinError>,
    ) -> Option<Refusal> {
        let Ok((path, done)) = done else {
            return None; // aborted at the stop
        };
        self.in_flight.remove(&path);
        let now = Instant::now().into_std();
        let requeue = match done {
            Done::Fatal(refusal) => return Some(refusal),
            Done::Committed { bytes } => {
                self.counts.committed += 1;
                self.counts.bytes += bytes;
                false
            }
            Done::Identical => {
                self.counts.identical += 1;
                false
            }
            Done::Known => {
                self.known.fetch_add(1, Ordering::Relaxed);
                false
            }
            Done::Failed => {
                self.counts.failed += 1;
                false
            }
            Done::Changed => {
                self.counts.changed += 1;
                true
            }
        };
        if self.again.remove(&path) || requeue {
            let stat = std::fs::metadata(&path).ok().map(|m| Stat::of(&m));
            if stat.is_some() {
                self.settle.observe(path, Seen::Found, stat, now);
            }
        }
        None
    }

    /// A full scan of every folder (start, reconcile); not while one runs.
    fn scan(&mut self, tx: &mpsc::Sender<(PathBuf, Stat)>, dirs: Vec<PathBuf>) -> bool {
        if self.scanning.swap(true, Ordering::AcqRel) {
            return false;
        }
        let flag = self.scanning.clone();
        self.spawn_scan(tx, dirs, Some(flag));
        true
    }

    fn scan_dir(&mut self, tx: &mpsc::Sender<(PathBuf, Stat)>, dir: PathBuf) {
        self.spawn_scan(tx, vec![dir], None);
    }

    fn spawn_scan(
        &self,
        tx: &mpsc::Sender<(PathBuf, Stat)>,
        dirs: Vec<PathBuf>,
        done: Option<Arc<AtomicBool>>,
    ) {
        let (tx, ctx, known) = (tx.clone(), self.ctx.clone(), self.known.clone());
        let follow = ctx.follow_symlinks;
        tokio::task::spawn_blocking(move || {
            for dir in dirs {
                for entry in walkdir::WalkDir::new(&dir).follow_links(follow) {
                    let Ok(entry) = entry else { continue };
                    let regular = entry.file_type().is_file() || (follow && entry.path().is_file());
                    if !regular {
                        continue;
                    }
                    let path = entry.into_path();
                    let Some(named) = ctx.roots.name(&path) else {
                        continue;
                    };
                    let Ok(meta) = std::fs::metadata(&path) else {
                        continue;
                    };
                    let stat = Stat::of(&meta);
                    if ctx.committed(&path, &named.blob, stat) {
                        known.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if tx.blocking_send((path, stat)).is_err() {
                        break; // the watch stopped
                    }
                }
            }
            if let Some(flag) = done {
                flag.store(false, Ordering::Release);
            }
        });
    }
}

/// Resolves at the first SIGTERM or Ctrl-C; a second Ctrl-C exits at once.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (term, int) else {
            return std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(());
        if int.recv().await.is_some() {
            eprintln!("\nrelay-client: interrupted again; exiting now");
            std::process::exit(i32::from(crate::run::interrupt::EXIT_INTERRUPTED));
        }
    });
    async move {
        let _ = rx.await;
    }
}
