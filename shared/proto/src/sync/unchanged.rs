//! "Unchanged costs nothing": from what the walk, the listing and the index
//! say about one name, whether its file must be read at all. No I/O: the
//! caller brings the three facts and acts on the answer.

use super::entry::{IndexRecord, LocalEntry, RemoteEntry};

/// Why an upload sends a file (it is read, hashed and offered; the relay's
/// skip rules may still find the blob identical).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendReason {
    /// No blob of this name (also when the index says one was sent: it was
    /// removed at the destination since, and is sent again).
    New,
    /// This machine has no record of sending it.
    NotIndexed,
    /// The file's `stat` differs from the one recorded.
    ChangedLocally,
    /// The blob is no longer the version this machine sent.
    ChangedRemotely,
    /// `--checksum`: everything is read.
    Checksum,
}

/// An upload's verdict for a file that exists locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadCheck {
    /// Neither read nor offered.
    Unchanged,
    /// The blob is a new version holding the recorded bytes (its vouched
    /// SHA-256 is the one recorded): the index takes its ETag; nothing moves.
    Adopt,
    Send(SendReason),
}

/// Whether a local file must be sent. `remote` is the blob listed under its
/// name, `record` the index's row for the name.
pub fn upload_check(
    local: &LocalEntry,
    remote: Option<&RemoteEntry>,
    record: Option<&IndexRecord>,
    checksum: bool,
) -> UploadCheck {
    let Some(remote) = remote else {
        return UploadCheck::Send(SendReason::New);
    };
    if checksum {
        return UploadCheck::Send(SendReason::Checksum);
    }
    let Some(record) = record else {
        return UploadCheck::Send(SendReason::NotIndexed);
    };
    if !local.stat.same_file_as(&record.stat) {
        return UploadCheck::Send(SendReason::ChangedLocally);
    }
    if remote.size != record.stat.size {
        return UploadCheck::Send(SendReason::ChangedRemotely);
    }
    if remote.etag == record.etag {
        UploadCheck::Unchanged
    } else if vouches_for(remote, record) {
        UploadCheck::Adopt
    } else {
        UploadCheck::Send(SendReason::ChangedRemotely)
    }
}

/// Whether the blob's vouched hash is the recorded one.
fn vouches_for(remote: &RemoteEntry, record: &IndexRecord) -> bool {
    remote
        .vouched_sha256
        .as_deref()
        .is_some_and(|h| h.eq_ignore_ascii_case(&record.sha256))
}

/// Why a download fetches a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchReason {
    /// No local file of this name.
    New,
    /// A new version of the blob; the local file is the one placed from
    /// the old version, untouched since.
    ChangedRemotely,
    /// The local file changed since it was placed and `--overwrite` said
    /// to replace it.
    Overwrite,
}

/// Why a local file is not replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictReason {
    /// Changed since this machine placed it; the blob is the version placed.
    ChangedLocally,
    /// Changed since it was placed, and the blob has a new version too.
    ChangedOnBothSides,
}

/// A download's verdict for a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownloadCheck {
    /// Not read, not fetched.
    Unchanged,
    /// A new version of the blob holding the recorded bytes: the index
    /// takes its ETag; nothing moves.
    Adopt,
    Fetch(FetchReason),
    /// A local file this machine has no record of (or `--checksum`): read
    /// and hash it; the same bytes as the blob's vouched hash are recorded,
    /// different ones are a conflict unless `--overwrite`.
    Compare,
    Conflict(ConflictReason),
}

/// Whether a blob must be fetched. `local` is the file of its name, if any.
pub fn download_check(
    remote: &RemoteEntry,
    local: Option<&LocalEntry>,
    record: Option<&IndexRecord>,
    checksum: bool,
    overwrite: bool,
) -> DownloadCheck {
    let Some(local) = local else {
        return DownloadCheck::Fetch(FetchReason::New);
    };
    let record = match record {
        Some(r) if !checksum => r,
        _ => return DownloadCheck::Compare,
    };
    if !local.stat.same_file_as(&record.stat) {
        return if overwrite {
            DownloadCheck::Fetch(FetchReason::Overwrite)
        } else if remote.etag == record.etag {
            DownloadCheck::Conflict(ConflictReason::ChangedLocally)
        } else {
            DownloadCheck::Conflict(ConflictReason::ChangedOnBothSides)
        };
    }
    if remote.etag == record.etag && remote.size == record.stat.size {
        DownloadCheck::Unchanged
    } else if remote.size == record.stat.size && vouches_for(remote, record) {
        DownloadCheck::Adopt
    } else {
        DownloadCheck::Fetch(FetchReason::ChangedRemotely)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::entry::{FileStat, Identity};

    const HASH: &str = "ab12";

    fn local(size: u64, mtime_ns: i64) -> LocalEntry {
        LocalEntry {
            name: "f".into(),
            stat: FileStat {
                size,
                mtime_ns,
                identity: Some(Identity {
                    ino: 1,
                    dev: 1,
                    ctime_ns: mtime_ns,
                }),
            },
        }
    }

    fn remote(etag: &str, size: u64, hash: Option<&str>) -> RemoteEntry {
        RemoteEntry {
            name: "f".into(),
            size,
            last_modified: Some(1),
            etag: etag.into(),
            vouched_sha256: hash.map(str::to_string),
        }
    }

    fn record(etag: &str) -> IndexRecord {
        IndexRecord {
            etag: etag.into(),
            sha256: HASH.into(),
            stat: local(10, 100).stat,
        }
    }

    #[test]
    fn an_upload_skips_only_what_the_index_vouches_for() {
        use SendReason::*;
        let (f, r, rec) = (local(10, 100), remote("e1", 10, None), record("e1"));
        let up = |l, r, rec, sum| upload_check(l, r, rec, sum);
        assert_eq!(up(&f, Some(&r), Some(&rec), false), UploadCheck::Unchanged);
        assert_eq!(up(&f, None, Some(&rec), false), UploadCheck::Send(New));
        assert_eq!(up(&f, Some(&r), None, false), UploadCheck::Send(NotIndexed));
        assert_eq!(
            up(&f, Some(&r), Some(&rec), true),
            UploadCheck::Send(Checksum)
        );
        let touched = local(10, 101);
        let check = up(&touched, Some(&r), Some(&rec), false);
        assert_eq!(check, UploadCheck::Send(ChangedLocally));
        let replaced = remote("e2", 10, None);
        let check = up(&f, Some(&replaced), Some(&rec), false);
        assert_eq!(check, UploadCheck::Send(ChangedRemotely));
        let resized = remote("e1", 11, None);
        let check = up(&f, Some(&resized), Some(&rec), false);
        assert_eq!(check, UploadCheck::Send(ChangedRemotely));
        let same_bytes = remote("e2", 10, Some("AB12"));
        assert_eq!(
            up(&f, Some(&same_bytes), Some(&rec), false),
            UploadCheck::Adopt
        );
        let other_bytes = remote("e2", 10, Some("cd34"));
        let check = up(&f, Some(&other_bytes), Some(&rec), false);
        assert_eq!(check, UploadCheck::Send(ChangedRemotely));
    }

    #[test]
    fn a_download_skips_a_file_whose_stat_matches_the_blobs_recorded_etag() {
        let (f, r, rec) = (local(10, 100), remote("e1", 10, None), record("e1"));
        let down = |r, l, rec, sum, over| download_check(r, l, rec, sum, over);
        assert_eq!(
            down(&r, Some(&f), Some(&rec), false, false),
            DownloadCheck::Unchanged
        );
        assert_eq!(
            down(&r, None, Some(&rec), false, false),
            DownloadCheck::Fetch(FetchReason::New)
        );
        let newer = remote("e2", 10, None);
        assert_eq!(
            down(&newer, Some(&f), Some(&rec), false, false),
            DownloadCheck::Fetch(FetchReason::ChangedRemotely)
        );
        let same_bytes = remote("e2", 10, Some(HASH));
        assert_eq!(
            down(&same_bytes, Some(&f), Some(&rec), false, false),
            DownloadCheck::Adopt
        );
        assert_eq!(
            down(&r, Some(&f), None, false, false),
            DownloadCheck::Compare
        );
        assert_eq!(
            down(&r, Some(&f), Some(&rec), true, false),
            DownloadCheck::Compare
        );
    }

    #[test]
    fn a_local_file_changed_since_it_was_placed_is_a_conflict_unless_overwrite() {
        let (touched, rec) = (local(10, 101), record("e1"));
        let down = |r, over| download_check(r, Some(&touched), Some(&rec), false, over);
        let same = remote("e1", 10, None);
        let newer = remote("e2", 10, None);
        assert_eq!(
            down(&same, false),
            DownloadCheck::Conflict(ConflictReason::ChangedLocally)
        );
        assert_eq!(
            down(&newer, false),
            DownloadCheck::Conflict(ConflictReason::ChangedOnBothSides)
        );
        for r in [&same, &newer] {
            assert_eq!(down(r, true), DownloadCheck::Fetch(FetchReason::Overwrite));
        }
    }
}
