//! Compressed chunks a hostile client could send, one per refusal of
//! `inflate`: made here once for the unit tests, the end-to-end hostile-peer
//! tests (`tests/it/hostile/compressed_upload.rs`) and the fuzz seeds, so all three
//! attack the relay with the same bytes. Each returns the whole chunk (header
//! and body) and the file size it claims to belong to.

use crate::chunk::{ChunkHeader, ChunkKind};

/// A chunk of `kind` declaring `raw_len` file bytes, with `body` on the wire.
pub fn chunk(kind: ChunkKind, raw_len: u32, body: &[u8]) -> Vec<u8> {
    let mut v = ChunkHeader {
        kind,
        raw_len,
        wire_len: body.len() as u32,
    }
    .encode()
    .to_vec();
    v.extend_from_slice(body);
    v
}

/// Text-like bytes that compress well (FASTQ-ish lines).
pub fn text(len: usize) -> Vec<u8> {
    let line = b"@read/1 ACGTTGCAACGTAGGCTTAACG +IIIIIHHHGGG 2026-12-02 INFO ok\n";
    line.iter().copied().cycle().take(len).collect()
}

fn frame(raw: &[u8]) -> Vec<u8> {
    // Compressing bytes we made ourselves cannot fail; an empty frame would
    // make every test below fail, not pass.
    zstd::bulk::compress(raw, 3).unwrap_or_default()
}

/// 1 MiB of zeros in a frame that declares 1000 bytes: a decompression bomb.
pub fn bomb() -> (Vec<u8>, u64) {
    (
        chunk(ChunkKind::Zstd, 1000, &frame(&vec![0u8; 1 << 20])),
        1 << 20,
    )
}

/// A frame of 5000 bytes in a chunk that declares 6000.
pub fn short_frame() -> (Vec<u8>, u64) {
    (chunk(ChunkKind::Zstd, 6000, &frame(&text(5000))), 6000)
}

/// A frame of 5000 bytes followed by 3 bytes its chunk counts as wire bytes.
pub fn trailing_bytes() -> (Vec<u8>, u64) {
    let mut z = frame(&text(5000));
    z.extend_from_slice(&[0u8; 3]);
    (chunk(ChunkKind::Zstd, 5000, &z), 5000)
}

/// A frame whose chunk ends 4 bytes before the frame does.
pub fn cut_frame() -> (Vec<u8>, u64) {
    let z = frame(&text(5000));
    (chunk(ChunkKind::Zstd, 5000, &z[..z.len() - 4]), 5000)
}

/// A frame (with its checksum, as the client's have) with 16 bytes in its
/// middle flipped.
pub fn corrupt_frame() -> (Vec<u8>, u64) {
    let mut z = crate::chunk::Deflater::new()
        .and_then(|mut d| d.chunk(&text(200_000), 3))
        .map(|c| c[crate::chunk::CHUNK_HEADER_LEN..].to_vec())
        .unwrap_or_default();
    let mid = z.len() / 2;
    for b in &mut z[mid..mid + 16] {
        *b ^= 0x5a;
    }
    (chunk(ChunkKind::Zstd, 200_000, &z), 200_000)
}

/// A frame with no content size that asks for a 128 MiB window.
pub fn wide_window() -> (Vec<u8>, u64) {
    use zstd::stream::raw::{CParameter, Encoder, InBuffer, Operation, OutBuffer};
    let raw = text(4096);
    let mut out = vec![0u8; raw.len() + 1024];
    let made = (|| -> std::io::Result<usize> {
        let mut enc = Encoder::new(1)?;
        enc.set_parameter(CParameter::WindowLog(27))?;
        enc.set_parameter(CParameter::ContentSizeFlag(false))?;
        let mut ob = OutBuffer::around(&mut out[..]);
        enc.run(&mut InBuffer::around(&raw), &mut ob)?;
        enc.finish(&mut ob, true)?;
        Ok(ob.pos())
    })();
    out.truncate(made.unwrap_or(0));
    (chunk(ChunkKind::Zstd, 4096, &out), 4096)
}

/// A frame whose header names dictionary 7 (the relay loads none).
pub fn needs_dictionary() -> (Vec<u8>, u64) {
    let mut z = frame(&text(4096));
    if z.len() > 5 {
        let fhd = z[4];
        let single_segment = (fhd >> 5) & 1 == 1;
        let at = 5 + usize::from(!single_segment);
        // Dictionary-ID flag 1: a one-byte ID follows the window descriptor.
        z[4] = fhd | 1;
        z.insert(at, 7);
    }
    (chunk(ChunkKind::Zstd, 4096, &z), 4096)
}

/// A chunk of an unknown kind.
pub fn unknown_kind() -> (Vec<u8>, u64) {
    let mut c = chunk(ChunkKind::Plain, 10, b"0123456789");
    c[0] = 9;
    (c, 10)
}

/// A plain chunk that declares 10 file bytes and 9 wire bytes.
pub fn lying_plain() -> (Vec<u8>, u64) {
    (chunk(ChunkKind::Plain, 10, b"012345678"), 10)
}

/// A frame made as the client makes them (with its 4-byte checksum) in a
/// chunk whose wire bytes stop before that checksum: every file byte comes
/// out, and only a reader that checks the frame's end finds it cut.
pub fn unchecked_end() -> (Vec<u8>, u64) {
    let raw = text(5000);
    let c = crate::chunk::Deflater::new()
        .and_then(|mut d| d.chunk(&raw, 3))
        .unwrap_or_default();
    let z = c.get(crate::chunk::CHUNK_HEADER_LEN..).unwrap_or_default();
    let cut = &z[..z.len().saturating_sub(4)];
    (chunk(ChunkKind::Zstd, 5000, cut), 5000)
}

/// 256 MiB of zeros (about 8 KiB on the wire) in a chunk that declares 1 MiB,
/// for a file that ends with it: its first 1 MiB is the file's last, the rest
/// a bomb only a reader that checks the frame's end finds.
pub fn last_bomb() -> (Vec<u8>, u64) {
    use zstd::stream::raw::{CParameter, Encoder, InBuffer, Operation, OutBuffer};
    let raw = vec![0u8; 1 << 20];
    let mut out = vec![0u8; 64 << 10];
    // Streamed 1 MiB at a time, within the relay's window (a frame the relay's
    // decoder accepts until it inflates past its chunk).
    let made = (|| -> std::io::Result<usize> {
        let mut enc = Encoder::new(3)?;
        enc.set_parameter(CParameter::WindowLog(crate::chunk::WINDOW_LOG_MAX))?;
        let mut ob = OutBuffer::around(&mut out[..]);
        for _ in 0..256 {
            enc.run(&mut InBuffer::around(&raw), &mut ob)?;
        }
        enc.finish(&mut ob, true)?;
        Ok(ob.pos())
    })();
    out.truncate(made.unwrap_or(0));
    (chunk(ChunkKind::Zstd, 1 << 20, &out), 1 << 20)
}

/// A hostile compressed chunk: its name, the chunk and the file size it
/// claims, and words its refusal must say.
pub type Case = (&'static str, (Vec<u8>, u64), &'static str);

/// The chunks every decoder must refuse, whichever side receives them: the
/// one table the relay's and the client's tests both walk (each adds the
/// cases only its side meets).
pub fn refused_by_every_decoder() -> Vec<Case> {
    vec![
        ("bomb", bomb(), "decompression bomb"),
        ("short", short_frame(), "ends after 5000 of"),
        ("trailing", trailing_bytes(), "declared wire length"),
        ("cut", cut_frame(), "end inside its frame"),
        ("corrupt", corrupt_frame(), "corrupt frame"),
        ("window", wide_window(), "window beyond the decoder's limit"),
        ("dictionary", needs_dictionary(), "dictionary"),
        ("kind", unknown_kind(), "kind 9 is unknown"),
        ("plain-length", lying_plain(), "wire bytes, beyond"),
    ]
}
