//! The receiving side of compressed chunks (`chunk`): a decoder that writes the
//! file's bytes into the caller's buffer and never more than a chunk declared.
//! The relay reads an upload through it, the client a download.
//!
//! A peer's frame is bounded three ways before and while it expands: the
//! header (`ChunkHeader::parse`: at most 1 MiB, never past the file's end,
//! wire bytes within zstd's bound), the output (at most the chunk's declared
//! bytes, into a buffer the caller owns, so a bomb fills nothing it did not
//! grant), and the decoder's window (`WINDOW_LOG_MAX`: zstd refuses a frame
//! that asks for more before allocating it). What the decoder itself holds is
//! `DECODER_BYTES`, taken from the relay's memory budget while a transfer
//! receives compressed chunks (the client counts it in its own decoder
//! budget). Pure: no I/O, fed bytes by the caller.

use zstd::zstd_safe::{self, DCtx, DParameter, InBuffer, OutBuffer, ResetDirective};

pub use crate::chunk::InflateError;
use crate::chunk::{CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, WINDOW_LOG_MAX};

/// Memory one decoder may hold (its window of `2^WINDOW_LOG_MAX` bytes, input
/// and output blocks and its context, rounded up): counted against the
/// relay's block budget for each transfer from its first zstd chunk
/// (`decoder_bytes_cover_what_the_decoder_holds` measures it).
pub const DECODER_BYTES: u64 = 2 << 20;

/// Wire bytes a relay reads ahead of its decoder (within `DECODER_BYTES`).
pub const READ_AHEAD_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy)]
enum State {
    Header {
        have: usize,
    },
    Plain {
        left: u32,
    },
    Zstd {
        declared: u32,
        raw_left: u32,
        wire_left: u32,
    },
}

/// Bytes one `step` took from its input and wrote to its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    pub consumed: usize,
    pub produced: usize,
}

pub struct Inflater {
    /// Created at the first zstd chunk: a transfer of plain chunks costs none.
    dctx: Option<DCtx<'static>>,
    /// File bytes not yet declared by a chunk header.
    remaining: u64,
    state: State,
    header: [u8; CHUNK_HEADER_LEN],
    /// The decoder's last call left room in its output, so it holds nothing to
    /// flush: without new input it cannot progress. zstd refuses a stream after
    /// 16 calls in a row that make no progress ("no forward progress, input
    /// empty"), and a reader waiting on the network calls with no input often.
    drained: bool,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("remaining", &self.remaining)
            .field("state", &self.state)
            .finish()
    }
}

impl Inflater {
    /// For `remaining` bytes of the file (from the Start's offset to its size).
    pub fn new(remaining: u64) -> Self {
        Self {
            dctx: None,
            remaining,
            state: State::Header { have: 0 },
            header: [0; CHUNK_HEADER_LEN],
            drained: true,
        }
    }

    /// Whether the next step makes the decoder (`DECODER_BYTES`): a zstd chunk
    /// has begun and none exists yet. A transfer of plain chunks never does.
    pub fn needs_decoder(&self) -> bool {
        self.dctx.is_none() && matches!(self.state, State::Zstd { .. })
    }

    /// Whether every byte of the file was delivered, at a chunk boundary.
    pub fn is_done(&self) -> bool {
        self.remaining == 0 && matches!(self.state, State::Header { have: 0 })
    }

    /// Whether the bytes fed so far end exactly at a chunk's end (no chunk
    /// begun, none half read): where a download's section may end.
    pub fn at_chunk_boundary(&self) -> bool {
        matches!(self.state, State::Header { have: 0 })
    }

    /// Whether every byte of the file came out (`is_done`, or the last zstd
    /// chunk still owes its frame's end: its checksum, its remaining wire
    /// bytes). A reader that stops here has not checked that end: it steps on
    /// with no output room (a byte more is a bomb) until `is_done`, before it
    /// reads what follows the chunks.
    pub fn delivered_all(&self) -> bool {
        self.remaining == 0
            && matches!(
                self.state,
                State::Header { have: 0 } | State::Zstd { raw_left: 0, .. }
            )
    }

    /// How many more input bytes the current chunk may take: a reader that reads
    /// at most this never takes a byte past the last chunk (the Trailer follows).
    pub fn wants_input(&self) -> usize {
        match self.state {
            State::Header { .. } if self.remaining == 0 => 0,
            State::Header { have } => CHUNK_HEADER_LEN - have,
            State::Plain { left } => left as usize,
            State::Zstd { wire_left, .. } => wire_left as usize,
        }
    }

    /// Output bytes the current chunk still owes (at least 1 inside a zstd
    /// chunk, for the probe that finds a bomb): a caller sizes the buffer it
    /// prepares for `step` by this, not by the room it has.
    pub fn output_wanted(&self) -> usize {
        match self.state {
            State::Header { .. } => 0,
            State::Plain { left } => left as usize,
            State::Zstd { raw_left, .. } => (raw_left as usize).max(1),
        }
    }

    /// Inside a plain chunk, the bytes it still has: a caller with no input
    /// buffered may read up to this many straight from the stream into its
    /// own buffer and report them with `took_plain`, so plain bytes are
    /// copied once, as on a stream without compression. `None` elsewhere.
    pub fn plain_left(&self) -> Option<usize> {
        match self.state {
            State::Plain { left } => Some(left as usize),
            _ => None,
        }
    }

    /// Counts `n` bytes of the current plain chunk the caller moved itself
    /// (at most `plain_left`: more is the caller's bug, and counts as the rest
    /// of the chunk, never past it).
    pub fn took_plain(&mut self, n: usize) {
        if let State::Plain { left } = self.state {
            debug_assert!(n <= left as usize, "took {n} of a plain chunk's {left}");
            let left = left.saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
            self.state = match left {
                0 => State::Header { have: 0 },
                _ => State::Plain { left },
            };
        }
    }

    /// Takes what it can of `input` (never beyond the current chunk) and writes
    /// file bytes into `out`. `Step{0, 0}` with input given means `out` is
    /// empty; with no input given, that more input is needed.
    pub fn step(&mut self, input: &[u8], out: &mut [u8]) -> Result<Step, InflateError> {
        let input = &input[..input.len().min(self.wants_input())];
        match self.state {
            State::Header { have } => {
                let n = input.len().min(CHUNK_HEADER_LEN - have);
                self.header[have..have + n].copy_from_slice(&input[..n]);
                self.state = State::Header { have: have + n };
                if have + n == CHUNK_HEADER_LEN {
                    self.begin()?;
                }
                Ok(Step {
                    consumed: n,
                    produced: 0,
                })
            }
            State::Plain { left } => {
                let n = input.len().min(out.len());
                out[..n].copy_from_slice(&input[..n]);
                let left = left - n as u32;
                self.state = match left {
                    0 => State::Header { have: 0 },
                    _ => State::Plain { left },
                };
                Ok(Step {
                    consumed: n,
                    produced: n,
                })
            }
            State::Zstd {
                declared,
                raw_left,
                wire_left,
            } => self.zstd(input, out, declared, raw_left, wire_left),
        }
    }

    fn begin(&mut self) -> Result<(), InflateError> {
        let h = ChunkHeader::parse(self.header, self.remaining)?;
        self.remaining -= u64::from(h.raw_len);
        self.state = match h.kind {
            ChunkKind::Plain => State::Plain { left: h.raw_len },
            ChunkKind::Zstd => {
                // The decoder is made at the first zstd chunk (`needs_decoder`:
                // its caller grants the memory first), then reset per frame.
                if let Some(dctx) = &mut self.dctx {
                    dctx.reset(ResetDirective::SessionOnly)
                        .map_err(|c| InflateError::Decoder(zstd_safe::get_error_name(c)))?;
                }
                self.drained = true;
                State::Zstd {
                    declared: h.raw_len,
                    raw_left: h.raw_len,
                    wire_left: h.wire_len,
                }
            }
        };
        Ok(())
    }

    fn zstd(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        declared: u32,
        raw_left: u32,
        wire_left: u32,
    ) -> Result<Step, InflateError> {
        let dctx = match &mut self.dctx {
            Some(d) => d,
            None => self.dctx.insert(new_dctx()?),
        };
        // Once the declared bytes are out, the frame may only end: a byte more
        // is a bomb, found with a one-byte probe instead of a larger buffer.
        let mut probe = [0u8; 1];
        let room = out.len().min(raw_left as usize);
        let target: &mut [u8] = if raw_left == 0 {
            &mut probe
        } else {
            &mut out[..room]
        };
        if target.is_empty() {
            return Ok(Step::default());
        }
        if input.is_empty() && self.drained {
            // Nothing buffered and nothing new: more input is needed, or, when
            // the chunk's wire bytes are all in, the frame was cut short.
            if wire_left == 0 {
                return Err(InflateError::CutShort);
            }
            return Ok(Step::default());
        }
        let target_len = target.len();
        let mut ib = InBuffer::around(input);
        let mut ob = OutBuffer::around(target);
        let hint = dctx.decompress_stream(&mut ob, &mut ib).map_err(classify)?;
        let (consumed, produced) = (ib.pos(), ob.pos());
        self.drained = produced < target_len;
        if raw_left == 0 && produced > 0 {
            return Err(InflateError::Bomb { declared });
        }
        // Both within the chunk: `input` was cut to `wire_left`, `target` to `raw_left`.
        let wire_left = wire_left - consumed as u32;
        let raw_left = raw_left - produced as u32;
        if hint == 0 {
            // The frame ended: exactly where the header said, or a lie.
            if raw_left != 0 {
                return Err(InflateError::Short {
                    declared,
                    got: declared - raw_left,
                });
            }
            if wire_left != 0 {
                return Err(InflateError::Trailing { extra: wire_left });
            }
            self.state = State::Header { have: 0 };
        } else {
            let stuck = consumed == 0 && produced == 0;
            if wire_left == 0 && (stuck || raw_left == 0 && produced == 0) {
                // No input left for a frame that has not ended, and nothing
                // more came out: it was cut short.
                return Err(InflateError::CutShort);
            }
            self.state = State::Zstd {
                declared,
                raw_left,
                wire_left,
            };
        }
        Ok(Step { consumed, produced })
    }
}

fn new_dctx() -> Result<DCtx<'static>, InflateError> {
    let mut dctx = DCtx::try_create().ok_or(InflateError::Decoder("out of memory"))?;
    dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
        .map_err(|c| InflateError::Decoder(zstd_safe::get_error_name(c)))?;
    Ok(dctx)
}

/// zstd's error, named by what the peer did.
fn classify(code: usize) -> InflateError {
    let name = zstd_safe::get_error_name(code);
    match name {
        "Frame requires too much memory for decoding" => InflateError::Window,
        "Dictionary mismatch" => InflateError::Dictionary,
        other => InflateError::Corrupt(other),
    }
}

#[cfg(test)]
#[path = "inflate_tests.rs"]
mod tests;
