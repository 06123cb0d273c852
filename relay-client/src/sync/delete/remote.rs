//! Remote deletes through a seam: [`RemoteDeleter`] deletes one listed blob
//! version (through the relay, or directly), and [`run`] keeps a small
//! fixed number of those in flight over the batch, in name order, stopping
//! every delete at the first refusal.

use std::collections::HashMap;
use std::sync::Arc;

use relay_proto::sync::delete::DeleteCandidate;
use tokio::task::JoinSet;

use super::report::{DeleteSink, DeleteSummary, Outcome, Stop};

/// Deletes in flight at once: enough to hide a round trip's latency, few
/// enough that a refusal stops the batch after at most this many more.
pub const IN_FLIGHT: usize = 8;

/// What the destination said about one delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteOutcome {
    Deleted,
    /// No blob of that name any more.
    AlreadyGone,
    /// The blob is no longer the version listed (`If-Match` failed): written
    /// after the listing, so kept.
    Changed,
    /// The caller may not delete here (no delete grant): true of every blob,
    /// so the whole batch stops.
    Refused {
        reason: String,
    },
}

/// A delete that did not get an answer (the connection, storage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RemoteDeleteError(pub String);

/// Deletes one blob version below the sync's prefix, `If-Match` its ETag.
#[async_trait::async_trait]
pub trait RemoteDeleter: Send + Sync {
    /// `name` is below the sync's prefix, as the listing gave it; `etag` is
    /// the listed one, quoted as in the headers.
    async fn delete(&self, name: &str, etag: &str) -> Result<RemoteOutcome, RemoteDeleteError>;
}

type Answer = Result<RemoteOutcome, RemoteDeleteError>;

/// Carries out `candidates` with at most [`IN_FLIGHT`] deletes at once.
/// After a refusal (or a candidate that cannot be read back) no delete is
/// started; those in flight are waited for and counted, so the summary says
/// what was done.
pub async fn run<E: std::error::Error>(
    candidates: impl Iterator<Item = Result<DeleteCandidate, E>>,
    deleter: Arc<dyn RemoteDeleter>,
    summary: &mut DeleteSummary,
    sink: &mut (dyn DeleteSink + Send),
) -> Result<(), Stop> {
    let mut candidates = candidates;
    let mut in_flight: JoinSet<Answer> = JoinSet::new();
    let mut stop: Option<Stop> = None;
    // The names in flight, by task (at most IN_FLIGHT): a task that panics
    // is still reported under its name.
    let mut names: HashMap<tokio::task::Id, String> = HashMap::new();
    loop {
        while stop.is_none() && in_flight.len() < IN_FLIGHT {
            match candidates.next() {
                None => break,
                Some(Err(e)) => stop = Some(Stop::Spill(e.to_string())),
                Some(Ok(DeleteCandidate::Remote { name, etag })) => {
                    let deleter = Arc::clone(&deleter);
                    let asked = name.clone();
                    let task = in_flight.spawn(async move { deleter.delete(&asked, &etag).await });
                    names.insert(task.id(), name);
                }
                Some(Ok(DeleteCandidate::Local { name, .. })) => {
                    let why = "a local file in a remote destination's batch".to_string();
                    summary.record(sink, name, Outcome::Failed(why));
                }
            }
        }
        let Some(joined) = in_flight.join_next_with_id().await else {
            break;
        };
        let (id, answer) = match joined {
            Ok((id, answer)) => (id, answer),
            Err(e) => (e.id(), Err(RemoteDeleteError(format!("no answer: {e}")))),
        };
        let name = names.remove(&id).unwrap_or_default();
        let outcome = match answer {
            Ok(RemoteOutcome::Deleted) => Outcome::Deleted,
            Ok(RemoteOutcome::AlreadyGone) => Outcome::AlreadyGone,
            Ok(RemoteOutcome::Changed) => {
                Outcome::KeptChanged("written after the listing".to_string())
            }
            Ok(RemoteOutcome::Refused { reason }) => {
                // One error for the batch, not a line per blob.
                if stop.is_none() {
                    stop = Some(Stop::Refused(reason));
                }
                continue;
            }
            Err(e) => Outcome::Failed(e.to_string()),
        };
        summary.record(sink, name, outcome);
    }
    stop.map_or(Ok(()), Err)
}

#[cfg(test)]
#[path = "remote_tests.rs"]
pub(crate) mod tests;
