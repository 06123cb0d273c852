//! The `download` command: its arguments made a plan once
//! (`download_args::DownloadPlan`), the connection set up, the destination
//! folder and this machine's index of it opened (`download::job`), then
//! every source's blobs through the runner (`download::sources`).

use std::sync::Arc;

use crate::commands::download_args::{DownloadArgs, DownloadPlan};
use crate::commands::setup::{self, SetupError};
use crate::download::job::Job;
use crate::download::sources::Sources;
use crate::download::summary::summary;
use crate::run::interrupt::Interrupt;
use crate::run::outcome::Outcome;
use crate::run::runner::Runner;
use crate::ui::progress::Reporter;

pub async fn run(
    args: DownloadArgs,
    reporter: Arc<Reporter>,
    mut interrupt: Interrupt,
) -> Result<Outcome, SetupError> {
    let plan = DownloadPlan::new(args)?;
    let patience = plan.job.patience;
    let weather = reporter.weather_sink();
    let first = &plan.job.container;
    let (token, mode) = tokio::select! {
        c = setup::connection::connected(&plan.connection, &plan.flags, first, weather) => c?,
        _ = interrupt.wait() => {
            let mut summary = reporter.summary("relay");
            summary.download = true;
            return Ok(Outcome::before_start(summary));
        }
    };
    let mode = Arc::new(mode);
    let job = Job::open(plan.job, mode.clone(), token, &reporter)
        .map_err(|e| SetupError::Refused(format!("--to: {e}")))?;
    let mut runner = Runner::new(
        mode,
        interrupt,
        plan.parallel,
        &reporter,
        plan.status_interval,
    );
    let stop = Sources::new(&job, &reporter, &plan.filter, plan.sources.len())
        .run(&mut runner, &plan.given, &plan.sources)
        .await;
    let mode = runner.end(&stop).await;
    // Files stopped in flight: their bars are active until the summary.
    let stopped = reporter.progress();
    let summary = summary(&mode, &reporter).await;
    Ok(stop.outcome(summary, &stopped, patience)?)
}
