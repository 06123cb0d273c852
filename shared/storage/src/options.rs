//! How the blob writer talks HTTP: timeouts, pool, retry schedule.

use std::time::Duration;

use crate::checksum::BlockChecksum;
use crate::retry::Backoff;
use crate::watch::Patience;

/// Settings for the HTTP side.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    pub backoff: Backoff,
    pub connect_timeout: Duration,
    /// When a request is abandoned (and retried): after no progress of its body
    /// for `patience.stall`, or no answer for `patience.response` once the body
    /// is all sent and can have left the socket; never for being slow while it
    /// moves (`watch.rs`).
    pub patience: Patience,
    pub max_idle_per_host: usize,
    /// Storage requests in flight at once, across every writer of a `Storage`.
    /// Without a bound a loaded relay opens hundreds of connections in a burst;
    /// a server whose accept queue overflows (Azurite/Node: 511) then drops the
    /// handshakes' last ACKs, and those requests hang until they are abandoned
    /// as unanswered (docs/LOAD.md). Keep `max_idle_per_host` at least this, so connections are
    /// reused rather than reopened.
    pub max_concurrent_requests: usize,
    /// Idle pooled connections are closed after this; below the server's own
    /// keep-alive timeout (Azurite/Node: 5 s), so a request is never sent on a
    /// connection the server is closing (that race shows as a transport error
    /// without a status, and the request is lost).
    pub pool_idle_timeout: Duration,
    /// The transactional checksum sent with each Put Block (`checksum.rs`).
    pub block_checksum: BlockChecksum,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            connect_timeout: Duration::from_secs(10),
            patience: Patience::default(),
            max_idle_per_host: 128,
            max_concurrent_requests: 128,
            pool_idle_timeout: Duration::from_secs(4),
            block_checksum: BlockChecksum::Md5,
        }
    }
}
