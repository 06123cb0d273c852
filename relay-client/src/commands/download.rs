//! The `download` command: its sources and the connection set up once, the
//! destination folder and this machine's index of it opened, then every
//! source's blobs through the runner (`download::sources`).

use std::sync::Arc;

use relay_proto::protocol::Overwrite;

use crate::commands::download_args::{self as args, DownloadArgs};
use crate::commands::setup::{self, SetupError};
use crate::download::job::Job;
use crate::download::safe_fs::Folder;
use crate::download::sources::Sources;
use crate::index::Index;
use crate::run::interrupt::Interrupt;
use crate::run::outcome::Outcome;
use crate::run::runner::Runner;
use crate::transfer::filter::Filter;
use crate::transfer::mode::Mode;
use crate::transfer::send::Options;
use crate::ui::progress::Reporter;
use crate::ui::report::Summary;

pub async fn run(
    args: DownloadArgs,
    reporter: Arc<Reporter>,
    mut interrupt: Interrupt,
) -> Result<Outcome, SetupError> {
    let sources = args::sources(&args.sources)?;
    let filter = Filter::new(&args.include, &args.exclude)?;
    let first = &sources[0];
    args::same_account(&args, &args.sources, &sources)?;
    let opts = options(&args, &first.container)?;
    let weather = reporter.weather_sink();
    let flags = args::mode_flags(&args);
    let mode = tokio::select! {
        m = setup::mode(&args.connection, &flags, &opts.token, &first.container, weather) => Arc::new(m?),
        _ = interrupt.wait() => {
            let mut summary = reporter.summary("relay");
            summary.download = true;
            return Ok(Outcome::before_start(summary));
        }
    };
    let job = job(&args, mode.clone(), opts, &reporter)?;
    // Direct mode: at most 16 files at once, their ranges held within
    // --memory-budget (`direct::Ranges`).
    let parallel = if args.direct {
        args.parallel.clamp(1, 16)
    } else {
        args.parallel
    };
    let mut runner = Runner::new(mode, interrupt, parallel, &reporter, args.status_interval);
    let stop = Sources::new(&job, &reporter, &filter, sources.len())
        .run(&mut runner, &args.sources, &sources)
        .await;
    let stop = if stop.finished() {
        runner.drain().await
    } else {
        stop
    };
    let mode = runner.end(&stop).await;
    // Files stopped in flight: their bars are active until the summary.
    let stopped = reporter.progress();
    let summary = summary(&mode, &reporter).await;
    Ok(stop.outcome(summary, &stopped, args.connection.patience)?)
}

/// What each Fetch carries: the token, and `--compress` (asked for where the
/// handshake agreed); the rest is upload's and unused here.
fn options(args: &DownloadArgs, container: &str) -> Result<Options, SetupError> {
    Ok(Options {
        token: setup::bearer(&args.connection, args.direct)?,
        container: container.to_string(),
        overwrite: Overwrite::Never,
        block_size: None,
        content_type: None,
        metadata: Default::default(),
        put_md5: false,
        compress: args.compress,
        order: Default::default(),
    })
}

/// The run's job: the destination folder (not made with `--dry-run`) and
/// this machine's index of it.
fn job(
    args: &DownloadArgs,
    mode: Arc<Mode>,
    opts: Options,
    reporter: &Reporter,
) -> Result<Job, SetupError> {
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
        open_index(args, reporter)
    };
    Ok(Job::new(
        mode,
        opts,
        root,
        args.overwrite,
        args.attempts,
        args.dry_run,
        index,
        args.connection.patience,
    ))
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

/// The run's summary: a download's, with the relay's connections and path.
async fn summary(mode: &Mode, reporter: &Reporter) -> Summary {
    let mut summary = reporter.summary(mode.name());
    summary.download = true;
    if let Mode::Relay(links) = mode {
        summary.warm_start = Some(links.remember_path());
        links.close().await;
        summary.connections = Some(links.connections());
    }
    summary
}
