//! What both directions share: the listing started as a task of its own, the
//! planner on a blocking thread, its work fed to the runner lazily, and the
//! planner's end (for the delete verdict) once every transfer is done.

use std::future::Future;
use std::sync::Arc;

use relay_proto::sync::delete::SpillStore;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::planner::{PLAN_AHEAD, Planned};
use super::remote::Started;
use crate::download::job::Job;
use crate::download::list::{self, ListFrom};
use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::refusal::{Refusal, listing_refused};

/// Names the listing hands the merge at most this far ahead.
pub const LIST_AHEAD: usize = 1024;

/// The listing of `prefix` (as listed: `p/`) by `job`'s way of reading, into
/// a bounded channel, once it is answered for (`Cursor::answered`: the
/// relay's opening frame, before storage's first page): a listing refused
/// (the token, the grant, no such container) stops the run here, as one
/// setup error, before any file is read or offered; without its listing a
/// sync would read every file only to be refused for each.
pub async fn start_listing(job: Arc<Job>, prefix: String) -> Result<Started, Refusal> {
    let (tx, rx) = mpsc::channel(LIST_AHEAD);
    let (end_tx, end_rx) = oneshot::channel();
    let (answered_tx, answered) = oneshot::channel();
    let opts = job.opts.clone();
    tokio::spawn(async move {
        let end = list::listing_from(&ListFrom::job(&job), &prefix, tx, Some(answered_tx)).await;
        let _ = end_tx.send(end);
    });
    // Not told: the listing ended before its first answer.
    if answered.await.is_ok() {
        return Ok(Started { rx, end: end_rx });
    }
    let ended = end_rx.await;
    if let Ok(Err(e)) = &ended
        && let Some(refusal) = listing_refused(e, &opts)
    {
        return Err(refusal);
    }
    let (again, end) = oneshot::channel();
    if let Ok(ended) = ended {
        let _ = again.send(ended);
    }
    Ok(Started { rx, end })
}

/// Runs `plan` (the planner, on a blocking thread) and every piece of work
/// it hands on through `item` in the runner; how the run stopped, and the
/// planner's end when the run finished (none when it stopped early: no
/// delete follows a run that did not end).
pub async fn drive<W, S, F>(
    runner: &mut Runner,
    plan: impl FnOnce(mpsc::Sender<W>) -> Planned<S> + Send + 'static,
    item: impl FnMut(W) -> F,
) -> (Stop, Option<Planned<S>>)
where
    W: Send + 'static,
    S: SpillStore + Send + 'static,
    F: Future<Output = Option<Refusal>> + Send + 'static,
{
    let mut planning = start_plan(plan);
    let fed = runner.feed(&mut planning.work, Some, item).await;
    planning.end(runner, fed).await
}

/// The planner running on a blocking thread; its work arrives on `work`,
/// for a driver that feeds the runner its own way (an upload's windows).
pub struct Planning<W, S> {
    pub work: mpsc::Receiver<W>,
    planner: JoinHandle<Planned<S>>,
}

/// Starts `plan` (the planner) on a blocking thread.
pub fn start_plan<W, S>(
    plan: impl FnOnce(mpsc::Sender<W>) -> Planned<S> + Send + 'static,
) -> Planning<W, S>
where
    W: Send + 'static,
    S: SpillStore + Send + 'static,
{
    let (tx, work) = mpsc::channel(PLAN_AHEAD);
    let planner = tokio::task::spawn_blocking(move || plan(tx));
    Planning { work, planner }
}

impl<W, S> Planning<W, S> {
    /// After its work was fed to the runner (`fed`: how that ended), the
    /// items in flight drained; how the run stopped, and the planner's end
    /// when the run finished.
    pub async fn end(
        self,
        runner: &mut Runner,
        fed: Result<(), Stop>,
    ) -> (Stop, Option<Planned<S>>) {
        if let Err(stop) = fed {
            return (stop, None);
        }
        let stop = runner.drain().await;
        if !stop.finished() {
            return (stop, None);
        }
        match self.planner.await {
            Ok(planned) if planned.whole => (stop, Some(planned)),
            _ => (stop, None),
        }
    }
}
