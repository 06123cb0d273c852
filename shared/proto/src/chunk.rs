//! Compressed bytes on the wire: when both ends announced zstd (the
//! connection's ALPN, `limits::ALPN_ZSTD`) and the client's `Start` says
//! `encoding: zstd`, the file's bytes `[offset, size)` travel as chunks:
//!
//! ```text
//! kind (1 byte: 0 plain, 1 zstd) | raw_len (u32 BE) | wire_len (u32 BE) | wire_len bytes
//! ```
//!
//! `raw_len` is how many of the file's bytes the chunk carries (1 ..= 1 MiB, never
//! past the file's end); a plain chunk's wire bytes are those bytes, a zstd
//! chunk's are exactly one zstd frame that inflates to exactly `raw_len` bytes.
//! Every chunk says up front what it will cost the receiver, so the receiver
//! can refuse a lie before it expands anything (`inflate`). Offsets, block IDs,
//! the Trailer's SHA-256 and the blob all stay in the file's own bytes: the
//! chunking exists only between the two ends.
//!
//! Downloads use the same chunks the other way: after a `Source` with
//! `encoding: zstd`, each `Data` section carries whole chunks of the blob's
//! bytes `[offset, size)`, made by the relay and inflated by the client with
//! the same bounded decoder.

/// Bytes of a chunk's header.
pub const CHUNK_HEADER_LEN: usize = 9;
/// Most file bytes one chunk may carry: the client's read size, and the zstd
/// window a frame of it needs (`WINDOW_LOG_MAX`).
pub const MAX_CHUNK_RAW: u32 = 1 << 20;
/// The largest window (log2 bytes) the decoder (relay or client) accepts. A frame of at
/// most `MAX_CHUNK_RAW` bytes never needs more; a frame that asks for more is
/// refused before the decoder allocates for it.
pub const WINDOW_LOG_MAX: u32 = 20;
/// zstd level the client starts at: fast (hundreds of MB/s per core), and it
/// steps down from here when the compressor cannot keep up, up when the link
/// leaves it time (`relay-client`'s `compress` module).
pub const DEFAULT_LEVEL: i32 = 3;

/// Why the receiver refused its peer's compressed chunks. Each is final for
/// the transfer: an upload commits nothing (blocks staged before stay for a
/// resume), a download places nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    #[error("chunk kind {0} is unknown")]
    UnknownKind(u8),
    #[error("empty chunk")]
    Empty,
    #[error("chunk declares {raw_len} bytes, more than the {MAX_CHUNK_RAW} a chunk may carry")]
    ChunkTooLarge { raw_len: u32 },
    #[error("chunk declares {raw_len} bytes past the file's end ({remaining} left)")]
    PastEnd { raw_len: u32, remaining: u64 },
    #[error("chunk of {raw_len} bytes declares {wire_len} wire bytes, beyond its kind's bound")]
    WireLength { raw_len: u32, wire_len: u32 },
    #[error("decompression bomb: the frame inflates past its chunk's declared {declared} bytes")]
    Bomb { declared: u32 },
    #[error("the frame ends after {got} of its chunk's declared {declared} bytes")]
    Short { declared: u32, got: u32 },
    #[error("the frame ends {extra} bytes before its chunk's declared wire length")]
    Trailing { extra: u32 },
    #[error("the chunk's wire bytes end inside its frame")]
    CutShort,
    #[error("the frame asks for a window beyond the decoder's limit of {} bytes", 1u64 << WINDOW_LOG_MAX)]
    Window,
    #[error("the frame asks for a dictionary; the decoder uses none")]
    Dictionary,
    #[error("corrupt frame: {0}")]
    Corrupt(&'static str),
    #[error("zstd decoder: {0}")]
    Decoder(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    Plain = 0,
    Zstd = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub kind: ChunkKind,
    pub raw_len: u32,
    pub wire_len: u32,
}

/// Most wire bytes a zstd frame of `raw_len` bytes may take (zstd's own bound).
pub fn max_wire_len(raw_len: u32) -> u64 {
    zstd::zstd_safe::compress_bound(raw_len as usize) as u64
}

impl ChunkHeader {
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut out = [0u8; CHUNK_HEADER_LEN];
        out[0] = self.kind as u8;
        out[1..5].copy_from_slice(&self.raw_len.to_be_bytes());
        out[5..9].copy_from_slice(&self.wire_len.to_be_bytes());
        out
    }

    /// A header, checked against what the file has left (`remaining` bytes):
    /// every refusal here happens before a byte is expanded.
    pub fn parse(bytes: [u8; CHUNK_HEADER_LEN], remaining: u64) -> Result<Self, InflateError> {
        let kind = match bytes[0] {
            0 => ChunkKind::Plain,
            1 => ChunkKind::Zstd,
            other => return Err(InflateError::UnknownKind(other)),
        };
        let raw_len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        let wire_len = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        if raw_len == 0 {
            return Err(InflateError::Empty);
        }
        if raw_len > MAX_CHUNK_RAW {
            return Err(InflateError::ChunkTooLarge { raw_len });
        }
        if u64::from(raw_len) > remaining {
            return Err(InflateError::PastEnd { raw_len, remaining });
        }
        let fits = match kind {
            ChunkKind::Plain => wire_len == raw_len,
            ChunkKind::Zstd => wire_len > 0 && u64::from(wire_len) <= max_wire_len(raw_len),
        };
        if !fits {
            return Err(InflateError::WireLength { raw_len, wire_len });
        }
        Ok(Self {
            kind,
            raw_len,
            wire_len,
        })
    }
}

/// The client's side: one chunk of file bytes as it goes on the wire.
pub struct Deflater {
    cctx: zstd::bulk::Compressor<'static>,
    level: i32,
}

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deflater")
            .field("level", &self.level)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("zstd: {0}")]
pub struct DeflateError(#[from] std::io::Error);

impl Deflater {
    pub fn new() -> Result<Self, DeflateError> {
        let mut cctx = zstd::bulk::Compressor::new(DEFAULT_LEVEL)?;
        // A frame names its size (the relay checks it against the header) and
        // never needs a window beyond the decoder's limit, whatever the level.
        cctx.set_parameter(zstd::stream::raw::CParameter::ContentSizeFlag(true))?;
        // A frame changed on the way is refused at once, not only by the
        // whole-file SHA-256 at the end (4 bytes a chunk).
        cctx.set_parameter(zstd::stream::raw::CParameter::ChecksumFlag(true))?;
        cctx.set_parameter(zstd::stream::raw::CParameter::WindowLog(WINDOW_LOG_MAX))?;
        Ok(Self {
            cctx,
            level: DEFAULT_LEVEL,
        })
    }

    /// Bytes zstd's context holds now (its tables and window at the levels
    /// used so far): what a sender counts against its memory.
    pub fn context_bytes(&mut self) -> usize {
        self.cctx.context_mut().sizeof()
    }

    /// A plain chunk's header alone: a sender that writes it and then the
    /// `raw_len` bytes as they are sends `plain`'s chunk without copying them.
    pub fn plain_header(raw_len: usize) -> [u8; CHUNK_HEADER_LEN] {
        header(ChunkKind::Plain, raw_len, raw_len)
    }

    /// A plain chunk: header and the bytes as they are.
    pub fn plain(raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHUNK_HEADER_LEN + raw.len());
        out.extend_from_slice(&Self::plain_header(raw.len()));
        out.extend_from_slice(raw);
        out
    }

    /// A zstd chunk at `level`, or a plain one if the frame would not be
    /// smaller than the bytes. `raw` is at most `MAX_CHUNK_RAW` bytes.
    pub fn chunk(&mut self, raw: &[u8], level: i32) -> Result<Vec<u8>, DeflateError> {
        Ok(self
            .compressed(raw, level)?
            .unwrap_or_else(|| Self::plain(raw)))
    }

    /// A zstd chunk at `level`, header included, or `None` if the frame would
    /// not be smaller than the bytes (a sender then sends them plain, without
    /// copying them: `plain_header`).
    pub fn compressed(&mut self, raw: &[u8], level: i32) -> Result<Option<Vec<u8>>, DeflateError> {
        debug_assert!(!raw.is_empty() && raw.len() <= MAX_CHUNK_RAW as usize);
        if level != self.level {
            self.cctx.set_compression_level(level)?;
            // Setting a level resets the window to the level's; ours again.
            self.cctx
                .set_parameter(zstd::stream::raw::CParameter::WindowLog(WINDOW_LOG_MAX))?;
            self.level = level;
        }
        let mut out = vec![0u8; CHUNK_HEADER_LEN + max_wire_len(raw.len() as u32) as usize];
        let n = self
            .cctx
            .compress_to_buffer(raw, &mut out[CHUNK_HEADER_LEN..])?;
        if n >= raw.len() {
            return Ok(None);
        }
        out.truncate(CHUNK_HEADER_LEN + n);
        out[..CHUNK_HEADER_LEN].copy_from_slice(&header(ChunkKind::Zstd, raw.len(), n));
        Ok(Some(out))
    }
}

fn header(kind: ChunkKind, raw_len: usize, wire_len: usize) -> [u8; CHUNK_HEADER_LEN] {
    // Both at most compress_bound(1 MiB): they fit a u32.
    ChunkHeader {
        kind,
        raw_len: raw_len as u32,
        wire_len: wire_len as u32,
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(kind: u8, raw: u32, wire: u32, remaining: u64) -> Result<ChunkHeader, InflateError> {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0] = kind;
        b[1..5].copy_from_slice(&raw.to_be_bytes());
        b[5..9].copy_from_slice(&wire.to_be_bytes());
        ChunkHeader::parse(b, remaining)
    }

    #[test]
    fn headers_are_checked_before_anything_expands() {
        assert!(parsed(0, 10, 10, 10).is_ok());
        assert!(parsed(1, 10, 5, 10).is_ok());
        assert_eq!(parsed(2, 10, 10, 10), Err(InflateError::UnknownKind(2)));
        assert_eq!(parsed(0, 0, 0, 10), Err(InflateError::Empty));
        assert_eq!(
            parsed(1, MAX_CHUNK_RAW + 1, 5, u64::MAX),
            Err(InflateError::ChunkTooLarge {
                raw_len: MAX_CHUNK_RAW + 1
            })
        );
        assert_eq!(
            parsed(1, 11, 5, 10),
            Err(InflateError::PastEnd {
                raw_len: 11,
                remaining: 10
            })
        );
        assert!(matches!(
            parsed(0, 10, 9, 10),
            Err(InflateError::WireLength { .. })
        ));
        assert!(matches!(
            parsed(1, 10, 0, 10),
            Err(InflateError::WireLength { .. })
        ));
        let over = max_wire_len(10) as u32 + 1;
        assert!(matches!(
            parsed(1, 10, over, 10),
            Err(InflateError::WireLength { .. })
        ));
    }

    #[test]
    fn incompressible_bytes_go_plain_and_text_shrinks() {
        let mut d = Deflater::new().expect("compressor");
        let text = b"2026-12-02T18:00:00Z INFO relay: committed blob\n".repeat(1000);
        let z = d.chunk(&text, 3).expect("compress");
        assert_eq!(z[0], ChunkKind::Zstd as u8);
        assert!(z.len() < text.len() / 10, "{} bytes", z.len());
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let p = d.chunk(&noise[..16], 1).expect("compress");
        assert_eq!(p[0], ChunkKind::Plain as u8);
        assert_eq!(&p[CHUNK_HEADER_LEN..], &noise[..16]);
        assert_eq!(d.compressed(&noise[..16], 1).expect("compress"), None);
        assert_eq!(d.compressed(&text, 3).expect("compress"), Some(z));
    }
}
