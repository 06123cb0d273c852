//! A sync's decisions, one name at a time: the merge's pairs judged by the
//! "unchanged" rules with the index's record, and names only the
//! destination has turned into delete candidates (decided later, by the
//! [`DeleteSet`](super::delete_set::DeleteSet)).
//!
//! The index is asked per name (`lookup`), only where its answer matters;
//! a lookup that fails may answer `None`: the index is a cache, and a
//! missing record only costs a read (or keeps a local file from deletion).

use super::delete::{DeleteCandidate, Origin};
use super::entry::{IndexRecord, LocalEntry, RemoteEntry};
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

/// An upload: the local walk (source) against the listing (destination).
pub struct UploadPlan<W, L, F> {
    join: Join<W, LocalEntry, L, RemoteEntry>,
    lookup: F,
    flags: CompareFlags,
}

impl<W, L, F> UploadPlan<W, L, F>
where
    W: Iterator<Item = Result<LocalEntry, Gap>>,
    L: Iterator<Item = Result<RemoteEntry, Gap>>,
    F: FnMut(&str) -> Option<IndexRecord>,
{
    pub fn new(walk: W, listing: L, order: NameOrder, lookup: F, flags: CompareFlags) -> Self {
        Self {
            join: Join::new(walk, listing, order),
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

    fn decide(&mut self, joined: Joined<LocalEntry, RemoteEntry>) -> UploadDecision {
        match joined {
            Joined::Source(local) => UploadDecision::Send {
                local,
                reason: SendReason::New,
            },
            Joined::Dest(remote) => UploadDecision::Delete(DeleteCandidate::Remote {
                name: remote.name,
                etag: remote.etag,
            }),
            Joined::Both(local, remote) => {
                let record = (self.lookup)(&local.name);
                match upload_check(&local, Some(&remote), record.as_ref(), self.flags.checksum) {
                    UploadCheck::Unchanged => UploadDecision::Skip(local.name),
                    UploadCheck::Adopt => UploadDecision::Adopt { local, remote },
                    UploadCheck::Send(reason) => UploadDecision::Send { local, reason },
                }
            }
            Joined::Gap(side, gap) => UploadDecision::Gap(side, gap),
        }
    }
}

impl<W, L, F> Iterator for UploadPlan<W, L, F>
where
    W: Iterator<Item = Result<LocalEntry, Gap>>,
    L: Iterator<Item = Result<RemoteEntry, Gap>>,
    F: FnMut(&str) -> Option<IndexRecord>,
{
    type Item = Result<UploadDecision, OrderError>;

    fn next(&mut self) -> Option<Self::Item> {
        let joined = self.join.next()?;
        Some(joined.map(|j| self.decide(j)))
    }
}

/// A download: the listing (source) against the local walk (destination).
pub struct DownloadPlan<L, W, F> {
    join: Join<L, RemoteEntry, W, LocalEntry>,
    lookup: F,
    flags: CompareFlags,
}

impl<L, W, F> DownloadPlan<L, W, F>
where
    L: Iterator<Item = Result<RemoteEntry, Gap>>,
    W: Iterator<Item = Result<LocalEntry, Gap>>,
    F: FnMut(&str) -> Option<IndexRecord>,
{
    pub fn new(listing: L, walk: W, order: NameOrder, lookup: F, flags: CompareFlags) -> Self {
        Self {
            join: Join::new(listing, walk, order),
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

    fn decide(&mut self, joined: Joined<RemoteEntry, LocalEntry>) -> DownloadDecision {
        let (remote, local) = match joined {
            Joined::Gap(side, gap) => return DownloadDecision::Gap(side, gap),
            Joined::Dest(local) => return self.local_only(local),
            Joined::Source(remote) => (remote, None),
            Joined::Both(remote, local) => (remote, Some(local)),
        };
        let record = match &local {
            Some(l) => (self.lookup)(&l.name),
            None => None,
        };
        let CompareFlags {
            checksum,
            overwrite,
        } = self.flags;
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

    /// A local file with no blob: a delete candidate, with where it came from.
    fn local_only(&mut self, local: LocalEntry) -> DownloadDecision {
        let origin = match (self.lookup)(&local.name) {
            None => Origin::Unknown,
            Some(r) if local.stat.same_file_as(&r.stat) => Origin::Placed,
            Some(_) => Origin::ChangedSincePlaced,
        };
        DownloadDecision::Delete(DeleteCandidate::Local {
            name: local.name,
            origin,
        })
    }
}

impl<L, W, F> Iterator for DownloadPlan<L, W, F>
where
    L: Iterator<Item = Result<RemoteEntry, Gap>>,
    W: Iterator<Item = Result<LocalEntry, Gap>>,
    F: FnMut(&str) -> Option<IndexRecord>,
{
    type Item = Result<DownloadDecision, OrderError>;

    fn next(&mut self) -> Option<Self::Item> {
        let joined = self.join.next()?;
        Some(joined.map(|j| self.decide(j)))
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
