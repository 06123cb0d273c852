//! The `watch` command: its flags checked, the destination, the folders
//! (what they ignore) and the journal set up, the connection made once; then
//! the watch itself (`crate::watch`) until a signal or a stop.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::commands::setup::{self, SetupError};
use crate::commands::watch_args::WatchArgs;
use crate::transfer::file::Job;
use crate::transfer::filter::Filter;
use crate::transfer::manifest::Manifest;
use crate::ui::progress::Reporter;
use crate::watch::after::{After, AfterError};
use crate::watch::events;
use crate::watch::journal::{Journal, JournalError};
use crate::watch::roots::{DEFAULT_IGNORE, RootError, Roots};
use crate::watch::task::Ctx;
use crate::watch::{Settings, WatchEnd};

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Root(#[from] RootError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    After(#[from] AfterError),
    #[error("cannot watch: {0}")]
    Notify(#[from] notify::Error),
    #[error("{0}")]
    Usage(&'static str),
}

pub async fn run(args: WatchArgs, reporter: Arc<Reporter>) -> Result<WatchEnd, WatchError> {
    let up = &args.upload;
    usage(up)?;
    crate::transfer::walk::check_sources(&up.paths, true).map_err(SetupError::from)?;
    let dest = setup::destination(up)?;
    // A file that appears is not held behind a big one under way.
    let opts = crate::transfer::send::Options {
        order: crate::transfer::priority::Order::SmallFirst,
        ..setup::options(up, &dest)?
    };
    let after = After::parse(&args.after_upload)?;
    let (roots, journal) = folders(&args, &dest, &after)?;
    let manifest = match &up.checksums {
        Some(f) => Some(Arc::new(Manifest::load(f).map_err(SetupError::from)?)),
        None => None,
    };
    // Waiting for an unreachable relay is announced as `upload` announces it
    // (`--patience`).
    let weather = reporter.weather_sink();
    let flags: setup::ModeFlags = up.into();
    let mode = setup::mode(
        &up.connection,
        &flags,
        &opts.token,
        &dest.container,
        weather,
    );
    let mode = Arc::new(mode.await?);
    let poll = args.poll.map(|p| p.max(Duration::from_millis(100)));
    let events = events::start(&roots.dirs(), poll)?;
    reporter.notice(&format!(
        "relay-client: watching {} folder(s) ({}), settle {:?}, journal {}",
        roots.dirs().len(),
        events.how,
        args.settle,
        journal
            .as_ref()
            .map_or("none".to_string(), |j| j.file().display().to_string()),
    ));
    let ctx = Arc::new(Ctx {
        job: Job {
            mode: mode.clone(),
            opts,
            sync: up.overwrite.sync_rule(),
            attempts: up.attempts.max(1),
            dry_run: false,
        },
        roots: roots.clone(),
        journal,
        after,
        reporter: reporter.clone(),
        manifest,
        follow_symlinks: up.follow_symlinks,
    });
    let settings = Settings {
        settle: args.settle,
        max_pending: args.max_pending,
        parallel: up.parallel,
        status_interval: up.output.status_interval,
        reconcile: args.reconcile,
        patience: up.connection.patience,
    };
    Ok(crate::watch::watch(ctx, &settings, events, &roots, &mode).await)
}

/// The flags `upload` takes that a watch does not.
fn usage(up: &crate::commands::args::UploadArgs) -> Result<(), WatchError> {
    if up.dry_run {
        return Err(WatchError::Usage("watch does not take --dry-run"));
    }
    if up.output.json {
        return Err(WatchError::Usage(
            "watch does not end with one summary; use --json-lines",
        ));
    }
    Ok(())
}

/// The watched folders (what is ignored in them) and the journal, which
/// they leave out; `--after-upload move:DIR` must not be inside them.
fn folders(
    args: &WatchArgs,
    dest: &crate::transfer::walk::Destination,
    after: &After,
) -> Result<(Roots, Option<Arc<Journal>>), WatchError> {
    let up = &args.upload;
    let mut ignore: Vec<String> = if args.no_default_ignore {
        Vec::new()
    } else {
        DEFAULT_IGNORE.iter().map(|s| s.to_string()).collect()
    };
    ignore.extend(args.ignore.iter().cloned());
    let filter = Filter::new(&up.include, &up.exclude).map_err(SetupError::from)?;
    let mut roots = Roots::new(&up.paths, &dest.prefix, filter, &ignore)?;
    if let After::Move(dir) = after {
        let _ = std::fs::create_dir_all(dir);
        let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        if roots.contains(&canon) {
            return Err(AfterError::Inside(dir.clone()).into());
        }
    }
    if args.no_journal {
        return Ok((roots, None));
    }
    let file = match &args.journal {
        Some(f) => f.clone(),
        None => default_journal(&roots, &dest.container, &dest.prefix).ok_or(WatchError::Usage(
            "no home directory for the journal; give --journal",
        ))?,
    };
    let j = Journal::open(&file)?;
    roots.leave_out(&file);
    Ok((roots, Some(Arc::new(j))))
}

/// `$XDG_STATE_HOME/blob-relay/watch-HASH.sqlite` (else `~/.local/state/...`),
/// one journal per set of folders and destination.
fn default_journal(roots: &Roots, container: &str, prefix: &str) -> Option<PathBuf> {
    use sha2::Digest;
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))?;
    let mut h = sha2::Sha256::new();
    h.update(format!("{container}/{prefix}\n"));
    for d in roots.dirs() {
        h.update(d.as_os_str().as_encoded_bytes());
        h.update(b"\n");
    }
    let id = hex::encode(&h.finalize()[..8]);
    Some(state.join(format!("blob-relay/watch-{id}.sqlite")))
}
