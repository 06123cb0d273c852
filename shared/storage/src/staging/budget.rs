//! Memory for block buffers: the process's one `Budget`, and a block's permit
//! taken from the owner's share first, then the global budget, within a wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::StageError;

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

    /// `take` if the memory is free now, without waiting (memory given back
    /// goes to those already waiting first, so this never gets ahead of them).
    pub fn try_take(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let units = u32::try_from(bytes.div_ceil(UNIT).max(1)).ok()?;
        self.sem.clone().try_acquire_many_owned(units).ok()
    }

    /// Gives back what `permit` (taken by `take`) holds beyond `bytes`: memory
    /// taken before an answer's size was known (a download's first range),
    /// kept only as long as the answer's bytes.
    pub fn keep_only(permit: &mut OwnedSemaphorePermit, bytes: u64) {
        let keep = usize::try_from(bytes.div_ceil(UNIT).max(1)).unwrap_or(usize::MAX);
        let beyond = permit.num_permits().saturating_sub(keep);
        if beyond > 0 {
            drop(permit.split(beyond));
        }
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

/// A block's memory: the owner's share and the global budget, returned together.
pub(super) struct BlockPermit {
    _share: Option<OwnedSemaphorePermit>,
    _global: OwnedSemaphorePermit,
}

/// Where a transfer's blocks take their memory from.
pub(super) struct BlockMemory {
    pub(super) budget: Budget,
    /// The owner's (token's) share of the budget, taken before the global one.
    pub(super) share: Option<Budget>,
    /// Give up (as retryable `Busy`) when a block's memory is not granted within this.
    pub(super) wait: Option<Duration>,
}

impl BlockMemory {
    /// Memory for one block: the owner's share first, then the global budget,
    /// within the configured wait.
    pub(super) async fn acquire(&self, len: u64) -> Result<BlockPermit, StageError> {
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
        match self.wait {
            Some(wait) => tokio::time::timeout(wait, take)
                .await
                .map_err(|_| StageError::Busy(wait.as_secs()))?,
            None => take.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_an_answer_did_not_need_is_given_back() {
        let b = Budget::new(8 * UNIT);
        let mut p = b.take(6 * UNIT).await.expect("take");
        Budget::keep_only(&mut p, UNIT + 1);
        assert_eq!(b.in_use_bytes(), 2 * UNIT);
        Budget::keep_only(&mut p, 0);
        assert_eq!(b.in_use_bytes(), UNIT);
        Budget::keep_only(&mut p, 5 * UNIT);
        assert_eq!(b.in_use_bytes(), UNIT, "never takes more");
        drop(p);
        assert_eq!(b.in_use_bytes(), 0);
    }
}
