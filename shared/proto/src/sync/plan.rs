//! A sync's decisions, one name at a time: the merge's pairs judged by the
//! "unchanged" rules with the index's record, and names only the
//! destination has turned into delete candidates (decided later, by the
//! [`DeleteSet`](super::delete_set::DeleteSet)).
//!
//! The index is asked per name (`lookup`), only where its answer matters;
//! a lookup that fails may answer `None`: the index is a cache, and a
//! missing record only costs a read (or keeps a local file from deletion).

use super::delete::{DeleteCandidate, Origin};
use super::entry::{IndexRecord, LocalEntry, Named, RemoteEntry};
use super::join::{Completion, Gap, Join, Joined, Tally};
use super::order::{NameOrder, OrderError, Side};
use super::unchanged::{
    ConflictReason, DownloadCheck, FetchReason, SendReason, UploadCheck, download_check,
    upload_check,
};

/// The comparison flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompareFlags {
    /// `--checksum`: every file present on both sides is read and hashed.
    pub checksum: bool,
    /// `--overwrite`: a local file changed since it was placed is replaced.
    pub overwrite: bool,
}

/// One name of an upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadDecision {
    /// Unchanged: not read, not offered.
    Skip(String),
    /// Nothing moves; the index takes the blob's new ETag.
    Adopt {
        local: LocalEntry,
        remote: RemoteEntry,
    },
    Send {
        local: LocalEntry,
        reason: SendReason,
        /// The blob the listing showed under the name, if any: the send
        /// replaces only that version (`If-Match` its ETag), and none when
        /// there was none, so a blob written after the listing is never
        /// replaced unseen.
        listed: Option<RemoteEntry>,
    },
    Delete(DeleteCandidate),
    Gap(Side, Gap),
}

/// One name of a download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownloadDecision {
    /// Unchanged: not read, not fetched.
    Skip(String),
    /// Nothing moves; the index takes the blob's new ETag.
    Adopt {
        local: LocalEntry,
        remote: RemoteEntry,
    },
    Fetch {
        remote: RemoteEntry,
        reason: FetchReason,
    },
    /// Read and hash the local file, then record it or treat it as a
    /// conflict (see [`DownloadCheck::Compare`]).
    Compare {
        local: LocalEntry,
        remote: RemoteEntry,
    },
    Conflict {
        local: LocalEntry,
        remote: RemoteEntry,
        reason: ConflictReason,
    },
    Delete(DeleteCandidate),
    Gap(Side, Gap),
}

/// Which way a sync goes: what each side holds and how a pair is judged.
pub trait Direction {
    type Source: Named;
    type Dest: Named;
    type Decision;

    /// The decision for one step of the merge.
    fn decide<F: FnMut(&str) -> Option<IndexRecord>>(
        joined: Joined<Self::Source, Self::Dest>,
        lookup: &mut F,
        flags: CompareFlags,
    ) -> Self::Decision;
}

/// The local walk (source) against the listing (destination).
pub struct Upload;

/// The listing (source) against the local walk (destination).
pub struct Download;

/// A sync's decisions: the merge of `source` and `dest`, judged one way.
pub struct Plan<R: Direction, SI, DI, F> {
    join: Join<SI, R::Source, DI, R::Dest>,
    lookup: F,
    flags: CompareFlags,
}

pub type UploadPlan<W, L, F> = Plan<Upload, W, L, F>;
pub type DownloadPlan<L, W, F> = Plan<Download, L, W, F>;

impl<R, SI, DI, F> Plan<R, SI, DI, F>
where
    R: Direction,
    SI: Iterator<Item = Result<R::Source, Gap>>,
    DI: Iterator<Item = Result<R::Dest, Gap>>,
    F: FnMut(&str) -> Option<IndexRecord>,
{
    pub fn new(source: SI, dest: DI, order: NameOrder, lookup: F, flags: CompareFlags) -> Self {
        Self {
            join: Join::new(source, dest, order),
            lookup,
            flags,
        }
    }

    pub fn completion(&self) -> Completion {
        self.join.completion()
    }

    pub fn tally(&self) -> Tally {
        self.join.tally()
    }
}

impl<R, SI, DI, F> Iterator for Plan<R, SI, DI, F>
where
    R: Direction,
    SI: Iterator<Item = Result<R::Source, Gap>>,
    DI: Iterator<Item = Result<R::Dest, Gap>>,
    F: FnMut(&str) -> Option<IndexRecord>,
{
    type Item = Result<R::Decision, OrderError>;

    fn next(&mut self) -> Option<Self::Item> {
        let joined = self.join.next()?;
        Some(joined.map(|j| R::decide(j, &mut self.lookup, self.flags)))
    }
}

impl Direction for Upload {
    type Source = LocalEntry;
    type Dest = RemoteEntry;
    type Decision = UploadDecision;

    fn decide<F: FnMut(&str) -> Option<IndexRecord>>(
        joined: Joined<LocalEntry, RemoteEntry>,
        lookup: &mut F,
        flags: CompareFlags,
    ) -> UploadDecision {
        match joined {
            Joined::Source(local) => UploadDecision::Send {
                local,
                reason: SendReason::New,
                listed: None,
            },
            Joined::Dest(remote) => UploadDecision::Delete(DeleteCandidate::Remote {
                name: remote.name,
                etag: remote.etag,
            }),
            Joined::Both(local, remote) => {
                let record = lookup(&local.name);
                match upload_check(&local, Some(&remote), record.as_ref(), flags.checksum) {
                    UploadCheck::Unchanged => UploadDecision::Skip(local.name),
                    UploadCheck::Adopt => UploadDecision::Adopt { local, remote },
                    UploadCheck::Send(reason) => UploadDecision::Send {
                        local,
                        reason,
                        listed: Some(remote),
                    },
                }
            }
            Joined::Gap(side, gap) => UploadDecision::Gap(side, gap),
        }
    }
}

impl Direction for Download {
    type Source = RemoteEntry;
    type Dest = LocalEntry;
    type Decision = DownloadDecision;

    fn decide<F: FnMut(&str) -> Option<IndexRecord>>(
        joined: Joined<RemoteEntry, LocalEntry>,
        lookup: &mut F,
        flags: CompareFlags,
    ) -> DownloadDecision {
        let (remote, local) = match joined {
            Joined::Gap(side, gap) => return DownloadDecision::Gap(side, gap),
            Joined::Dest(local) => return local_only(local, lookup),
            Joined::Source(remote) => (remote, None),
            Joined::Both(remote, local) => (remote, Some(local)),
        };
        let record = local.as_ref().and_then(|l| lookup(&l.name));
        let CompareFlags {
            checksum,
            overwrite,
        } = flags;
        let check = download_check(
            &remote,
            local.as_ref(),
            record.as_ref(),
            checksum,
            overwrite,
        );
        match (check, local) {
            (DownloadCheck::Unchanged, _) => DownloadDecision::Skip(remote.name),
            (DownloadCheck::Fetch(reason), _) => DownloadDecision::Fetch { remote, reason },
            (DownloadCheck::Adopt, Some(local)) => DownloadDecision::Adopt { local, remote },
            (DownloadCheck::Compare, Some(local)) => DownloadDecision::Compare { local, remote },
            (DownloadCheck::Conflict(reason), Some(local)) => DownloadDecision::Conflict {
                local,
                remote,
                reason,
            },
            // Every verdict but Fetch needs a local file; without one it is new.
            (_, None) => DownloadDecision::Fetch {
                remote,
                reason: FetchReason::New,
            },
        }
    }
}

/// A local file with no blob: a delete candidate, with where it came from.
fn local_only<F: FnMut(&str) -> Option<IndexRecord>>(
    local: LocalEntry,
    lookup: &mut F,
) -> DownloadDecision {
    let origin = match lookup(&local.name) {
        None => Origin::Unknown,
        Some(r) if local.stat.same_file_as(&r.stat) => Origin::Placed,
        Some(_) => Origin::ChangedSincePlaced,
    };
    DownloadDecision::Delete(DeleteCandidate::Local {
        name: local.name,
        origin,
        stat: local.stat,
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
