//! How the blob writer talks HTTP: timeouts, pool, retry schedule.

use std::time::Duration;

use crate::checksum::BlockChecksum;
use crate::retry::Backoff;

/// Settings for the HTTP side.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    pub backoff: Backoff,
    pub connect_timeout: Duration,
    /// Longest quiet time on one request before it is abandoned (and retried).
    pub read_timeout: Duration,
    pub max_idle_per_host: usize,
    /// Storage requests in flight at once, across every writer of a `Storage`.
    /// Without a bound a loaded relay opens hundreds of connections in a burst;
    /// a server whose accept queue overflows (Azurite/Node: 511) then drops the
    /// handshakes' last ACKs, and those requests hang until the read timeout
    /// (docs/LOAD.md). Keep `max_idle_per_host` at least this, so connections are
    /// reused rather than reopened.
    pub max_concurrent_requests: usize,
    /// Idle pooled connections are closed after this; below the server's own
    /// keep-alive timeout (Azurite/Node: 5 s), so a request is never sent on a
    /// connection the server is closing (that race shows as a transport error
    /// without a status, and the request is lost).
    pub pool_idle_timeout: Duration,
    /// A whole request's deadline is `request_base + body / min_body_rate`: a
    /// stalled body upload, or a server that never answers, is abandoned and
    /// retried within seconds, while a large block on a slow path still fits.
    pub request_base: Duration,
    pub min_body_bytes_per_s: u64,
    /// The transactional checksum sent with each Put Block (`checksum.rs`).
    pub block_checksum: BlockChecksum,
}

impl WriterOptions {
    /// The deadline of one request carrying `body_bytes`.
    pub fn request_deadline(&self, body_bytes: u64) -> Duration {
        self.request_base
            + Duration::from_secs(body_bytes.div_ceil(self.min_body_bytes_per_s.max(1)))
    }
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(15),
            max_idle_per_host: 128,
            max_concurrent_requests: 128,
            pool_idle_timeout: Duration::from_secs(4),
            request_base: Duration::from_secs(15),
            min_body_bytes_per_s: 1 << 20,
            block_checksum: BlockChecksum::Md5,
        }
    }
}
