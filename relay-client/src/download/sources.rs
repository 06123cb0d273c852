//! Every source of a download, one after the other: its listing (a task of
//! its own, into a bounded channel), the names the selection and filters
//! take, and each such blob handed to the runner (`blob::one_blob`).

use std::sync::Arc;

use relay_proto::logsafe::safe;
use relay_proto::protocol::Listed;
use tokio::sync::mpsc;

use super::blob::one_blob;
use super::job::Job;
use super::list;
use super::place::{Placed, Places, Selection};
use super::report::{self, Ended};
use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::destination::Destination;
use crate::transfer::filter::Filter;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::{Found, Reporter};
use crate::ui::report::FileError;

/// Names a listing hands the download loop at most this far ahead.
const LIST_AHEAD: usize = 1024;

/// What the sources share while they are listed one after the other.
pub struct Sources<'a> {
    pub job: &'a Job,
    pub reporter: &'a Arc<Reporter>,
    pub filter: &'a Filter,
    /// With several sources, two may name one local file: the first keeps it.
    places: Places,
    /// What the listings found so far, for status lines and the ETA.
    found: Found,
}

impl<'a> Sources<'a> {
    pub fn new(job: &'a Job, reporter: &'a Arc<Reporter>, filter: &'a Filter, n: usize) -> Self {
        Self {
            job,
            reporter,
            filter,
            places: Places::new(n),
            found: Found::default(),
        }
    }

    /// Each source (`text` as given, and what it names) into `runner`, until
    /// they are all listed and done, or the run stops.
    pub async fn run(
        mut self,
        runner: &mut Runner,
        given: &[String],
        sources: &[Destination],
    ) -> Stop {
        let mut stop = Stop::Finished;
        for (text, dest) in given.iter().zip(sources) {
            if let Err(s) = self.source(runner, text, dest).await {
                stop = s;
                break;
            }
        }
        self.found.complete = true;
        self.reporter.set_found(self.found);
        if stop.finished() {
            runner.drain().await
        } else {
            stop
        }
    }

    /// One source: its listing's blobs into `runner`, then how the listing
    /// ended (nothing matched, or failed: one line; refused: the run stops).
    async fn source(
        &mut self,
        runner: &mut Runner,
        text: &str,
        dest: &Destination,
    ) -> Result<(), Stop> {
        let job = Arc::new(for_container(self.job, &dest.container));
        let selection = Selection::new(&dest.prefix);
        let (tx, mut rx) = mpsc::channel::<Listed>(LIST_AHEAD);
        let lister = {
            let (job, prefix) = (job.clone(), dest.prefix.clone());
            tokio::spawn(async move { list::listing(&job, &prefix, tx).await })
        };
        let mut matched = 0u64;
        let reporter = self.reporter.clone();
        let admit = |listed: Listed| {
            let name = &listed.name;
            if !selection.takes(name) || !self.filter.admits(selection.filter_name(name)) {
                return None;
            }
            matched += 1;
            let placed = selection.placed(name, job.name_max);
            if let Some(local) = &placed.local
                && !self.places.first(local)
            {
                // Another source's blob keeps this local file: said, left out.
                let (container, shown) = (&dest.container, safe(name).to_string());
                let why = format!(
                    "another source already downloads to {local:?} in this run; this blob is left out"
                );
                let r = report::duplicate(container, &shown, why);
                self.reporter.finish_file(None, r, 0);
                return None;
            }
            self.found.files += 1;
            self.found.bytes += listed.size;
            self.reporter.set_found(self.found);
            Some((listed, placed))
        };
        let item = |(listed, placed): (Listed, Placed)| {
            let (job, reporter) = (job.clone(), reporter.clone());
            async move { one_blob(&job, &reporter, listed, placed).await }
        };
        runner.feed(&mut rx, admit, item).await?;
        let e = match lister.await {
            Ok(Ok(_)) if matched == 0 => FileError::new(
                ErrorCode::NotFound,
                format!(
                    "no blob named {:?} or under it",
                    safe(&dest.prefix).to_string()
                ),
                false,
            ),
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e,
            Err(e) => FileError::new(ErrorCode::Internal, format!("listing: {e}"), false),
        };
        let (container, prefix) = (&dest.container, &dest.prefix);
        let r = report::line(text, container, prefix, 0, Ended::Failed(e, 0), &job.opts)
            .map_err(Stop::Fatal)?;
        self.reporter.finish_file(None, r, 0);
        Ok(())
    }
}

/// The same job for the blobs of `container` (one source of several).
fn for_container(job: &Job, container: &str) -> Job {
    let mut opts = job.opts.clone();
    opts.container = container.to_string();
    Job {
        links: job.links.clone(),
        direct: job.direct.clone(),
        opts,
        root: (job.root.as_ref()).and_then(|r| r.parent_of(&[], false).ok()),
        name_max: job.name_max,
        overwrite: job.overwrite,
        attempts: job.attempts,
        dry_run: job.dry_run,
        index: job.index.clone(),
        patience: job.patience,
        folder_syncs: job.folder_syncs.clone(),
    }
}
