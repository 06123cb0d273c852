//! Every source of a download, one after the other: its listing (a task of
//! its own, into a bounded channel), the names the selection and filters
//! take, and each such blob handed to the runner (`blob::one_blob`).

use std::collections::HashSet;
use std::sync::Arc;

use relay_proto::logsafe::safe;
use relay_proto::protocol::Listed;
use tokio::sync::mpsc;

use super::blob::one_blob;
use super::job::Job;
use super::list;
use super::place::Selection;
use crate::run::outcome::Stop;
use crate::run::runner::Runner;
use crate::transfer::destination::Destination;
use crate::transfer::file::{blank, failed};
use crate::transfer::filter::Filter;
use crate::transfer::refusal::fatal;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::{Found, Reporter};
use crate::ui::report::{ErrorReport, FileError, Status};

/// Names a listing hands the download loop at most this far ahead.
const LIST_AHEAD: usize = 1024;

/// What the sources share while they are listed one after the other.
pub struct Sources<'a> {
    pub job: &'a Job,
    pub reporter: &'a Arc<Reporter>,
    pub filter: &'a Filter,
    /// With several sources, two may name one local file: the first keeps
    /// it. 16 bytes per file (only then), as upload's walk keeps per blob name.
    places: Option<HashSet<[u8; 16]>>,
    /// What the listings found so far, for status lines and the ETA.
    found: Found,
}

impl<'a> Sources<'a> {
    pub fn new(job: &'a Job, reporter: &'a Arc<Reporter>, filter: &'a Filter, n: usize) -> Self {
        Self {
            job,
            reporter,
            filter,
            places: (n > 1).then(HashSet::new),
            found: Found::default(),
        }
    }

    /// Each source (`text` as given, and what it names) into `runner`, until
    /// they are all listed or the run stops.
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
        stop
    }

    /// One source: its listing's blobs into `runner`, then how the listing
    /// ended (nothing matched, or failed: one line; refused: the run stops).
    async fn source(
        &mut self,
        runner: &mut Runner,
        text: &str,
        dest: &Destination,
    ) -> Result<(), Stop> {
        let job = Arc::new(self.job.for_container(&dest.container));
        let selection = Selection::new(&dest.prefix);
        let (tx, mut rx) = mpsc::channel::<Listed>(LIST_AHEAD);
        let lister = {
            let (job, prefix) = (job.clone(), dest.prefix.clone());
            tokio::spawn(async move { list::listing(&job, &prefix, tx).await })
        };
        let mut matched = 0u64;
        while let Some(listed) = runner.unless_stopped(rx.recv()).await? {
            if !selection.takes(&listed.name)
                || !self.filter.admits(selection.filter_name(&listed.name))
            {
                continue;
            }
            matched += 1;
            if !self.first_to(&selection, &listed, &dest.container) {
                continue;
            }
            self.found.files += 1;
            self.found.bytes += listed.size;
            self.reporter.set_found(self.found);
            let (permit, ()) = runner.slot(async {}).await?;
            let (job, reporter, selection) =
                (job.clone(), self.reporter.clone(), selection.clone());
            runner.spawn(permit, async move {
                one_blob(&job, &reporter, &selection, listed).await
            });
        }
        let e = match lister.await {
            Ok(Ok(_)) if matched == 0 => not_found(&dest.prefix),
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => match fatal(&e, &job.opts) {
                Some(refusal) => return Err(Stop::Fatal(refusal)),
                None => e,
            },
            Err(e) => FileError::new(ErrorCode::Internal, format!("listing: {e}"), false),
        };
        let r = failed(text, &dest.container, &dest.prefix, e);
        self.reporter.finish_file(None, r, 0);
        Ok(())
    }

    /// Whether `listed` is the first blob of the run for its local file;
    /// another is reported as a duplicate, left out.
    fn first_to(&mut self, selection: &Selection, listed: &Listed, container: &str) -> bool {
        let Some(places) = &mut self.places else {
            return true;
        };
        let Ok(local) = selection.local_name(&listed.name) else {
            return true;
        };
        if places.insert(place_key(local)) {
            return true;
        }
        let shown = safe(&listed.name).to_string();
        let mut r = blank(
            &format!("{container}/{shown}"),
            container,
            &shown,
            Status::Failed,
        );
        r.error = Some(ErrorReport {
            code: ErrorCode::Duplicate,
            message: format!(
                "another source already downloads to {local:?} in this run; this blob is left out"
            ),
        });
        self.reporter.finish_file(None, r, 0);
        false
    }
}

/// A source under which no blob matched.
fn not_found(prefix: &str) -> FileError {
    FileError::new(
        ErrorCode::NotFound,
        format!("no blob named {:?} or under it", safe(prefix).to_string()),
        false,
    )
}

/// A local name's key for the duplicate check (a prefix of its SHA-256).
fn place_key(local: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(local.as_bytes());
    let mut k = [0u8; 16];
    k.copy_from_slice(&h[..16]);
    k
}
