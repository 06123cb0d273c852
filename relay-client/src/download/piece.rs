//! A piece of a blob's bytes as every way of reading them hands it on (a
//! relay's sections, compressed or not, or storage's ranges), and the
//! failure of a lost connection.

use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// The largest piece of a section read from QUIC at once (no copy: quinn's own
/// buffer), so a file's memory is this, not its size.
pub(super) const READ_CHUNK: usize = 1 << 20;

/// The next piece of a file's bytes.
pub(super) enum Next {
    Bytes(bytes::Bytes),
    /// Every byte came; the ranges the relay (or this client) checked.
    End {
        ranges_checked: u64,
    },
    Refused(relay_proto::protocol::Failure),
}

pub(super) fn lost(e: impl std::fmt::Display) -> FileError {
    FileError::new(
        ErrorCode::Connection,
        format!("connection to relay lost: {e}"),
        true,
    )
}
