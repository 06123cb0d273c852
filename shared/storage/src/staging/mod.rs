//! Cuts an ordered byte stream into the planned blocks, hashes every byte with
//! SHA-256, and stages blocks with bounded concurrency under a shared memory Budget.
//! Used by the relay (bytes from a QUIC stream) and by the client's direct mode
//! (bytes from the file), so both publish by the same rules.
//!
//! `Stager` runs the loop; each of its jobs is a module: block memory
//! (`budget`), reading a block (`intake`), the hashes (`digest`), block IDs
//! (`ids`), the Put Blocks in flight (`uploads`) and the one-block file
//! (`single`).

mod budget;
mod digest;
mod ids;
mod intake;
mod single;
mod uploads;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use bytes::BytesMut;
use tokio::io::AsyncRead;

use crate::blob::BlobError;
use crate::store::BlobStore;
use relay_proto::block_id::{BLOCK_ID_LEN, IdSigner};
use relay_proto::md5_state::Md5State;
use relay_proto::plan::BlockPlan;
use relay_proto::resume::ResumePoint;
use relay_proto::size::format_size;

pub use budget::Budget;
pub use intake::{Mangle, Pace, StageLimits};
pub use single::SingleBlob;
pub use uploads::OnStaged;

use budget::BlockMemory;
use digest::Digests;
use ids::BlockIds;
use intake::Intake;
use uploads::Uploads;

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("reading the source failed: {0}")]
    Source(#[from] std::io::Error),
    #[error("stream ended after {got} of {expected} bytes")]
    Truncated { expected: u64, got: u64 },
    #[error(transparent)]
    Storage(#[from] BlobError),
    #[error("a block of {} does not fit the memory budget", format_size(*.0))]
    BudgetTooSmall(u64),
    /// A staging task panicked or was cancelled.
    #[error("staging task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The resume point's hash checkpoint does not restore a hasher.
    #[error("unusable resume checkpoint")]
    UnusableCheckpoint,
    /// The whole file's MD5 state does not restore a hasher.
    #[error("unusable MD5 state")]
    UnusableMd5State,
    /// The MD5 state given for a resume is at another offset than the resume.
    #[error("MD5 state at {state} for a resume at {resume}")]
    Md5StateOffset { state: u64, resume: u64 },
    /// A block index beyond what a block ID holds.
    #[error("block index {0} does not fit a block ID")]
    BlockIndex(u64),
    /// The process is shutting down; staged blocks stay for a resume.
    #[error("stopped at a block boundary for shutdown")]
    Stopped,
    #[error("no bytes for {0} s")]
    Stalled(u64),
    /// The memory for the next block was not granted in time (others hold it).
    #[error("no memory for a block within {0} s")]
    Busy(u64),
    /// A block's bytes came slower than the configured floor while it held memory.
    #[error("a block of {} did not fill within {} s", format_size(*.len), .secs)]
    TooSlow { len: u64, secs: u64 },
}

/// What the stager produced: the full block list (or, for a file that fits in
/// one block, its bytes for a single Put Blob) and the SHA-256 of every byte.
#[derive(Debug)]
pub struct Staged {
    pub ids: Vec<[u8; BLOCK_ID_LEN]>,
    /// A file of at most one block: its bytes, still under their budget permit,
    /// published with one Put Blob after verification instead of being staged.
    pub single: Option<SingleBlob>,
    pub sha256: [u8; 32],
    /// MD5 of every byte, when kept (`with_whole_md5`); a Put Blob carries its
    /// body's MD5 whether kept or not.
    pub md5: Option<[u8; 16]>,
    pub bytes_resumed: u64,
    pub bytes_received: u64,
}

pub struct Stager {
    plan: BlockPlan,
    memory: BlockMemory,
    intake: Intake,
    digests: Digests,
    block_ids: BlockIds,
    uploads: Uploads,
    offset: u64,
    next_index: u64,
    ids: Vec<[u8; BLOCK_ID_LEN]>,
    bytes_resumed: u64,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// Set for files of at most one block: their bytes are kept, not staged.
    single: Option<SingleBlob>,
}

impl Stager {
    /// Starts at `start` (the resume point, or a fresh start when the client's prefix
    /// did not match the checkpoint).
    pub fn new(
        writer: Arc<dyn BlobStore>,
        plan: BlockPlan,
        signer: IdSigner,
        start: ResumePoint,
        budget: Budget,
        max_inflight: usize,
    ) -> Result<Self, StageError> {
        let digests = Digests::from(start.checkpoint)?;
        if !budget.fits(plan.block_size.min(plan.size.max(1))) {
            return Err(StageError::BudgetTooSmall(plan.block_size));
        }
        Ok(Self {
            plan,
            memory: BlockMemory {
                budget,
                share: None,
                wait: None,
            },
            intake: Intake::default(),
            digests,
            block_ids: BlockIds::new(signer, plan),
            uploads: Uploads::new(writer, max_inflight),
            offset: start.offset,
            next_index: u64::from(start.blocks),
            bytes_resumed: start.offset,
            ids: start.ids,
            stop: None,
            single: None,
        })
    }

    /// Keeps the whole file's MD5 from `state` (the resume point's, or the
    /// start), for a Content-MD5 on the committed blob; each staged block is
    /// then followed by a marker carrying its state, for a resume.
    pub fn with_whole_md5(mut self, state: Md5State) -> Result<Self, StageError> {
        if state.offset != self.offset {
            return Err(StageError::Md5StateOffset {
                state: state.offset,
                resume: self.offset,
            });
        }
        self.digests.keep_md5(state)?;
        Ok(self)
    }

    pub fn with_mangle(mut self, mangle: Option<Mangle>) -> Self {
        self.intake.mangle = mangle;
        self
    }

    pub fn with_pace(mut self, pace: Option<Pace>) -> Self {
        self.intake.pace = pace;
        self
    }

    /// Stop before the next block once `stop` turns true (graceful shutdown).
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Bounds on how long a peer may hold (or wait for) block memory.
    pub fn with_limits(mut self, limits: StageLimits) -> Self {
        self.memory.wait = limits.budget_wait;
        self.intake.limits = limits;
        self
    }

    /// Takes each block's memory from `share` (the owner's part) as well as from
    /// the global budget, so one token cannot hold all of it.
    pub fn with_share(mut self, share: Budget) -> Self {
        self.memory.share = Some(share);
        self
    }

    /// Adds the length of every block Azure accepted to `counter` as it lands
    /// (the relay's bytes-staged metric, live while the file is still arriving).
    pub fn with_staged_bytes(mut self, counter: Arc<AtomicU64>) -> Self {
        self.uploads.staged_bytes = Some(counter);
        self
    }

    /// Calls `f` with the length of every block storage accepted.
    pub fn with_on_staged(mut self, f: OnStaged) -> Self {
        self.uploads.on_staged = Some(f);
        self
    }

    /// Adds every byte read from the source to `counter` as it is read (the
    /// relay's bytes-received metric, live while the file arrives).
    pub fn with_received_bytes(mut self, counter: Arc<AtomicU64>) -> Self {
        self.intake.received_bytes = Some(counter);
        self
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads exactly the remaining bytes of the file from `src`, staging each block as
    /// it fills. Back-pressure: no byte is read before its block's budget is granted.
    pub async fn pump<R: AsyncRead + Unpin>(&mut self, src: &mut R) -> Result<(), StageError> {
        while self.next_index < self.plan.block_count() {
            if self.stop.as_ref().is_some_and(|s| *s.borrow()) {
                return Err(StageError::Stopped);
            }
            let index = self.next_index;
            let len = self.plan.block_len(index);
            let permit = self.memory.acquire(len).await?;
            let mut buf = BytesMut::with_capacity(len as usize);
            self.intake
                .fill(
                    src,
                    &mut buf,
                    len,
                    self.plan.size,
                    &mut self.offset,
                    &mut self.digests,
                )
                .await?;
            let id = self.block_ids.block_id(index, &self.digests)?;
            let marker = self.block_ids.md5_marker(index, &self.digests)?;
            self.next_index += 1;
            self.digests.end_block();
            if self.plan.block_count() == 1 {
                self.single = Some(SingleBlob::held(buf.freeze(), permit));
                continue;
            }
            self.ids.push(id);
            self.uploads.start(id, marker, buf.freeze(), permit).await?;
        }
        Ok(())
    }

    /// Lets the blocks in flight finish staging (so a later resume reuses them) and
    /// drops the rest; used when a transfer ends without a commit.
    pub async fn drain(mut self) {
        self.uploads.drain().await;
    }

    /// Waits for every block to be staged; returns the block list and the digest.
    pub async fn finish(mut self) -> Result<Staged, StageError> {
        self.uploads.finish().await?;
        let bytes_received = self.offset - self.bytes_resumed;
        let single = match (self.single, self.plan.block_count()) {
            (Some(s), _) => Some(s),
            (None, 0) => Some(SingleBlob::empty()),
            (None, _) => None,
        };
        let (sha256, md5) = self.digests.finish();
        Ok(Staged {
            ids: self.ids,
            single,
            md5,
            sha256,
            bytes_resumed: self.bytes_resumed,
            bytes_received,
        })
    }
}
