//! One listed blob to its report: where it goes (`place::Placed`), then with
//! `--dry-run` what is on disk there, else the download with its retries
//! (`retried`); how it ended becomes its line (`report`).

use relay_proto::logsafe::safe;
use relay_proto::protocol::Listed;
use relay_proto::session::download::Local;

use super::fetch;
use super::job::Job;
use super::place::Placed;
use super::report::{self, Ended};
use super::retried;
use crate::transfer::refusal::Refusal;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::FileError;

/// One listed blob to its report; the refusal when it is one every file
/// would get (the run stops with one setup error).
pub async fn one_blob(
    job: &Job,
    reporter: &Reporter,
    listed: Listed,
    placed: Placed,
) -> Option<Refusal> {
    let container = &job.opts.container;
    let shown = safe(&listed.name).to_string();
    let size = listed.size;
    let mut bar = None;
    let (path, ended) = match placed.components {
        Err(e) => {
            let e = FileError::new(ErrorCode::InvalidName, e.to_string(), false);
            (format!("{container}/{shown}"), Ended::BadName(e))
        }
        Ok(comps) => {
            let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
            let local_path = comps.iter().fold(job.root_path(), |p, c| p.join(c));
            // With `--dry-run` the folders are looked at, never made.
            let parent = (job.root.as_ref()).map(|root| root.parent_of(&comps, !job.dry_run));
            let ended = if job.dry_run {
                let leaf = comps.last().copied().unwrap_or_default();
                let here = (parent.and_then(Result::ok))
                    .and_then(|parent| fetch::local(&parent, leaf).ok())
                    .unwrap_or(Local::Absent);
                let overwrite = job.overwrite;
                Ended::Planned { here, overwrite }
            } else {
                let bar = bar.insert(reporter.start(&shown));
                match retried::download(job, parent, &comps, &listed, bar).await {
                    Ok((done, attempts)) => Ended::Done(done, attempts),
                    Err((e, attempts)) => Ended::Failed(e, attempts),
                }
            };
            (local_path.display().to_string(), ended)
        }
    };
    match report::line(&path, container, &shown, size, ended, &job.opts) {
        Ok(report) => {
            reporter.finish_file(bar.as_ref(), report, size);
            None
        }
        Err(refusal) => {
            bar.inspect(|bar| bar.finish_and_clear());
            Some(refusal)
        }
    }
}
