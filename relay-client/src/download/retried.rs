//! One blob's download with its retries (`relay::retry`): each attempt
//! starts from what is on disk (a partial file resumes); an outage waited
//! out within `--patience` is not an attempt.

use indicatif::ProgressBar;
use quinn::Connection;
use relay_proto::logsafe::safe;
use relay_proto::protocol::Listed;
use relay_proto::session::download::Blob;

use super::attempt;
use super::direct::DirectReads;
use super::fetch::{Done, Target, Way};
use super::job::Job;
use super::safe_fs::{Folder, FsError};
use crate::relay::link::RelayLink;
use crate::relay::retry::{Tries, Work};
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// `listed` into `parent` (the folder of its local name `comps`, made for
/// it; none without a destination folder): how it ended, and the attempts.
pub async fn download(
    job: &Job,
    parent: Option<Result<Folder, FsError>>,
    comps: &[&str],
    listed: &Listed,
    bar: &ProgressBar,
) -> Result<(Done, u32), (FileError, u32)> {
    let parent = match parent {
        None => {
            let e = FileError::new(ErrorCode::Internal, "no destination folder", false);
            return Err((e, 0));
        }
        Some(Err(e)) => return Err((FileError::new(e.code(), e.to_string(), false), 0)),
        Some(Ok(parent)) => parent,
    };
    let target = Target {
        token: &job.opts.token,
        container: &job.opts.container,
        blob: &listed.name,
        listed: Blob {
            size: listed.size,
            etag: listed.etag.clone(),
            last_modified: listed.last_modified,
        },
        folder: &parent,
        leaf: comps.last().copied().unwrap_or_default(),
        overwrite: job.overwrite,
        received: Default::default(),
        index: job.index.as_deref(),
        index_path: comps.join("/"),
        patience: job.patience,
        wire: Default::default(),
        folder_syncs: &job.folder_syncs,
    };
    let lane = job.relay().map(|links| links.assign(listed.size));
    let link = lane.as_ref().map(|l| l.link());
    let mut tries = Tries::new(link, job.attempts, safe(&listed.name).to_string());
    let mut work = BlobTry {
        target: &target,
        link,
        direct: job.direct.as_deref(),
        compress: job.opts.compress,
        bar,
    };
    match tries.drive(&mut work).await {
        Ok(done) => Ok((done, tries.attempts())),
        Err(e) => Err((e, tries.attempts())),
    }
}

/// One attempt at a blob, on the relay's connection or from storage.
struct BlobTry<'a> {
    target: &'a Target<'a>,
    link: Option<&'a RelayLink>,
    direct: Option<&'a DirectReads>,
    compress: crate::transfer::compress::Mode,
    bar: &'a ProgressBar,
}

impl Work for BlobTry<'_> {
    type Done = Done;

    async fn attempt(&mut self, conn: Option<&Connection>) -> Result<Done, FileError> {
        let way = match (conn, self.link, self.direct) {
            (Some(conn), Some(link), _) => Way::Relay {
                conn,
                turns: &link.open_turns,
                compress: self.compress,
            },
            (_, _, Some(d)) => Way::Direct(d),
            _ => return Err(FileError::new(ErrorCode::Internal, "no way to read", false)),
        };
        attempt::download(way, self.target, self.bar).await
    }
}
