//! The `sync` command: its arguments made a plan once
//! (`sync_args::SyncPlan`: which way, the filters, the comparison and
//! delete rules), the connection set up as `upload`'s and `download`'s, the
//! index of the destination opened, then the sync driver (`crate::sync`)
//! through the runner; the summary carries the sync's counts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::commands::setup::{self, SetupError};
use crate::commands::sync_args::{SyncArgs, SyncPlan, Way};
use crate::download::direct::DirectReads;
use crate::download::job::{Job, JobPlan};
use crate::index::Index;
use crate::run::interrupt::Interrupt;
use crate::run::outcome::Outcome;
use crate::run::runner::Runner;
use crate::sign_in::Bearer;
use crate::sync::download::DownloadSync;
use crate::sync::upload::UploadSync;
use crate::transfer::destination::Destination;
use crate::transfer::mode::Mode;
use crate::transfer::overwrite::OverwriteMode;
use crate::transfer::send::Options;
use crate::ui::progress::Reporter;
use relay_proto::protocol::Overwrite;
use relay_proto::sync::order::NameOrder;

pub async fn run(
    args: SyncArgs,
    reporter: Arc<Reporter>,
    mut interrupt: Interrupt,
) -> Result<Outcome, SetupError> {
    let plan = SyncPlan::new(args)?;
    let patience = plan.args.connection.patience;
    let container = match &plan.way {
        Way::Upload { dest, .. } => dest.container.clone(),
        Way::Download { source, .. } => source.container.clone(),
    };
    let weather = reporter.weather_sink();
    let (token, mode) = tokio::select! {
        c = setup::connection::connected(&plan.args.connection, &plan.mode_flags, &container, weather) => c?,
        _ = interrupt.wait() => return Ok(Outcome::before_start(reporter.summary("relay"))),
    };
    let mode = Arc::new(mode);
    let parallel = if plan.args.direct && matches!(plan.way, Way::Download { .. }) {
        plan.args.parallel.clamp(1, 16)
    } else {
        plan.args.parallel
    };
    let a = &plan.args;
    let mut runner = Runner::new(
        mode.clone(),
        interrupt,
        parallel,
        &reporter,
        a.output.status_interval,
    );
    let (stop, report, deletes_ok) = match &plan.way {
        Way::Upload { folder, dest } => {
            let s = upload_sync(&plan, folder, dest, token, &mode, &reporter);
            crate::sync::upload::run(s, &mut runner, &reporter).await
        }
        Way::Download { source, folder } => {
            let s = download_sync(&plan, source, folder, token, &mode, &reporter)?;
            crate::sync::download::run(s, &mut runner, &reporter).await
        }
    };
    let mode = runner.end(&stop).await;
    let stopped = reporter.progress();
    let mut summary = crate::download::summary::summary(&mode, &reporter).await;
    summary.download = matches!(plan.way, Way::Download { .. });
    summary.ok &= deletes_ok;
    summary.sync = Some(report);
    Ok(stop.outcome(summary, &stopped, patience)?)
}

/// The index file: `--index`, else one per destination under the state
/// directory (`kind` and `key` name the destination).
fn index_file(given: &Option<PathBuf>, kind: &str, key: &Path) -> Option<PathBuf> {
    given.clone().or_else(|| Index::default_file(kind, key))
}

/// The index, opened; said once and gone on without when it cannot be (a
/// sync without it only reads more). `--dry-run` only reads one that exists.
fn open_index(file: Option<&Path>, dry_run: bool, reporter: &Reporter) -> Option<Arc<Index>> {
    let file = file?;
    if dry_run && !file.exists() {
        return None;
    }
    match Index::open(file) {
        Ok(i) => Some(Arc::new(i)),
        Err(e) => {
            reporter.notice(&format!(
                "relay-client: {e}; going on without it (every file is read)"
            ));
            None
        }
    }
}

fn upload_sync(
    plan: &SyncPlan,
    folder: &Path,
    dest: &Destination,
    token: Bearer,
    mode: &Arc<Mode>,
    reporter: &Reporter,
) -> UploadSync {
    let a = &plan.args;
    let endpoint = match (a.direct, &a.connection.relay, &a.connection.storage_url) {
        (true, _, Some(url)) | (false, None, Some(url)) => url.clone(),
        (_, Some(relay), _) => relay.clone(),
        _ => String::new(),
    };
    let key = format!("{endpoint}/{}/{}", dest.container, dest.prefix);
    let file = index_file(&a.index, "sync-upload", Path::new(&key));
    let opts = Options {
        token,
        container: dest.container.clone(),
        overwrite: Overwrite::Never,
        block_size: None,
        content_type: None,
        metadata: Default::default(),
        put_md5: false,
        compress: a.compress,
        order: Default::default(),
    };
    let lister = Arc::new(Job {
        links: mode.clone(),
        direct: direct_reads(mode),
        opts: opts.clone(),
        root: None,
        name_max: crate::download::place::NAME_MAX,
        overwrite: OverwriteMode::Never,
        attempts: a.attempts.max(1),
        dry_run: true,
        index: None,
        patience: a.connection.patience,
        folder_syncs: Default::default(),
    });
    UploadSync {
        mode: mode.clone(),
        lister,
        opts,
        attempts: a.attempts.max(1),
        dry_run: a.dry_run,
        root: folder.to_path_buf(),
        prefix: dest.prefix.clone(),
        index: open_index(file.as_deref(), a.dry_run, reporter),
        filter: plan.filter.clone(),
        order: NameOrder::default(),
        flags: plan.flags,
        rules: plan.rules,
        windows: setup::windows(&a.connection, &plan.mode_flags),
        lead: crate::sync::upload::walk_lead(),
    }
}

fn download_sync(
    plan: &SyncPlan,
    source: &Destination,
    folder: &Path,
    token: Bearer,
    mode: &Arc<Mode>,
    reporter: &Reporter,
) -> Result<DownloadSync, SetupError> {
    let a = &plan.args;
    let canonical = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
    let file = index_file(&a.index, "sync", &canonical);
    let job_plan = JobPlan {
        container: source.container.clone(),
        compress: a.compress,
        to: folder.to_path_buf(),
        umask: None,
        dry_run: a.dry_run,
        // The job opens no index of its own: the sync's is set below.
        index: None,
        no_index: true,
        overwrite: OverwriteMode::Never,
        attempts: a.attempts,
        patience: a.connection.patience,
    };
    let mut job = Job::open(job_plan, mode.clone(), token, reporter)
        .map_err(|e| SetupError::Refused(format!("DEST: {e}")))?;
    job.index = open_index(file.as_deref(), a.dry_run, reporter);
    let replacing = Job {
        links: job.links.clone(),
        direct: job.direct.clone(),
        opts: job.opts.clone(),
        root: job.root.as_ref().and_then(|r| r.parent_of(&[], false).ok()),
        name_max: job.name_max,
        overwrite: OverwriteMode::Always,
        attempts: job.attempts,
        dry_run: job.dry_run,
        index: job.index.clone(),
        patience: job.patience,
        folder_syncs: job.folder_syncs.clone(),
    };
    Ok(DownloadSync {
        job: Arc::new(job),
        replacing: Arc::new(replacing),
        prefix: source.prefix.clone(),
        filter: plan.filter.clone(),
        order: NameOrder::default(),
        flags: plan.flags,
        rules: plan.rules,
        dry_run: a.dry_run,
    })
}

/// Direct mode's reads, for the listing.
fn direct_reads(mode: &Mode) -> Option<Arc<DirectReads>> {
    match mode {
        Mode::Direct(d) => Some(Arc::new(DirectReads {
            storage: d.storage.clone(),
            id_key: d.id_key.clone(),
            ranges_in_flight: d.connections,
            budget: d.budget.clone(),
        })),
        Mode::Relay(_) => None,
    }
}
