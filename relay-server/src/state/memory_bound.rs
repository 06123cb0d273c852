//! The most memory a configuration lets the relay use, whatever its peers do
//! (docs/SECURITY.md, "Memory"): what `--memory-limit` is checked against and
//! what the start-up log says.

use crate::connection;
use crate::state::Config;

impl Config {
    /// The most memory this configuration lets the relay use, whatever its peers
    /// do (docs/SECURITY.md, "Memory").
    pub fn memory_bound(&self) -> MemoryBound {
        // Connections borrow streams beyond their base from a pool sized so that
        // all of them together hold no more than this many each (`stream_credit`).
        let authenticated_state = per_connection_state(connection::stream_credit::STREAMS_IN_BOUND);
        let pending_state = per_connection_state(
            self.listen
                .admission
                .streams_before_auth
                .clamp(1, connection::stream_credit::BASE_STREAMS),
        );
        MemoryBound {
            base: BASE_MEMORY,
            budget: self.limits.budget.total_bytes(),
            authenticated: self.listen.max_connections.max(1) as u64
                * (self.listen.windows.connection_window + authenticated_state),
            sending: self.listen.max_connections.max(1) as u64 * self.send_window(),
            pending: self.listen.admission.max_pending.max(1) as u64
                * (self.listen.admission.window_before_auth + pending_state + INCOMING_BUFFER),
            list_page: self
                .storage
                .download
                .list_page_size(self.limits.token_share_bytes())
                .bytes(),
        }
    }

    /// Bytes one connection may have sent and not yet had acknowledged.
    fn send_window(&self) -> u64 {
        self.listen
            .windows
            .send_window
            .unwrap_or(self.listen.windows.connection_window)
    }
}

/// Code, runtime, TLS state, logging and the health endpoint, with headroom
/// for allocator slack well above what an idle relay holds.
pub const BASE_MEMORY: u64 = 64 << 20;
/// Per connection beyond its receive window and its streams: quinn's
/// connection state, send buffers of control frames.
pub const PER_CONNECTION_OVERHEAD: u64 = 1 << 20;
/// Per open stream: its parsed Offer (within the Offer rules: a name of 1,024
/// characters, 8 KiB of metadata, a 256-byte content type), its task and
/// quinn's stream state.
pub const PER_STREAM_STATE: u64 = 24 << 10;

/// What one connection with at most `streams` open streams may hold beyond
/// its receive window: its state, its half-read control frames (one per turn,
/// `frame_turns`) and its streams' state.
pub fn per_connection_state(streams: u64) -> u64 {
    let turns = (connection::frame_turns::FRAME_READS_PER_CONNECTION as u64).min(streams);
    PER_CONNECTION_OVERHEAD
        + turns * relay_proto::limits::MAX_FRAME_LEN as u64
        + streams * PER_STREAM_STATE
}
/// What quinn may buffer for a connection attempt before it is accepted.
pub const INCOMING_BUFFER: u64 = 64 << 10;

/// The parts of the relay's memory bound.
#[derive(Debug, Clone, Copy)]
pub struct MemoryBound {
    pub base: u64,
    pub budget: u64,
    pub authenticated: u64,
    /// Downloads: what each connection may have written and not yet had
    /// acknowledged (quinn's send buffer, outside the block budget).
    pub sending: u64,
    pub pending: u64,
    /// What one listing page takes from the block budget while it is held
    /// (inside `budget`, not a term of its own).
    pub list_page: u64,
}

impl MemoryBound {
    pub fn total(&self) -> u64 {
        self.base + self.budget + self.authenticated + self.sending + self.pending
    }
}

impl std::fmt::Display for MemoryBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use relay_proto::size::format_size as s;
        write!(
            f,
            "base {} + block budget {} (blocks, download ranges, listing pages of {} each) + authenticated connections {} + their send buffers {} + pending connections {}",
            s(self.base),
            s(self.budget),
            s(self.list_page),
            s(self.authenticated),
            s(self.sending),
            s(self.pending)
        )
    }
}
