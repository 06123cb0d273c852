//! The runner of a command's items (files to upload, blobs to download): at
//! most `--parallel` in flight, status lines at the reporter's pace, and a
//! stop at Ctrl-C, when the relay stayed away past `--patience`, or at the
//! first refusal every item would get. The command hands it each item with
//! what to do with it (a future that says whether its refusal stops the run).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

use crate::run::interrupt::Interrupt;
use crate::run::outcome::Stop;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::Refusal;
use crate::ui::progress::Reporter;

pub struct Runner {
    mode: Arc<Mode>,
    interrupt: Interrupt,
    slots: Arc<Semaphore>,
    tasks: JoinSet<Option<Refusal>>,
    ticker: Option<JoinHandle<()>>,
}

impl Runner {
    /// A runner of at most `parallel` items at once over `mode`, with status
    /// lines every `status_interval` (as the reporter paces them).
    pub fn new(
        mode: Arc<Mode>,
        interrupt: Interrupt,
        parallel: usize,
        reporter: &Arc<Reporter>,
        status_interval: Duration,
    ) -> Self {
        Self {
            mode,
            interrupt,
            slots: Arc::new(Semaphore::new(parallel.max(1))),
            tasks: JoinSet::new(),
            ticker: spawn_ticker(reporter, status_interval),
        }
    }

    pub fn mode(&self) -> &Arc<Mode> {
        &self.mode
    }

    /// `fut`'s value, unless the run must stop first (Ctrl-C, patience).
    pub async fn unless_stopped<T>(&mut self, fut: impl Future<Output = T>) -> Result<T, Stop> {
        tokio::select! {
            v = fut => Ok(v),
            _ = self.interrupt.wait() => Err(Stop::Interrupted),
            _ = gave_up(&self.mode) => Err(Stop::OutOfPatience),
        }
    }

    /// A slot for one more item, with what else it waits for (`also`: the
    /// relay's windows for an upload), or why the run stops: Ctrl-C,
    /// patience, or a refusal an item in flight met.
    pub async fn slot<P>(
        &mut self,
        also: impl Future<Output = P>,
    ) -> Result<(Option<OwnedSemaphorePermit>, P), Stop> {
        let slots = self.slots.clone();
        let permits = self
            .unless_stopped(async { tokio::join!(slots.acquire_owned(), also) })
            .await?;
        while let Some(done) = self.tasks.try_join_next() {
            if let Some(refusal) = done.ok().flatten() {
                return Err(Stop::Fatal(refusal));
            }
        }
        let (slot, also) = permits;
        // The semaphore is never closed: the slot is always there.
        Ok((slot.ok(), also))
    }

    /// Runs one item, holding `permits` until it ends; `Some` from the item
    /// is a refusal every item would get, which stops the run.
    pub fn spawn<P: Send + 'static>(
        &mut self,
        permits: P,
        item: impl Future<Output = Option<Refusal>> + Send + 'static,
    ) -> AbortHandle {
        self.tasks.spawn(async move {
            let _permits = permits;
            item.await
        })
    }

    /// Every item of `items` that `admit` takes (as what it makes of it), run
    /// by `item` in a slot of its own, until `items` ends or the run must
    /// stop (`slot`).
    pub async fn feed<T, U, F>(
        &mut self,
        items: &mut mpsc::Receiver<T>,
        mut admit: impl FnMut(T) -> Option<U>,
        mut item: impl FnMut(U) -> F,
    ) -> Result<(), Stop>
    where
        F: Future<Output = Option<Refusal>> + Send + 'static,
    {
        while let Some(next) = self.unless_stopped(items.recv()).await? {
            let Some(admitted) = admit(next) else {
                continue;
            };
            let (permit, ()) = self.slot(async {}).await?;
            self.spawn(permit, item(admitted));
        }
        Ok(())
    }

    /// Waits for the items in flight, unless Ctrl-C, patience or a refusal
    /// comes first.
    pub async fn drain(&mut self) -> Stop {
        loop {
            tokio::select! {
                done = self.tasks.join_next() => match done {
                    None => return Stop::Finished,
                    Some(Ok(Some(refusal))) => return Stop::Fatal(refusal),
                    Some(_) => {}
                },
                _ = self.interrupt.wait() => return Stop::Interrupted,
                _ = gave_up(&self.mode) => return Stop::OutOfPatience,
            }
        }
    }

    /// No more status lines.
    pub fn stop_ticker(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
    }

    /// Gives the items in flight up to `limit` to end (a second Ctrl-C ends
    /// the process, not this wait).
    pub async fn wait_within(&mut self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
    }

    /// Ends the run after `stop`: no more status lines; unless every item
    /// finished, each one still in flight is dropped (its stream reset: the
    /// relay commits nothing of it and keeps what it staged, a download's
    /// partial file stays, for the rerun to resume).
    pub async fn end(mut self, stop: &Stop) -> Arc<Mode> {
        self.stop_ticker();
        if !stop.finished() {
            self.tasks.abort_all();
            if let Mode::Relay(links) = self.mode.as_ref() {
                links.abort().await;
            }
            while self.tasks.join_next().await.is_some() {}
        }
        self.mode
    }
}

/// Resolves once the relay link ran out of patience (never in direct mode).
pub async fn gave_up(mode: &Mode) {
    match mode {
        Mode::Relay(links) => links.wait_gave_up().await,
        Mode::Direct(_) => std::future::pending().await,
    }
}

/// Status lines (or bar redraws) at the reporter's pace, until aborted.
fn spawn_ticker(reporter: &Arc<Reporter>, status_interval: Duration) -> Option<JoinHandle<()>> {
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
