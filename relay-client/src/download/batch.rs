//! A blob's pieces into its partial file a batch at a time.
//!
//! The relay's sections arrive as QUIC hands them over: one piece per STREAM
//! frame received, about a packet's payload each (1.36 KB on average over
//! loopback, docs/bench/download/small-files-cpu), and storage's ranges in
//! `--direct` come as the HTTP body's pieces. A write per piece is a system
//! call, and a blocking one, so each also hands the async worker's other
//! tasks to another thread (`block_in_place`). The pieces are gathered in a buffer of
//! at most `WRITE_BATCH` bytes (the blob's size if smaller) and written when
//! it is full, at the stream's end, and when it breaks or the run stops; so a
//! small file is one write, and a file's memory here is the buffer, whatever
//! it receives.

use std::fs::File;
use std::io::{self, Write};

/// The most bytes of one file held before they are written.
pub const WRITE_BATCH: usize = 256 * 1024;

/// The partial file, written a batch at a time.
pub(super) struct Batched {
    file: File,
    buf: Vec<u8>,
}

impl Batched {
    /// For the `left` bytes still to come of a blob.
    pub(super) fn new(file: File, left: u64) -> Self {
        let cap = usize::try_from(left).map_or(WRITE_BATCH, |n| n.clamp(1, WRITE_BATCH));
        Self {
            file,
            buf: Vec::with_capacity(cap),
        }
    }

    /// Takes `piece`: kept while the buffer has room, else written with what
    /// the buffer holds.
    pub(super) fn write(&mut self, piece: &[u8]) -> io::Result<()> {
        if self.buf.len() + piece.len() <= self.buf.capacity() {
            self.buf.extend_from_slice(piece);
            return Ok(());
        }
        tokio::task::block_in_place(|| {
            self.drain()?;
            if piece.len() >= self.buf.capacity() {
                self.file.write_all(piece)
            } else {
                self.buf.extend_from_slice(piece);
                Ok(())
            }
        })
    }

    /// Writes what the buffer holds (at the end, or before the file is
    /// left for a resume).
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        tokio::task::block_in_place(|| self.drain())
    }

    /// The file, once every byte taken is written.
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    fn drain(&mut self) -> io::Result<()> {
        let r = self.file.write_all(&self.buf);
        self.buf.clear();
        r
    }
}

impl Drop for Batched {
    /// A stream that broke, or a run stopped (its task dropped), leaves the
    /// bytes that arrived in the partial file, for a resume: at most one
    /// batch, written in place (a drop cannot wait elsewhere).
    fn drop(&mut self) {
        let _ = self.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::safe_fs::tests::Scratch;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pieces_of_every_size_reach_the_file_in_order() {
        let s = Scratch::new("batch");
        let path = s.0.join("f");
        let total = 3 * WRITE_BATCH + 1234;
        let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 251) as u8).collect();
        let file = File::create(&path).expect("create");
        let mut b = Batched::new(file, total as u64);
        // Small pieces, one as large as the buffer, one larger, then small again.
        let mut at = 0;
        for len in [1, 1400, 9000, WRITE_BATCH, WRITE_BATCH + 17, 3]
            .into_iter()
            .cycle()
        {
            let end = (at + len).min(total);
            b.write(&data[at..end]).expect("write");
            at = end;
            if at == total {
                break;
            }
        }
        b.flush().expect("flush");
        assert_eq!(std::fs::read(&path).expect("read"), data);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_blob_is_one_write_of_its_size() {
        let s = Scratch::new("batch-small");
        let path = s.0.join("f");
        let file = File::create(&path).expect("create");
        let mut b = Batched::new(file, 5000);
        for piece in [[1u8; 1000]; 5] {
            b.write(&piece).expect("write");
        }
        // Nothing written until the end: all five pieces fit the buffer.
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), 0);
        b.flush().expect("flush");
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), 5000);
    }
}
