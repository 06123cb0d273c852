//! A listed blob's report line from how it ended: the one place the
//! per-blob code (`blob`; `sources` for a duplicate and a listing that
//! failed) turns an outcome into the `FileReport` the run prints, or into
//! the refusal that stops the run instead.

use relay_proto::protocol::Check;
use relay_proto::session::download::Local;

use super::fetch::Done;
use crate::transfer::file::blank;
use crate::transfer::overwrite::OverwriteMode;
use crate::transfer::refusal::{Refusal, fatal};
use crate::transfer::send::Options;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::{FileError, FileReport, Status};

/// How one listed blob ended.
pub enum Ended {
    /// Its name cannot be a local file's name.
    BadName(FileError),
    /// `--dry-run`: what is on disk at its name, compared under `overwrite`.
    Planned {
        here: Local,
        overwrite: OverwriteMode,
    },
    /// Downloaded or skipped, after this many attempts.
    Done(Done, u32),
    /// Failed for good after this many attempts.
    Failed(FileError, u32),
}

/// The report of the blob `shown` (`size` bytes listed) of `container`,
/// at `path`, that ended so; none for a failure every other file would get
/// too (`refusal::fatal`, under the run's `opts`): that stops the run.
pub fn line(
    path: &str,
    container: &str,
    shown: &str,
    size: u64,
    ended: Ended,
    opts: &Options,
) -> Result<FileReport, Refusal> {
    let status = match &ended {
        Ended::Planned { .. } => Status::Planned,
        Ended::Done(..) => Status::Downloaded,
        Ended::BadName(_) | Ended::Failed(..) => Status::Failed,
    };
    let r = blank(path, container, shown, status);
    Ok(match ended {
        Ended::BadName(e) => r.failed_with(e),
        Ended::Planned { here, overwrite } => FileReport {
            bytes: size,
            reason: Some(planned(here, size, overwrite)),
            ..r
        },
        Ended::Done(done, attempts) => filled(
            FileReport {
                attempts,
                bytes: size,
                ..r
            },
            done,
        ),
        Ended::Failed(e, attempts) => match fatal(&e, opts) {
            Some(refusal) => return Err(refusal),
            None => FileReport {
                attempts,
                ..r.failed_with(e)
            },
        },
    })
}

/// The report of the blob `shown` of `container` left out because another
/// source of the run downloads to the same local file (`why`).
pub fn duplicate(container: &str, shown: &str, why: String) -> FileReport {
    let path = format!("{container}/{shown}");
    let e = FileError::new(ErrorCode::Duplicate, why, false);
    blank(&path, container, shown, Status::Failed).failed_with(e)
}

/// `--dry-run`: what would happen, from what is on disk (nothing is asked of
/// the relay per file, nothing written).
fn planned(here: Local, size: u64, overwrite: OverwriteMode) -> String {
    match here {
        Local::Absent => format!("would download {size} bytes"),
        Local::File { .. } => format!(
            "a local file exists: would compare it with the blob (--overwrite={overwrite:?})"
        ),
        _ => "would refuse (something other than a file is at its name)".into(),
    }
}

/// A downloaded (or skipped) file's report from how it ended.
fn filled(mut r: FileReport, done: Done) -> FileReport {
    match done {
        Done::Placed {
            size,
            sha256,
            etag,
            check,
            resumed,
            received,
            md5,
            wire,
            ..
        } => {
            r.bytes = size;
            r.sha256 = Some(sha256);
            r.etag = Some(etag);
            r.check = Some(check_name(check));
            r.content_md5 = (check == Check::ContentMd5).then_some(md5);
            r.bytes_resumed = resumed;
            r.bytes_sent = received;
            r.wire_bytes = wire;
        }
        Done::Skipped {
            reason,
            etag,
            compared,
        } => {
            r.status = Status::Skipped;
            r.reason = Some(reason);
            r.etag = Some(etag);
            r.compared = Some(compared.label());
        }
    }
    r
}

fn check_name(c: Check) -> &'static str {
    match c {
        Check::Sealed => "sealed",
        Check::ContentMd5 => "content_md5",
        Check::Ranges => "ranges",
    }
}
