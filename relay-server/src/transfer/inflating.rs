//! A stream's compressed chunks read as the file's bytes: the stager
//! (`Stager::pump`) reads from this as from the plain stream, so blocks, block
//! IDs, hashing and resume points stay in the file's own bytes whatever
//! travelled.
//!
//! The decoding is `relay_proto::inflate::Inflater` (pure); this shell only
//! moves bytes. It writes into the stager's block buffer (never more than the
//! read asked for), holds at most `INPUT_BYTES` of wire bytes, and never reads
//! past the last chunk, so the Trailer that follows stays for the frame reader.
//! A failure is kept typed (`DecodeError`); the stager, which reads through
//! `AsyncRead`, sees an `io::Error` naming it, and the caller asks the reader
//! why (`explain`).
//!
//! The file's last byte can come out before its chunk ends (the frame's
//! checksum, or a bomb's rest, may still be on the way): `finish` reads the
//! last chunk to its declared wire length and checks its frame ended there,
//! so the Trailer is read from where the chunks end, never from inside one.
//!
//! The decoder's memory (`DECODER_BYTES`) is granted before the decoder is
//! made, at the first zstd chunk (`Reserve`): a transfer whose chunks are all
//! plain (already-compressed data) costs the budget nothing beyond its blocks.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::time::Duration;

use relay_proto::inflate::{
    DECODER_BYTES, InflateError, Inflater, READ_AHEAD_BYTES as INPUT_BYTES,
};
use relay_storage::staging::StageError;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Memory held for the decoder until the stream ends.
pub type Held = Box<dyn Send + Sync>;
type Holding = Pin<Box<dyn Future<Output = Result<Held, StageError>> + Send>>;
/// Takes `DECODER_BYTES` from the budget (and the owner's share), within its wait.
pub type Reserve = Box<dyn FnOnce(u64) -> Holding + Send>;

/// Why the compressed stream stopped.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The peer's chunks broke the format's rules.
    #[error("compressed chunks refused: {0}")]
    Refused(#[from] InflateError),
    /// No memory for the decoder, as for a block (busy, or a budget too small).
    #[error("no memory for the decoder: {0}")]
    Memory(StageError),
    /// The caller checked the chunks' end before the file's last byte.
    #[error("the chunks' end was checked before the file's last byte")]
    EarlyFinish,
}

/// Why receiving a compressed stream failed: the stager's own reason, or the
/// decoder's.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

pub struct Inflating<R> {
    inner: R,
    inflater: Inflater,
    input: Vec<u8>,
    start: usize,
    end: usize,
    reserve: Option<Reserve>,
    holding: Option<Holding>,
    held: Option<Held>,
    /// In `finish`: reading on to the last chunk's end with no room for output.
    to_end: bool,
    /// The decoder's failure, once there is one: every later read repeats it.
    failed: Option<DecodeError>,
}

impl<R> Inflating<R> {
    /// For the `remaining` bytes of the file after the Start's offset; the
    /// decoder's memory comes from `reserve` when a zstd chunk first needs it.
    pub fn new(inner: R, remaining: u64, reserve: Reserve) -> Self {
        Self {
            inner,
            inflater: Inflater::new(remaining),
            // Grown as chunks ask (up to `INPUT_BYTES`): a small file's stream
            // would otherwise zero 64 KiB it never uses (docs/PERFORMANCE.md,
            // "CPU per small file").
            input: Vec::new(),
            start: 0,
            end: 0,
            reserve: Some(reserve),
            holding: None,
            held: None,
            to_end: false,
            failed: None,
        }
    }

    /// Why a read from this stream failed with `e`: the decoder's own reason
    /// when it had one, else the stager's.
    pub fn explain(&mut self, e: StageError) -> ReceiveError {
        match self.failed.take() {
            Some(why) => ReceiveError::Decode(why),
            None => ReceiveError::Stage(e),
        }
    }

    /// Keeps `why` and returns the `io::Error` a read reports for it.
    fn fail(&mut self, why: DecodeError) -> std::io::Error {
        let io = io_error(&why);
        self.failed = Some(why);
        io
    }

    /// Ready once the decoder's memory is held (or none is needed yet).
    fn poll_memory(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.held.is_some() || !self.inflater.needs_decoder() {
            return Poll::Ready(Ok(()));
        }
        if self.holding.is_none() {
            let reserve = self
                .reserve
                .take()
                .ok_or_else(|| std::io::Error::other("the decoder's memory was asked for twice"))?;
            self.holding = Some(reserve(DECODER_BYTES));
        }
        let Some(holding) = self.holding.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        match holding.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.holding = None;
                match r {
                    Ok(held) => {
                        self.held = Some(held);
                        Poll::Ready(Ok(()))
                    }
                    Err(e) => Poll::Ready(Err(self.fail(DecodeError::Memory(e)))),
                }
            }
        }
    }
}

impl<R: AsyncRead + Unpin> Inflating<R> {
    /// A plain chunk's bytes, read from the stream straight into the stager's
    /// buffer (never past the chunk): copied once, as without compression, so
    /// data that does not shrink costs no more than it would plain.
    fn read_plain(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
        left: usize,
    ) -> Poll<std::io::Result<()>> {
        // `Take` hands the stream the unfilled part of `out` as it is (no
        // zeroing first), bounded to the chunk.
        let before = out.filled().len();
        let mut chunk = (&mut self.inner).take(left as u64);
        match Pin::new(&mut chunk).poll_read(cx, out) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                // Nothing read is the end of the stream inside the file: the
                // stager reports it truncated.
                self.inflater.took_plain(out.filled().len() - before);
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl<R: AsyncRead + Unpin> Inflating<R> {
    /// After the file's last byte was read, and before the Trailer is: reads
    /// what the last chunk still has on the wire (within `idle`) and checks
    /// its frame ends exactly there. A frame cut short, one that inflates past
    /// its chunk or a stream that ends first is refused as any bad chunk is.
    pub async fn finish(&mut self, idle: Duration) -> Result<(), ReceiveError> {
        if !self.inflater.delivered_all() {
            return Err(DecodeError::EarlyFinish.into());
        }
        self.to_end = true;
        let mut none = ReadBuf::new(&mut []);
        let read = std::future::poll_fn(|cx| Pin::new(&mut *self).poll_read(cx, &mut none));
        let ended = tokio::time::timeout(idle, read).await;
        match ended {
            Err(_) => Err(StageError::Stalled(idle.as_secs()).into()),
            Ok(Err(e)) => Err(self.explain(StageError::Source(e))),
            Ok(Ok(())) if self.inflater.is_done() => Ok(()),
            // The stream ended inside the last chunk.
            Ok(Ok(())) => Err(DecodeError::Refused(InflateError::CutShort).into()),
        }
    }
}

/// What a read reports for the decoder's failure: its words only, the reason
/// stays typed in the reader.
fn io_error(why: &DecodeError) -> std::io::Error {
    let kind = match why {
        DecodeError::Refused(_) => std::io::ErrorKind::InvalidData,
        DecodeError::Memory(_) | DecodeError::EarlyFinish => std::io::ErrorKind::Other,
    };
    std::io::Error::new(kind, why.to_string())
}

impl<R: AsyncRead + Unpin> AsyncRead for Inflating<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = &this.failed {
            return Poll::Ready(Err(io_error(why)));
        }
        loop {
            if this.inflater.is_done() || out.remaining() == 0 && !this.to_end {
                return Poll::Ready(Ok(()));
            }
            match this.poll_memory(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            if this.start == this.end
                && let Some(left) = this.inflater.plain_left()
            {
                return this.read_plain(cx, out, left);
            }
            // Only what the chunk still owes is prepared (zeroed) for the
            // decoder, not all the room the stager offers (up to 1 MiB a read).
            let room = this.inflater.output_wanted().min(out.remaining());
            let step = this
                .inflater
                .step(
                    &this.input[this.start..this.end],
                    out.initialize_unfilled_to(room),
                )
                .map_err(|e| this.fail(e.into()))?;
            this.start += step.consumed;
            out.advance(step.produced);
            if step.produced > 0 {
                return Poll::Ready(Ok(()));
            }
            if step.consumed > 0 {
                continue;
            }
            // Nothing moved: the decoder needs more of this chunk's wire bytes.
            this.input.copy_within(this.start..this.end, 0);
            this.end -= this.start;
            this.start = 0;
            let want = this
                .inflater
                .wants_input()
                .saturating_sub(this.end)
                .min(INPUT_BYTES - this.end);
            if want == 0 {
                // The chunk's wire bytes are all buffered and the decoder took
                // none of them: it cannot go on.
                return Poll::Ready(Err(this.fail(InflateError::CutShort.into())));
            }
            if this.input.len() < this.end + want {
                this.input.resize(this.end + want, 0);
            }
            let mut rb = ReadBuf::new(&mut this.input[this.end..this.end + want]);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // End of stream inside the file: the stager reports it truncated.
                Poll::Ready(Ok(())) if rb.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => this.end += rb.filled().len(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::chunk::Deflater;
    use tokio::io::AsyncReadExt;

    /// Memory granted at once; counts how often it was asked for.
    fn free(asked: std::sync::Arc<std::sync::atomic::AtomicU32>) -> Reserve {
        Box::new(move |_| {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async { Ok(Box::new(()) as Held) })
        })
    }

    /// Memory never granted: `why` instead.
    fn refused(why: fn() -> StageError) -> Reserve {
        Box::new(move |_| Box::pin(async move { Err(why()) }))
    }

    /// The decoder's failure as the caller hears it after a read failed with `e`.
    fn decode_error<R>(inflating: &mut Inflating<R>, e: std::io::Error) -> DecodeError {
        match inflating.explain(StageError::Source(e)) {
            ReceiveError::Decode(why) => why,
            other => panic!("not the decoder's: {other:?}"),
        }
    }

    #[tokio::test]
    async fn reads_the_file_and_leaves_what_follows() {
        let file: Vec<u8> = b"a log line that repeats\n"
            .iter()
            .copied()
            .cycle()
            .take(3 << 20)
            .collect();
        let mut d = Deflater::new().expect("compressor");
        let mut wire = Vec::new();
        for part in file.chunks(1 << 20) {
            wire.extend(d.chunk(part, 1).expect("compress"));
        }
        wire.extend_from_slice(b"TRAILER");
        let mut src = &wire[..];
        let mut got = Vec::new();
        let asked = std::sync::Arc::default();
        Inflating::new(
            &mut src,
            file.len() as u64,
            free(std::sync::Arc::clone(&asked)),
        )
        .read_to_end(&mut got)
        .await
        .expect("inflates");
        assert!(got == file);
        assert_eq!(src, b"TRAILER");
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "memory asked once"
        );
        // Plain chunks only: no decoder, no memory asked for.
        let plain = Deflater::plain(&file[..1000]);
        let asked = std::sync::Arc::default();
        let mut got = Vec::new();
        Inflating::new(&plain[..], 1000, free(std::sync::Arc::clone(&asked)))
            .read_to_end(&mut got)
            .await
            .expect("plain");
        assert!(got == file[..1000]);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// Hands out at most `piece` bytes a read, like a stream of small packets.
    struct Dribble<'a> {
        rest: &'a [u8],
        piece: usize,
    }

    impl AsyncRead for Dribble<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self.piece.min(buf.remaining()).min(self.rest.len());
            buf.put_slice(&self.rest[..n]);
            self.rest = &self.rest[n..];
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn plain_and_zstd_chunks_in_any_pieces_leave_what_follows() {
        let file: Vec<u8> = (0..(2u32 << 20) + 999)
            .map(|i| {
                if i < 1 << 20 {
                    (i % 251 * 7 % 251) as u8
                } else {
                    b'a'
                }
            })
            .collect();
        let mut d = Deflater::new().expect("compressor");
        let mut wire = Deflater::plain(&file[..1 << 20]);
        wire.extend(d.chunk(&file[1 << 20..(2 << 20)], 1).expect("compress"));
        wire.extend(Deflater::plain(&file[2 << 20..]));
        wire.extend_from_slice(b"TRAILER");
        for piece in [1, 13, 1500, 1 << 20] {
            let mut src = Dribble { rest: &wire, piece };
            let mut got = Vec::new();
            Inflating::new(&mut src, file.len() as u64, free(Default::default()))
                .read_to_end(&mut got)
                .await
                .expect("inflates");
            assert!(got == file, "pieces of {piece}");
            assert_eq!(src.rest, b"TRAILER", "pieces of {piece}");
        }
        // Cut inside a plain chunk: the read ends short, for the stager to
        // report the stream truncated.
        let cut = &wire[..100];
        let mut got = Vec::new();
        Inflating::new(cut, file.len() as u64, free(Default::default()))
            .read_to_end(&mut got)
            .await
            .expect("ends");
        assert!(got.len() < file.len() && got[..] == file[..got.len()]);
    }

    /// The file's bytes read as the stager reads them (exactly the file's
    /// length, in pieces of `piece`), then `finish`.
    async fn read_then_finish(
        src: &mut Dribble<'_>,
        size: u64,
    ) -> (Vec<u8>, Result<(), ReceiveError>) {
        let mut inflating = Inflating::new(&mut *src, size, free(Default::default()));
        let mut got = Vec::new();
        let read = (&mut inflating).take(size).read_to_end(&mut got).await;
        if let Err(e) = read {
            return (got, Err(inflating.explain(StageError::Source(e))));
        }
        let finished = inflating.finish(Duration::from_secs(10)).await;
        (got, finished)
    }

    /// Every file byte comes out before the last frame's checksum is read:
    /// `finish` takes it, and the Trailer after it stays for the frame reader.
    #[tokio::test]
    async fn finish_reads_the_last_frames_end_and_leaves_the_trailer() {
        let file = relay_proto::hostile_chunks::text(2 << 20 | 5000);
        let mut d = Deflater::new().expect("compressor");
        let mut wire = Vec::new();
        for part in file.chunks(1 << 20) {
            wire.extend(d.chunk(part, 3).expect("compress"));
        }
        wire.extend_from_slice(b"TRAILER");
        for piece in [1, 3, 4, 1500, 1 << 20] {
            let mut src = Dribble { rest: &wire, piece };
            let (got, finished) = read_then_finish(&mut src, file.len() as u64).await;
            assert!(got == file, "pieces of {piece}");
            assert!(finished.is_ok(), "pieces of {piece}: {finished:?}");
            assert_eq!(src.rest, b"TRAILER", "pieces of {piece}");
        }
    }

    /// The file's last chunk is hostile: every file byte it declares comes out,
    /// and only its end gives it away.
    #[tokio::test]
    async fn a_hostile_last_chunk_is_refused_at_finish() {
        use relay_proto::hostile_chunks as hostile;
        let cases = [
            (
                "no checksum",
                hostile::unchecked_end(),
                InflateError::CutShort,
            ),
            (
                "past its chunk",
                (hostile::bomb().0, 1000),
                InflateError::Bomb { declared: 1000 },
            ),
            (
                "bomb",
                hostile::last_bomb(),
                InflateError::Bomb { declared: 1 << 20 },
            ),
        ];
        for (name, (mut wire, size), want) in cases {
            wire.extend(Deflater::plain(b"what a Trailer would be"));
            for piece in [7, 1 << 20] {
                let mut src = Dribble { rest: &wire, piece };
                let (got, finished) = read_then_finish(&mut src, size).await;
                assert_eq!(got.len() as u64, size, "{name}/{piece}");
                match finished {
                    Err(ReceiveError::Decode(DecodeError::Refused(e))) => {
                        assert_eq!(e, want, "{name}/{piece}")
                    }
                    other => panic!("{name}/{piece}: {other:?}"),
                }
            }
        }
        // The stream ends inside an honest last frame (its checksum never came).
        let file = relay_proto::hostile_chunks::text(5000);
        let wire = Deflater::new()
            .and_then(|mut d| d.chunk(&file, 3))
            .expect("compress");
        let mut src = Dribble {
            rest: &wire[..wire.len() - 2],
            piece: 1 << 20,
        };
        let (got, finished) = read_then_finish(&mut src, 5000).await;
        assert!(got == file);
        match finished {
            Err(ReceiveError::Decode(DecodeError::Refused(InflateError::CutShort))) => {}
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_refusal_is_typed() {
        let mut wire = Deflater::plain(b"0123456789");
        wire[0] = 9;
        let mut got = Vec::new();
        let mut inflating = Inflating::new(&wire[..], 10, free(Default::default()));
        let e = inflating.read_to_end(&mut got).await.expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        match decode_error(&mut inflating, e) {
            DecodeError::Refused(InflateError::UnknownKind(9)) => {}
            other => panic!("{other:?}"),
        }
    }

    /// No memory for the decoder reaches the caller as its own variant,
    /// carrying the budget's reason, and every later read repeats it.
    #[tokio::test]
    async fn no_memory_for_the_decoder_is_typed() {
        let file = relay_proto::hostile_chunks::text(5000);
        let wire = Deflater::new()
            .and_then(|mut d| d.chunk(&file, 3))
            .expect("compress");
        let mut inflating = Inflating::new(&wire[..], 5000, refused(|| StageError::Busy(7)));
        let mut got = Vec::new();
        let e = inflating
            .read_to_end(&mut got)
            .await
            .expect_err("no memory");
        assert!(got.is_empty());
        let again = inflating
            .read_to_end(&mut got)
            .await
            .expect_err("still no memory");
        assert_eq!(again.to_string(), e.to_string());
        match decode_error(&mut inflating, e) {
            DecodeError::Memory(StageError::Busy(7)) => {}
            other => panic!("{other:?}"),
        }
    }
}
