//! Files of an upload in flight: how many at once against the relay's
//! windows (`InFlight`), each one's task and bar (`Uploads`), and after
//! Ctrl-C the wait for those whose bytes are all staged to be committed
//! (`Uploads::settle`). `upload` and an upload `sync` share it, so both pace
//! and stop alike.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use relay_transport::quic::Windows;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::Refusal;
use crate::ui::live_list::LiveList;
use crate::ui::progress::Reporter;

/// Bytes in flight against the relay connections' windows, in 64 KiB units: a
/// file takes min(size, stream window), at least one unit; the run's
/// connections (`--relay-connections`) each bring one connection window.
pub struct InFlight {
    units: Arc<Semaphore>,
    stream_units: u64,
    total_units: u64,
}

const IN_FLIGHT_UNIT: u64 = 64 << 10;

impl InFlight {
    pub fn new(windows: &Windows, connections: usize) -> Self {
        let connections = u64::try_from(connections.max(1)).unwrap_or(1);
        let per_connection = (windows.connection_window / IN_FLIGHT_UNIT).max(1);
        let total_units = per_connection.saturating_mul(connections);
        Self {
            units: Arc::new(Semaphore::new(
                usize::try_from(total_units)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            // A file is on one connection: its stream fits that one's window.
            stream_units: (windows.stream_window / IN_FLIGHT_UNIT).clamp(1, per_connection),
            total_units,
        }
    }

    fn units_for(&self, size: u64) -> u32 {
        let units = size
            .div_ceil(IN_FLIGHT_UNIT)
            .clamp(1, self.stream_units)
            .min(self.total_units);
        u32::try_from(units).unwrap_or(u32::MAX)
    }

    pub async fn acquire(&self, size: u64) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.units
            .clone()
            .acquire_many_owned(self.units_for(size))
            .await
            .ok()
    }
}

/// After Ctrl-C, how long the files whose every byte is already staged may take
/// to be committed (their Receipt), so the report says what is committed
/// rather than "may be". A second Ctrl-C ends the wait at once.
pub const COMMIT_WAIT: Duration = Duration::from_secs(30);

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

/// The files of an upload in flight, paced by the relay's windows.
pub struct Uploads {
    window: InFlight,
    running: LiveList<Running>,
}

impl Uploads {
    /// Each relay connection of `mode` brings its own window
    /// (`--relay-connections`); direct mode counts as one.
    pub fn new(windows: &Windows, mode: &Mode) -> Self {
        let connections = match mode {
            Mode::Relay(links) => links.all().len(),
            Mode::Direct(_) => 1,
        };
        Self {
            window: InFlight::new(windows, connections),
            running: LiveList::default(),
        }
    }

    /// Starts one file of `size` bytes as `item` (given its bar, made once
    /// it may start) when a slot of `--parallel` and its share of the
    /// windows (min(size, stream window)) are free, or says why the run
    /// stops first.
    pub async fn start<F>(
        &mut self,
        runner: &mut Runner,
        reporter: &Reporter,
        blob: &str,
        size: u64,
        item: impl FnOnce(ProgressBar) -> F,
    ) -> Result<(), Stop>
    where
        F: Future<Output = Option<Refusal>> + Send + 'static,
    {
        let permits = runner.slot(self.window.acquire(size)).await?;
        let bar = reporter.start(blob);
        let task = runner.spawn(permits, item(bar.clone()));
        self.running
            .push(Running { task, bar }, |r| !r.task.is_finished());
        Ok(())
    }

    /// After the run stopped with `stop`: on Ctrl-C (unless the relay is
    /// away, when no commit can land), every file that still has bytes to
    /// stage is stopped (its stream reset: the relay keeps what it staged for
    /// the rerun) and the ones whose bytes are all staged get up to
    /// `COMMIT_WAIT` to be committed.
    pub async fn settle(&self, runner: &mut Runner, stop: &Stop, reporter: &Reporter) {
        let offline = matches!(runner.mode().as_ref(), Mode::Relay(links) if links.waiting());
        if !matches!(stop, Stop::Interrupted) || offline {
            return;
        }
        runner.stop_ticker();
        let mut committing = 0;
        for r in self.running.iter().filter(|r| !r.task.is_finished()) {
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
        runner.wait_within(COMMIT_WAIT).await;
    }
}
