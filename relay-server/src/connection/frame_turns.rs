//! Turns to read control frames on one connection. A frame's buffer is sized by
//! its header (up to `MAX_FRAME_LEN`) before its body arrives, so without turns
//! a peer that opens every stream it may and stalls inside a frame on each would
//! pin `MAX_STREAMS` such buffers. With them at most `FRAME_READS_PER_CONNECTION`
//! exist per connection; its other streams wait for a turn (and time out like
//! any late frame). Only that connection waits: turns are never shared.

use std::sync::Arc;

use relay_proto::codec::FrameError;
use relay_proto::protocol::Message;
use relay_transport::frames::read_frame;
use tokio::io::AsyncRead;
use tokio::sync::Semaphore;

/// Control frames one connection may have half read at once. A client's frames
/// arrive whole and hold a turn for microseconds.
pub const FRAME_READS_PER_CONNECTION: usize = 16;

#[derive(Clone)]
pub struct FrameTurns(Arc<Semaphore>);

impl Default for FrameTurns {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(FRAME_READS_PER_CONNECTION)))
    }
}

impl FrameTurns {
    /// Reads one frame in a turn.
    pub async fn read_frame<R: AsyncRead + Unpin>(&self, r: &mut R) -> Result<Message, FrameError> {
        let Ok(_turn) = self.0.acquire().await else {
            return Err(FrameError::Closed); // the semaphore is never closed
        };
        read_frame(r).await
    }

    /// Turns free now.
    pub fn free(&self) -> usize {
        self.0.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::codec::encode;
    use relay_proto::protocol::Start;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};
    use tokio::io::{AsyncWriteExt, DuplexStream, ReadBuf};

    /// A stream that counts the bytes its reader took.
    struct Counted(DuplexStream, Arc<AtomicUsize>);

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.0).poll_read(cx, buf);
            self.1
                .fetch_add(buf.filled().len() - before, Ordering::SeqCst);
            r
        }
    }

    #[tokio::test]
    async fn stalled_frames_hold_at_most_the_turns_and_others_wait() {
        let turns = FrameTurns::default();
        let n = FRAME_READS_PER_CONNECTION + 4;
        let frame = encode(&Message::Start(Start::plain(7))).expect("encode");
        let (mut writers, mut readers, mut taken) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let (mut w, r) = tokio::io::duplex(1 << 16);
            // Every stream stalls inside its frame: the header and one body byte.
            w.write_all(&frame[..5]).await.expect("write");
            let count = Arc::new(AtomicUsize::new(0));
            let mut r = Counted(r, count.clone());
            let t = turns.clone();
            readers.push(tokio::spawn(async move { t.read_frame(&mut r).await }));
            writers.push(w);
            taken.push(count);
        }
        // Every reader runs until it blocks: on its frame's body, or on a turn
        // (one thread: each yield lets every ready task run once).
        for _ in 0..256 {
            tokio::task::yield_now().await;
        }
        assert_eq!(turns.free(), 0);
        let started = taken
            .iter()
            .filter(|c| c.load(Ordering::SeqCst) > 0)
            .count();
        assert_eq!(
            started, FRAME_READS_PER_CONNECTION,
            "only readers with a turn hold a frame buffer"
        );
        // The rest of every frame arrives: all are read, turn by turn.
        for w in &mut writers {
            w.write_all(&frame[5..]).await.expect("write");
        }
        for r in readers {
            let m = r.await.expect("reader task").expect("frame");
            assert_eq!(m, Message::Start(Start::plain(7)));
        }
        assert_eq!(turns.free(), FRAME_READS_PER_CONNECTION);
    }
}
