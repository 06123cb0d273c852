//! The connection a stream belongs to, as its transfer sees it: the
//! authentication gate, the refusal that closes it, its turns to read control
//! frames, and how a control frame is written without waiting forever on a
//! peer that does not read.

use std::sync::Arc;
use std::time::Duration;

use quinn::{RecvStream, SendStream};
use relay_proto::codec::FrameError;
use relay_proto::protocol::Message;
use relay_transport::frames::write_frame;

use crate::connection::admission::{AuthGate, Latch};
use crate::connection::frame_turns::FrameTurns;

/// A Plan, Reject, Receipt or Error that cannot be written within this time is
/// abandoned and the stream reset: a peer that grants the stream no credit
/// must not hold the transfer's task (and its connection's slot) while its
/// keep-alives hold the connection. These frames are small; only a peer that
/// reads nothing takes this long.
const CONTROL_WRITE: Duration = Duration::from_secs(10);

/// How long a connection refused before it authenticated waits for its Reject
/// to be acknowledged before the relay closes it (`Link::refused`).
const REFUSAL_DELIVERY: Duration = Duration::from_secs(2);

/// The connection a stream belongs to: its authentication gate, its turns to
/// read control frames, and the connection itself (for the test hook that
/// holds the Plan).
#[derive(Clone)]
pub struct Link {
    pub(crate) gate: Arc<AuthGate>,
    /// Opened when an Offer was refused for who sent it (token, grant) while
    /// no Offer of the connection had been valid: the connection is closed.
    refused: Arc<Latch>,
    frame_turns: FrameTurns,
    pub(crate) conn: quinn::Connection,
    /// Both ends announced compressed chunks (the handshake's ALPN).
    pub(crate) zstd: bool,
}

impl Link {
    pub fn new(gate: Arc<AuthGate>, conn: quinn::Connection) -> Self {
        let zstd = relay_transport::tls::agreed_zstd(&conn);
        Self {
            gate,
            refused: Arc::default(),
            frame_turns: FrameTurns::default(),
            conn,
            zstd,
        }
    }

    /// Opened once the connection is to be closed for a refused Offer
    /// (`server::serve_connection` closes it).
    pub fn refused(&self) -> Arc<Latch> {
        self.refused.clone()
    }

    /// A refusal for who the peer is, on a connection that has not
    /// authenticated: once the Reject is acknowledged (or `REFUSAL_DELIVERY`
    /// passed), the connection is to be closed. It holds a pending slot and
    /// would keep it until the auth deadline whatever its peer does; nothing it
    /// sends after this can make it worth one.
    pub(crate) async fn refuse_peer(&self, send: &mut SendStream) {
        if self.gate.is_open() {
            return;
        }
        let _ = tokio::time::timeout(REFUSAL_DELIVERY, send.stopped()).await;
        self.refused.open();
    }

    /// A valid first frame (Offer, Fetch or List): the connection may now
    /// have its full windows and a connection slot (`admission`).
    pub(crate) fn open_gate(&self) {
        self.gate.open();
    }

    /// One control frame, read in one of the connection's turns.
    pub(crate) async fn read_frame(&self, recv: &mut RecvStream) -> Result<Message, FrameError> {
        self.frame_turns.read_frame(recv).await
    }
}

/// One control frame, within `CONTROL_WRITE`; past it the stream is reset.
pub(crate) async fn write_control(send: &mut SendStream, msg: &Message) -> Result<(), FrameError> {
    match tokio::time::timeout(CONTROL_WRITE, write_frame(send, msg)).await {
        Ok(written) => written,
        Err(_) => {
            let _ = send.reset(relay_proto::protocol::app_error::PROTOCOL.into());
            Err(FrameError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the peer took no {} within {} s",
                    msg.name(),
                    CONTROL_WRITE.as_secs()
                ),
            )))
        }
    }
}
