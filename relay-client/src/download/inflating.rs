//! A download's compressed sections read as the blob's bytes: after a
//! `Source` with `encoding: zstd` each `Data` section holds whole chunks
//! (`relay_proto::chunk`), and this reader hands the driver the blob's own
//! bytes, which it hashes and writes as it does plain ones; offsets, resume
//! points and sizes count those bytes.
//!
//! The decoding is `relay_proto::inflate::Inflater`, the relay's own for
//! uploads: every chunk's header is checked before a byte expands (at most
//! 1 MiB, never past the blob's end, wire bytes within zstd's bound), and a
//! frame never writes past what its chunk declared. A zstd chunk's bytes are
//! handed on only once its frame ended exactly where its chunk did (its
//! checksum checked), so a bomb, a lying length or a frame cut short puts
//! none of its bytes in the partial file: the file fails with `protocol`,
//! nothing is placed, and what the partial file holds is whole chunks a rerun
//! may resume from.
//!
//! Memory: a download that inflates holds one of `DECODER_SLOTS` decoder
//! slots, taken before its Fetch asks for compression (none free: it asks
//! for plain sections), and within it at most `DECODING_BYTES`: the decoder
//! and the chunk it is inflating. So however many files are in flight and
//! whatever the relay sends, inflating holds at most
//! `DECODER_SLOTS × DECODING_BYTES` (48 MiB).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::{Buf, Bytes};
use quinn::RecvStream;
use relay_proto::chunk::MAX_CHUNK_RAW;
use relay_proto::inflate::{DECODER_BYTES, InflateError, Inflater};
use relay_proto::protocol::Message;
use relay_transport::frames::read_frame;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::piece::{Next, READ_CHUNK, lost};
use crate::transfer::compress::Mode;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// Downloads that may inflate at once, over the whole run.
pub const DECODER_SLOTS: usize = 16;
/// Most memory one inflating download holds: its decoder and one chunk.
pub const DECODING_BYTES: u64 = DECODER_BYTES + MAX_CHUNK_RAW as u64;

static DECODERS: Semaphore = Semaphore::const_new(DECODER_SLOTS);

/// A decoder slot, held while a download may receive chunks.
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] SemaphorePermit<'static>);

impl Slot {
    /// A free slot now, or None (the download asks for plain sections).
    pub fn take() -> Option<Self> {
        Self::take_from(&DECODERS)
    }

    fn take_from(slots: &'static Semaphore) -> Option<Self> {
        slots.try_acquire().ok().map(Slot)
    }
}

/// What a Fetch asks of the relay: `--compress`, on a connection whose
/// handshake agreed on compression (`agreed`). None: plain sections.
pub fn ask(mode: Mode, agreed: bool) -> Option<relay_proto::compress::Mode> {
    (agreed && mode != Mode::Off).then(|| mode.into())
}

/// The bytes that carried a file's bytes over every attempt of the run, for
/// the report's `wire_bytes`.
#[derive(Debug, Default)]
pub struct Wire {
    bytes: AtomicU64,
    compressed: AtomicBool,
}

impl Wire {
    /// Section bytes read (chunks' headers included, frames not).
    pub fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// The bytes on the wire, if any section came compressed.
    pub fn compressed_total(&self) -> Option<u64> {
        self.compressed
            .load(Ordering::Relaxed)
            .then(|| self.bytes.load(Ordering::Relaxed))
    }
}

/// Why the relay's chunks were refused: the file fails, nothing is placed.
fn refused(why: impl std::fmt::Display) -> FileError {
    FileError::new(
        ErrorCode::Protocol,
        format!("the relay's compressed sections were refused: {why}; the file is not placed"),
        false,
    )
}

/// One download's compressed sections.
#[derive(Debug)]
pub struct Inflating {
    inflater: Inflater,
    /// Wire bytes read from the current section and not yet consumed.
    input: Bytes,
    /// The zstd chunk being inflated: sized to the bytes it declared, handed
    /// on whole once its frame ended.
    out: Vec<u8>,
    filled: usize,
    wire: Arc<Wire>,
    _slot: Slot,
}

impl Inflating {
    /// For the `remaining` bytes of the blob after the Source's offset.
    pub fn new(remaining: u64, slot: Slot, wire: Arc<Wire>) -> Self {
        wire.compressed.store(true, Ordering::Relaxed);
        Self {
            inflater: Inflater::new(remaining),
            input: Bytes::new(),
            out: Vec::new(),
            filled: 0,
            wire,
            _slot: slot,
        }
    }

    /// The next blob bytes from `recv`; `left`: bytes left in the current
    /// section.
    pub(super) async fn next(
        &mut self,
        recv: &mut RecvStream,
        left: &mut u64,
    ) -> Result<Next, FileError> {
        loop {
            if let Some(bytes) = self.step()? {
                return Ok(Next::Bytes(bytes));
            }
            if *left > 0 {
                let max = usize::try_from(*left).unwrap_or(usize::MAX).min(READ_CHUNK);
                let chunk = recv
                    .read_chunk(max, true)
                    .await
                    .map_err(lost)?
                    .ok_or_else(|| lost("the stream ended inside a section"))?;
                let n = chunk.bytes.len() as u64;
                *left -= n;
                self.wire.add(n);
                // `step` wants more only once it used every byte it had.
                debug_assert!(self.input.is_empty());
                self.input = chunk.bytes;
                continue;
            }
            self.section_ended()?;
            match read_frame(recv).await.map_err(lost)? {
                Message::Data(d) => *left = d.len,
                // Before the blob's end, the session finds it truncated.
                Message::Sent(sent) => {
                    return Ok(Next::End {
                        ranges_checked: sent.ranges_checked,
                    });
                }
                Message::Error(f) | Message::Reject(f) => return Ok(Next::Refused(f)),
                other => {
                    return Err(FileError::new(
                        ErrorCode::Protocol,
                        format!("expected Data or Sent, got {}", other.name()),
                        false,
                    ));
                }
            }
        }
    }

    /// A section's bytes are used up: it must have held whole chunks.
    fn section_ended(&self) -> Result<(), FileError> {
        match self.inflater.at_chunk_boundary() {
            true => Ok(()),
            false => Err(refused("a section ended inside a chunk")),
        }
    }

    /// Blob bytes from the wire bytes buffered: a plain chunk's as they are,
    /// a zstd chunk's once its frame ended whole; None: more are needed.
    fn step(&mut self) -> Result<Option<Bytes>, FileError> {
        loop {
            if let Some(plain) = self.inflater.plain_left() {
                let n = plain.min(self.input.len());
                if n == 0 {
                    return Ok(None);
                }
                self.inflater.took_plain(n);
                return Ok(Some(self.input.split_to(n)));
            }
            // Inside a zstd chunk the decoder owes at least 1 byte (the probe
            // that finds a bomb); at a chunk's start, all it declared.
            let zstd = self.inflater.output_wanted() > 0;
            if zstd && self.out.is_empty() {
                self.out = vec![0u8; self.inflater.output_wanted()];
                self.filled = 0;
            }
            let step = self
                .inflater
                .step(&self.input, &mut self.out[self.filled..])
                .map_err(|e: InflateError| refused(e))?;
            self.input.advance(step.consumed);
            self.filled += step.produced;
            if zstd && self.inflater.at_chunk_boundary() {
                let mut whole = std::mem::take(&mut self.out);
                whole.truncate(std::mem::take(&mut self.filled));
                return Ok(Some(Bytes::from(whole)));
            }
            if step.consumed == 0 && step.produced == 0 {
                if !self.input.is_empty() {
                    return Err(refused("bytes after the blob's last chunk"));
                }
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::chunk::{ChunkKind, Deflater};
    use relay_proto::hostile_chunks as hostile;

    /// Reads `sections` (each one section's wire bytes) as `next` does, the
    /// stream handing over at most `piece` bytes a read: the blob bytes
    /// handed on, and the refusal if there was one.
    fn read(sections: &[Vec<u8>], size: u64, piece: usize) -> (Vec<u8>, Option<FileError>) {
        let slot = Slot::take().expect("a decoder slot");
        let mut r = Inflating::new(size, slot, Arc::default());
        let mut got = Vec::new();
        for section in sections {
            for p in section.chunks(piece) {
                r.input = Bytes::copy_from_slice(p);
                loop {
                    match r.step() {
                        Ok(Some(b)) => got.extend_from_slice(&b),
                        Ok(None) => break,
                        Err(e) => return (got, Some(e)),
                    }
                }
            }
            if let Err(e) = r.section_ended() {
                return (got, Some(e));
            }
        }
        (got, None)
    }

    /// `file` as sections of whole chunks: zstd where it shrinks, plain where
    /// `plain_every` says, `per_section` chunks in each.
    fn sections_of(file: &[u8], per_section: usize) -> Vec<Vec<u8>> {
        let mut d = Deflater::new().expect("compressor");
        let chunks: Vec<Vec<u8>> = file
            .chunks(1 << 20)
            .enumerate()
            .map(|(i, c)| match i % 3 {
                2 => Deflater::plain(c),
                _ => d.chunk(c, 3).expect("compress"),
            })
            .collect();
        chunks.chunks(per_section).map(|s| s.concat()).collect()
    }

    #[test]
    fn honest_sections_read_as_the_blob_in_any_pieces() {
        let file = hostile::text((5 << 20) + 4321);
        for per_section in [1, 4] {
            let sections = sections_of(&file, per_section);
            for piece in [1, 7, 1500, 1 << 20] {
                if piece == 1 && per_section == 4 {
                    continue; // the same bytes in one-byte reads: covered above
                }
                let (got, err) = read(&sections, file.len() as u64, piece);
                assert!(err.is_none(), "{err:?}");
                assert!(got == file, "{per_section} per section, pieces of {piece}");
            }
        }
    }

    fn reason(e: &Option<FileError>) -> String {
        let e = e.as_ref().expect("refused");
        assert_eq!(e.code, ErrorCode::Protocol, "{e:?}");
        assert!(!e.retryable, "{e:?}");
        e.message.clone()
    }

    #[test]
    fn each_hostile_chunk_is_refused_before_any_of_its_bytes_is_handed_on() {
        let mut cases = hostile::refused_by_every_decoder();
        cases.extend([
            (
                "no-checksum",
                hostile::unchecked_end(),
                "end inside its frame",
            ),
            ("last-bomb", hostile::last_bomb(), "decompression bomb"),
            (
                "past-end",
                (
                    Deflater::new()
                        .expect("c")
                        .chunk(&hostile::text(100), 3)
                        .expect("z"),
                    50,
                ),
                "past the file's end",
            ),
        ]);
        for (name, (chunk, size), why) in cases {
            for piece in [1, 100, 1 << 20] {
                let (got, err) = read(std::slice::from_ref(&chunk), size, piece);
                let message = reason(&err);
                assert!(message.contains(why), "{name}: {message}");
                assert!(message.contains("not placed"), "{name}: {message}");
                assert!(got.is_empty(), "{name}: {} bytes handed on", got.len());
            }
        }
    }

    #[test]
    fn a_hostile_last_chunk_leaves_exactly_the_whole_chunks_before_it() {
        let prefix = hostile::text(3 << 20);
        let mut sections = sections_of(&prefix, 2);
        let (bomb, declared) = hostile::last_bomb();
        sections.push(bomb);
        let (got, err) = read(&sections, prefix.len() as u64 + declared, 1500);
        assert!(reason(&err).contains("decompression bomb"));
        assert!(got == prefix, "{} of {} bytes", got.len(), prefix.len());
    }

    #[test]
    fn sections_hold_whole_chunks_and_nothing_after_the_last() {
        let file = hostile::text(300_000);
        let whole = Deflater::new().expect("c").chunk(&file, 3).expect("z");
        assert_eq!(whole[0], ChunkKind::Zstd as u8);
        // One chunk split over two sections.
        let (half, rest) = whole.split_at(whole.len() / 2);
        let (got, err) = read(&[half.to_vec(), rest.to_vec()], 300_000, 1 << 20);
        assert!(reason(&err).contains("a section ended inside a chunk"));
        assert!(got.is_empty());
        // A plain chunk's header in one section, its bytes in the next.
        let plain = Deflater::plain(&file[..1000]);
        let (got, err) = read(&[plain[..9].to_vec(), plain[9..].to_vec()], 1000, 64);
        assert!(reason(&err).contains("a section ended inside a chunk"));
        assert!(got.is_empty());
        // Bytes after the blob's last chunk, in its section or another.
        let mut more = whole.clone();
        more.extend_from_slice(&Deflater::plain(b"x"));
        for sections in [vec![more], vec![whole.clone(), Deflater::plain(b"x")]] {
            let (got, err) = read(&sections, 300_000, 1 << 20);
            let message = reason(&err);
            assert!(message.contains("after the blob's last chunk"), "{message}");
            assert!(got == file);
        }
    }

    #[test]
    fn a_fetch_asks_only_where_the_handshake_agreed_and_the_user_allows() {
        use relay_proto::compress::Mode as Wire;
        // (--compress, agreed, asked)
        let cases = [
            (Mode::Auto, true, Some(Wire::Auto)),
            (Mode::Zstd, true, Some(Wire::Zstd)),
            (Mode::Off, true, None),
            (Mode::Auto, false, None),
            (Mode::Zstd, false, None),
            (Mode::Off, false, None),
        ];
        for (mode, agreed, want) in cases {
            assert_eq!(ask(mode, agreed), want, "{mode:?} {agreed}");
        }
    }

    #[test]
    fn slots_run_out_and_come_back() {
        static SLOTS: Semaphore = Semaphore::const_new(3);
        let held: Vec<Slot> = std::iter::from_fn(|| Slot::take_from(&SLOTS))
            .take(4)
            .collect();
        assert_eq!(held.len(), 3);
        assert!(Slot::take_from(&SLOTS).is_none(), "every slot is held");
        drop(held);
        assert!(Slot::take_from(&SLOTS).is_some());
        // The run's bound docs/DOWNLOAD.md and docs/SECURITY.md give.
        assert_eq!(DECODER_SLOTS as u64 * DECODING_BYTES, 48 << 20);
    }

    #[test]
    fn wire_bytes_are_reported_only_when_a_section_came_compressed() {
        let w = Wire::default();
        w.add(100);
        assert_eq!(w.compressed_total(), None);
        w.compressed.store(true, Ordering::Relaxed);
        w.add(5);
        assert_eq!(w.compressed_total(), Some(105));
    }
}
