//! Reading a block's bytes from the source: bounded by the idle timeout and
//! the block's fill deadline, each chunk passed to the test hooks, hashed and
//! counted as it arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::StageError;
use super::digest::Digests;

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
pub type Pace = Arc<dyn Fn(u64, usize) -> Duration + Send + Sync>;

#[derive(Default)]
pub(super) struct Intake {
    pub(super) limits: StageLimits,
    pub(super) mangle: Option<Mangle>,
    pub(super) pace: Option<Pace>,
    /// Every byte read is added here as it is read (the relay's metric).
    pub(super) received_bytes: Option<Arc<AtomicU64>>,
}

impl Intake {
    /// Reads the `len` bytes of one block into `buf` (at most 1 MiB a read),
    /// hashing each read into `digests` and moving `offset` on. `size` is the
    /// file's, for the error of a stream that ends early.
    pub(super) async fn fill<R: AsyncRead + Unpin>(
        &self,
        src: &mut R,
        buf: &mut BytesMut,
        len: u64,
        size: u64,
        offset: &mut u64,
        digests: &mut Digests,
    ) -> Result<(), StageError> {
        let filled_by = self
            .limits
            .fill_deadline(len)
            .map(|d| (tokio::time::Instant::now() + d, d));
        while (buf.len() as u64) < len {
            let before = buf.len();
            let want = (len as usize - before).min(1 << 20);
            let mut limited = (&mut *src).take(want as u64);
            let n = self
                .read_within(limited.read_buf(buf), len, filled_by)
                .await?;
            if n == 0 {
                return Err(StageError::Truncated {
                    expected: size,
                    got: *offset,
                });
            }
            if let Some(p) = &self.pace {
                let wait = p(*offset, n);
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            if let Some(m) = &self.mangle {
                m(*offset, &mut buf[before..]);
            }
            digests.update(&buf[before..]);
            *offset += n as u64;
            if let Some(c) = &self.received_bytes {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        Ok(())
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
}
