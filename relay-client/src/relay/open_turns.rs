//! Streams are opened one file at a time on each connection.
//!
//! quinn wakes every task waiting in `Connection::open_bi` whenever the relay
//! grants more streams (`Notify::notify_waiters` in its connection driver). With
//! thousands of files in flight (`--parallel`), and the relay granting streams
//! a few at a time as earlier files finish, each grant woke every waiting file:
//! each was polled, found no stream and slept again, a cost per file that grew
//! with the number waiting (docs/PERFORMANCE.md, "CPU per small file"). Behind
//! a first-come-first-served lock only the first file in line waits inside
//! quinn; the others are woken one at a time, in the order they asked.

use quinn::{Connection, ConnectionError, RecvStream, SendStream};

/// The turns to open a stream on one connection.
#[derive(Default)]
pub struct OpenTurns(tokio::sync::Mutex<()>);

impl OpenTurns {
    /// `conn.open_bi()`, once every file that asked before has its stream.
    pub async fn open_bi(
        &self,
        conn: &Connection,
    ) -> Result<(SendStream, RecvStream), ConnectionError> {
        let _turn = self.0.lock().await;
        conn.open_bi().await
    }
}
