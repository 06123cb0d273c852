//! A stream's compressed chunks read as the file's bytes: the stager
//! (`Stager::pump`) reads from this as from the plain stream, so blocks, block
//! IDs, hashing and resume points stay in the file's own bytes whatever
//! travelled.
//!
//! The decoding is `relay_proto::inflate::Inflater` (pure); this shell only
//! moves bytes. It writes into the stager's block buffer (never more than the
//! read asked for), holds at most `INPUT_BYTES` of wire bytes, and never reads
//! past the last chunk, so the Trailer that follows stays for the frame reader.
//! A refusal is an `io::Error` of kind `InvalidData` carrying the
//! `InflateError` (`refusal` finds it again).

use std::pin::Pin;
use std::task::{Context, Poll};

use relay_proto::inflate::{InflateError, Inflater, READ_AHEAD_BYTES as INPUT_BYTES};
use tokio::io::{AsyncRead, ReadBuf};

pub struct Inflating<R> {
    inner: R,
    inflater: Inflater,
    input: Box<[u8]>,
    start: usize,
    end: usize,
}

impl<R> Inflating<R> {
    /// For the `remaining` bytes of the file after the Start's offset.
    pub fn new(inner: R, remaining: u64) -> Self {
        Self {
            inner,
            inflater: Inflater::new(remaining),
            input: vec![0u8; INPUT_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

/// The decoder's refusal inside an error from a read, if that is what it is.
pub fn refusal(e: &std::io::Error) -> Option<&InflateError> {
    e.get_ref()?.downcast_ref::<InflateError>()
}

impl<R: AsyncRead + Unpin> AsyncRead for Inflating<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if out.remaining() == 0 || this.inflater.is_done() {
                return Poll::Ready(Ok(()));
            }
            let step = this
                .inflater
                .step(&this.input[this.start..this.end], out.initialize_unfilled())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
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
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    InflateError::CutShort,
                )));
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
        Inflating::new(&mut src, file.len() as u64)
            .read_to_end(&mut got)
            .await
            .expect("inflates");
        assert!(got == file);
        assert_eq!(src, b"TRAILER");
    }

    #[tokio::test]
    async fn a_refusal_is_typed() {
        let mut wire = Deflater::plain(b"0123456789");
        wire[0] = 9;
        let mut got = Vec::new();
        let e = Inflating::new(&wire[..], 10)
            .read_to_end(&mut got)
            .await
            .expect_err("refused");
        assert_eq!(refusal(&e), Some(&InflateError::UnknownKind(9)));
    }
}
