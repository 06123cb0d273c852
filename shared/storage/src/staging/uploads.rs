//! The blocks on their way to storage: at most `max_inflight` Put Blocks at
//! once, each holding its block's memory until storage accepted it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::task::JoinSet;

use super::StageError;
use super::budget::BlockPermit;
use crate::error::BlobError;
use crate::store::BlobStore;
use relay_proto::block_id::BLOCK_ID_LEN;
use relay_proto::resume::MD5_MARKER_LEN;

/// Told the length of each block storage accepted, as it lands (a transfer's
/// own progress: the client's bar counts what is staged, not what is queued).
pub type OnStaged = Arc<dyn Fn(u64) + Send + Sync>;

pub(super) struct Uploads {
    writer: Arc<dyn BlobStore>,
    max_inflight: usize,
    inflight: JoinSet<Result<(), BlobError>>,
    /// Every accepted block's length is added here (the relay's metric).
    pub(super) staged_bytes: Option<Arc<AtomicU64>>,
    pub(super) on_staged: Option<OnStaged>,
}

impl Uploads {
    pub(super) fn new(writer: Arc<dyn BlobStore>, max_inflight: usize) -> Self {
        Self {
            writer,
            max_inflight: max_inflight.max(1),
            inflight: JoinSet::new(),
            staged_bytes: None,
            on_staged: None,
        }
    }

    /// Stages `data` as block `id` (then its MD5 `marker`, if any) once fewer
    /// than `max_inflight` are in flight; `permit` is released when it lands.
    pub(super) async fn start(
        &mut self,
        id: [u8; BLOCK_ID_LEN],
        marker: Option<[u8; BLOCK_ID_LEN]>,
        data: Bytes,
        permit: BlockPermit,
    ) -> Result<(), StageError> {
        while self.inflight.len() >= self.max_inflight {
            self.join_one().await?;
        }
        let len = data.len() as u64;
        let writer = self.writer.clone();
        let staged_bytes = self.staged_bytes.clone();
        let on_staged = self.on_staged.clone();
        self.inflight.spawn(async move {
            let mut res = writer.stage_block(&id, data).await;
            // After its block: a marker alone is never a resume point.
            if let (Ok(()), Some(marker)) = (&res, marker) {
                res = writer
                    .stage_block(&marker, Bytes::from_static(&[0u8; MD5_MARKER_LEN as usize]))
                    .await;
            }
            drop(permit);
            if res.is_ok() {
                if let Some(c) = staged_bytes {
                    c.fetch_add(len, Ordering::Relaxed);
                }
                if let Some(f) = on_staged {
                    f(len);
                }
            }
            res
        });
        // Surface a failed block early rather than after the whole file.
        while let Some(done) = self.inflight.try_join_next() {
            flatten(done)?;
        }
        Ok(())
    }

    async fn join_one(&mut self) -> Result<(), StageError> {
        match self.inflight.join_next().await {
            Some(done) => flatten(done),
            None => Ok(()),
        }
    }

    /// Lets every block in flight land, failed ones included (a later resume
    /// reuses those that did).
    pub(super) async fn drain(&mut self) {
        while !self.inflight.is_empty() {
            let _ = self.join_one().await;
        }
    }

    /// Waits for every block in flight; the first failure ends the wait.
    pub(super) async fn finish(&mut self) -> Result<(), StageError> {
        while !self.inflight.is_empty() {
            self.join_one().await?;
        }
        Ok(())
    }
}

fn flatten(done: Result<Result<(), BlobError>, tokio::task::JoinError>) -> Result<(), StageError> {
    Ok(done??)
}
