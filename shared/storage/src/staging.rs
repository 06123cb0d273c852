//! Cuts an ordered byte stream into the planned blocks, hashes every byte with
//! SHA-256, and stages blocks with bounded concurrency under a shared memory Budget.
//! Used by the relay (bytes from a QUIC stream) and by the client's direct mode
//! (bytes from the file), so both publish by the same rules.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::blob::BlobError;
use crate::store::BlobStore;
use relay_proto::block_id::{BLOCK_ID_LEN, BlockId, BlockState, IdSigner};
use relay_proto::checkpoint::Checkpoint;
use relay_proto::md5_state::Md5State;
use relay_proto::plan::BlockPlan;
use relay_proto::resume::{MD5_MARKER_LEN, ResumePoint};
use relay_proto::size::format_size;

/// Budget permits are counted in KiB so a `u32` acquire covers a 4000 MiB block
/// while the total may exceed 4 GiB.
const UNIT: u64 = 1024;

/// The one memory budget for block buffers, shared by every transfer of a process.
#[derive(Clone, Debug)]
pub struct Budget {
    sem: Arc<Semaphore>,
    total_bytes: u64,
    /// Blocks waiting for memory right now (a gauge in /metrics).
    waiting: Arc<AtomicU64>,
}

impl Budget {
    pub fn new(total_bytes: u64) -> Self {
        let units = (total_bytes / UNIT).max(1) as usize;
        Self {
            sem: Arc::new(Semaphore::new(units)),
            total_bytes,
            waiting: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Blocks waiting for memory right now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    pub fn in_use_bytes(&self) -> u64 {
        let free = self.sem.available_permits() as u64 * UNIT;
        self.total_bytes.saturating_sub(free)
    }

    /// No handle but this one and no memory taken (every permit keeps the
    /// semaphore alive): nothing uses this budget, nor can without this handle.
    pub fn is_unused(&self) -> bool {
        Arc::strong_count(&self.sem) == 1
    }

    /// Whether one block of `bytes` can ever fit.
    pub fn fits(&self, bytes: u64) -> bool {
        bytes.div_ceil(UNIT) <= self.total_bytes / UNIT
    }

    /// Memory outside a block (a decoder's), held until the permit drops.
    pub async fn take(&self, bytes: u64) -> Result<OwnedSemaphorePermit, StageError> {
        self.acquire(bytes).await
    }

    async fn acquire(&self, bytes: u64) -> Result<OwnedSemaphorePermit, StageError> {
        let units = u32::try_from(bytes.div_ceil(UNIT).max(1))
            .map_err(|_| StageError::BudgetTooSmall(bytes))?;
        if !self.fits(bytes) {
            return Err(StageError::BudgetTooSmall(bytes));
        }
        struct Waiting<'a>(&'a AtomicU64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        self.sem
            .clone()
            .acquire_many_owned(units)
            .await
            .map_err(|_| StageError::BudgetTooSmall(bytes))
    }
}

/// Limits that keep one slow or hostile peer from holding memory others need.
#[derive(Debug, Clone, Copy, Default)]
pub struct StageLimits {
    /// Give up when the source sends nothing for this long.
    pub idle: Option<Duration>,
    /// Give up (as retryable `Busy`) when a block's memory is not granted within this.
    pub budget_wait: Option<Duration>,
    /// A block must fill at least this fast once its memory is granted (plus
    /// `fill_grace`); a peer trickling bytes into a held buffer is cut.
    pub min_fill_bytes_per_s: Option<u64>,
    pub fill_grace: Duration,
}

impl StageLimits {
    fn fill_deadline(&self, len: u64) -> Option<Duration> {
        let rate = self.min_fill_bytes_per_s?.max(1);
        Some(self.fill_grace + Duration::from_secs(len.div_ceil(rate)))
    }
}

/// Test-only fault hook: sees each chunk (with its file offset) before it is hashed.
pub type Mangle = Arc<dyn Fn(u64, &mut [u8]) + Send + Sync>;

/// Test-only pacing hook: sees each received chunk's file offset and length and
/// returns how long to wait before taking it, so fault tests can hold a transfer
/// at a chosen point (a slow relay) and kill a process there.
pub type Pace = Arc<dyn Fn(u64, usize) -> std::time::Duration + Send + Sync>;

/// Told the length of each block storage accepted, as it lands (a transfer's
/// own progress: the client's bar counts what is staged, not what is queued).
pub type OnStaged = Arc<dyn Fn(u64) + Send + Sync>;

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
    writer: Arc<dyn BlobStore>,
    plan: BlockPlan,
    signer: IdSigner,
    budget: Budget,
    /// The owner's (token's) share of the budget, taken before the global one.
    share: Option<Budget>,
    max_inflight: usize,
    hasher: Sha256,
    /// The hash state before the block being filled: its ID continues it.
    follows: Checkpoint,
    /// The whole file's MD5 so far (`--put-md5`); each staged block is then
    /// followed by a marker carrying its state, for a resume.
    md5: Option<md5::Md5>,
    offset: u64,
    next_index: u64,
    ids: Vec<[u8; BLOCK_ID_LEN]>,
    inflight: JoinSet<Result<(), BlobError>>,
    bytes_resumed: u64,
    mangle: Option<Mangle>,
    pace: Option<Pace>,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
    limits: StageLimits,
    staged_bytes: Option<Arc<AtomicU64>>,
    on_staged: Option<OnStaged>,
    received_bytes: Option<Arc<AtomicU64>>,
    /// Set for files of at most one block: their bytes are kept, not staged.
    single: Option<SingleBlob>,
}

/// The bytes of a one-block file and the memory they hold.
pub struct SingleBlob {
    pub data: Bytes,
    _permit: Option<BlockPermit>,
}

impl std::fmt::Debug for SingleBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SingleBlob({} bytes)", self.data.len())
    }
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
        let hasher = start
            .checkpoint
            .restore()
            .ok_or(StageError::UnusableCheckpoint)?;
        if !budget.fits(plan.block_size.min(plan.size.max(1))) {
            return Err(StageError::BudgetTooSmall(plan.block_size));
        }
        Ok(Self {
            writer,
            plan,
            signer,
            budget,
            share: None,
            max_inflight: max_inflight.max(1),
            hasher,
            follows: start.checkpoint,
            md5: None,
            offset: start.offset,
            next_index: u64::from(start.blocks),
            bytes_resumed: start.offset,
            ids: start.ids,
            inflight: JoinSet::new(),
            mangle: None,
            pace: None,
            stop: None,
            limits: StageLimits::default(),
            staged_bytes: None,
            on_staged: None,
            received_bytes: None,
            single: None,
        })
    }

    /// Keeps the whole file's MD5 from `state` (the resume point's, or the
    /// start), for a Content-MD5 on the committed blob.
    pub fn with_whole_md5(mut self, state: Md5State) -> Result<Self, StageError> {
        if state.offset != self.offset {
            return Err(StageError::Md5StateOffset {
                state: state.offset,
                resume: self.offset,
            });
        }
        let hasher = state.restore().ok_or(StageError::UnusableMd5State)?;
        self.md5 = Some(hasher);
        Ok(self)
    }

    pub fn with_mangle(mut self, mangle: Option<Mangle>) -> Self {
        self.mangle = mangle;
        self
    }

    pub fn with_pace(mut self, pace: Option<Pace>) -> Self {
        self.pace = pace;
        self
    }

    /// Stop before the next block once `stop` turns true (graceful shutdown).
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Bounds on how long a peer may hold (or wait for) block memory.
    pub fn with_limits(mut self, limits: StageLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Takes each block's memory from `share` (the owner's part) as well as from
    /// the global budget, so one token cannot hold all of it.
    pub fn with_share(mut self, share: Budget) -> Self {
        self.share = Some(share);
        self
    }

    /// Memory for one block: the owner's share first, then the global budget,
    /// within the configured wait.
    async fn acquire(&self, len: u64) -> Result<BlockPermit, StageError> {
        let take = async {
            let share = match &self.share {
                Some(s) => Some(s.acquire(len).await?),
                None => None,
            };
            let global = self.budget.acquire(len).await?;
            Ok::<_, StageError>(BlockPermit {
                _share: share,
                _global: global,
            })
        };
        match self.limits.budget_wait {
            Some(wait) => tokio::time::timeout(wait, take)
                .await
                .map_err(|_| StageError::Busy(wait.as_secs()))?,
            None => take.await,
        }
    }

    /// Adds the length of every block Azure accepted to `counter` as it lands
    /// (the relay's bytes-staged metric, live while the file is still arriving).
    pub fn with_staged_bytes(mut self, counter: Arc<AtomicU64>) -> Self {
        self.staged_bytes = Some(counter);
        self
    }

    /// Calls `f` with the length of every block storage accepted.
    pub fn with_on_staged(mut self, f: OnStaged) -> Self {
        self.on_staged = Some(f);
        self
    }

    /// Adds every byte read from the source to `counter` as it is read (the
    /// relay's bytes-received metric, live while the file arrives).
    pub fn with_received_bytes(mut self, counter: Arc<AtomicU64>) -> Self {
        self.received_bytes = Some(counter);
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
            let permit = self.acquire(len).await?;
            let mut buf = BytesMut::with_capacity(len as usize);
            let filled_by = self
                .limits
                .fill_deadline(len)
                .map(|d| (tokio::time::Instant::now() + d, d));
            while (buf.len() as u64) < len {
                let before = buf.len();
                let want = (len as usize - before).min(1 << 20);
                let mut limited = (&mut *src).take(want as u64);
                let n = self
                    .read_within(limited.read_buf(&mut buf), len, filled_by)
                    .await?;
                if n == 0 {
                    return Err(StageError::Truncated {
                        expected: self.plan.size,
                        got: self.offset,
                    });
                }
                if let Some(p) = &self.pace {
                    let wait = p(self.offset, n);
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                }
                if let Some(m) = &self.mangle {
                    m(self.offset, &mut buf[before..]);
                }
                self.hasher.update(&buf[before..]);
                if let Some(md5) = &mut self.md5 {
                    md5::Digest::update(md5, &buf[before..]);
                }
                self.offset += n as u64;
                if let Some(c) = &self.received_bytes {
                    c.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            let id = self.block_id(index)?;
            let marker = self.md5_marker(index)?;
            self.next_index += 1;
            if let Some(after) = Checkpoint::of(&self.hasher) {
                self.follows = after;
            }
            if self.plan.block_count() == 1 {
                // Published later with one Put Blob, after verification.
                self.single = Some(SingleBlob {
                    data: buf.freeze(),
                    _permit: Some(permit),
                });
                continue;
            }
            self.ids.push(id);
            while self.inflight.len() >= self.max_inflight {
                self.join_one().await?;
            }
            let writer = self.writer.clone();
            let data = buf.freeze();
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
        }
        Ok(())
    }

    /// The ID of block `index`, all of whose bytes have been hashed. It binds the
    /// block's bytes: the hash state after it, or for the file's last block the
    /// whole file's SHA-256 (`block_id`).
    fn block_id(&self, index: u64) -> Result<[u8; BLOCK_ID_LEN], StageError> {
        let last = index + 1 == self.plan.block_count();
        let state = match Checkpoint::of(&self.hasher) {
            Some(cp) if !last => BlockState::After(cp),
            _ => BlockState::Final {
                sha256: self.hasher.clone().finalize().into(),
                size: self.plan.size,
            },
        };
        Ok(self.signer.encode(&BlockId {
            index: u32::try_from(index).map_err(|_| StageError::BlockIndex(index))?,
            follows: self.follows,
            state,
        }))
    }

    /// The MD5 marker to stage after block `index` (all of whose bytes have been
    /// hashed), when the whole file's MD5 is kept and a later resume could use
    /// it: not after the last block, which is never resumed from.
    fn md5_marker(&self, index: u64) -> Result<Option<[u8; BLOCK_ID_LEN]>, StageError> {
        let (Some(md5), Some(after)) = (&self.md5, Checkpoint::of(&self.hasher)) else {
            return Ok(None);
        };
        if index + 1 >= self.plan.block_count() {
            return Ok(None);
        }
        let Some(state) = Md5State::of(md5) else {
            return Ok(None);
        };
        Ok(Some(self.signer.encode(&BlockId {
            index: u32::try_from(index).map_err(|_| StageError::BlockIndex(index))?,
            follows: after,
            state: BlockState::Md5(state),
        })))
    }

    /// One read, bounded by the idle timeout and the block's fill deadline.
    async fn read_within(
        &self,
        read: impl Future<Output = std::io::Result<usize>>,
        len: u64,
        filled_by: Option<(tokio::time::Instant, Duration)>,
    ) -> Result<usize, StageError> {
        let idle = self.limits.idle;
        let now = tokio::time::Instant::now();
        let idle_at = idle.map(|d| now + d);
        let until = match (idle_at, filled_by.map(|(at, _)| at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(until) = until else {
            return Ok(read.await?);
        };
        match tokio::time::timeout_at(until, read).await {
            Ok(n) => Ok(n?),
            Err(_) => match filled_by {
                Some((at, d)) if idle_at.is_none_or(|i| at <= i) => Err(StageError::TooSlow {
                    len,
                    secs: d.as_secs(),
                }),
                _ => Err(StageError::Stalled(idle.map(|d| d.as_secs()).unwrap_or(0))),
            },
        }
    }

    async fn join_one(&mut self) -> Result<(), StageError> {
        match self.inflight.join_next().await {
            Some(done) => flatten(done),
            None => Ok(()),
        }
    }

    /// Lets the blocks in flight finish staging (so a later resume reuses them) and
    /// drops the rest; used when a transfer ends without a commit.
    pub async fn drain(mut self) {
        while !self.inflight.is_empty() {
            let _ = self.join_one().await;
        }
    }

    /// Waits for every block to be staged; returns the block list and the digest.
    pub async fn finish(mut self) -> Result<Staged, StageError> {
        while !self.inflight.is_empty() {
            self.join_one().await?;
        }
        let bytes_received = self.offset - self.bytes_resumed;
        let single = match (self.single, self.plan.block_count()) {
            (Some(s), _) => Some(s),
            // An empty file: an empty Put Blob.
            (None, 0) => Some(SingleBlob {
                data: Bytes::new(),
                _permit: None,
            }),
            (None, _) => None,
        };
        let md5 = self.md5.map(|md5| md5::Digest::finalize(md5).into());
        Ok(Staged {
            ids: self.ids,
            single,
            md5,
            sha256: self.hasher.finalize().into(),
            bytes_resumed: self.bytes_resumed,
            bytes_received,
        })
    }
}

/// A block's memory: the owner's share and the global budget, returned together.
struct BlockPermit {
    _share: Option<OwnedSemaphorePermit>,
    _global: OwnedSemaphorePermit,
}

fn flatten(done: Result<Result<(), BlobError>, tokio::task::JoinError>) -> Result<(), StageError> {
    match done {
        Ok(r) => r.map_err(StageError::from),
        Err(e) => Err(StageError::Task(e)),
    }
}
