use super::*;
use crate::chunk::{Deflater, MAX_CHUNK_RAW, max_wire_len};
use crate::hostile_chunks as hostile;

/// Feeds `wire` through an Inflater in pieces of `inp` input bytes and `outp`
/// output bytes; returns the file bytes or the first refusal.
fn inflate(wire: &[u8], remaining: u64, inp: usize, outp: usize) -> Result<Vec<u8>, InflateError> {
    let mut inf = Inflater::new(remaining);
    let mut file = Vec::new();
    let mut pos = 0usize;
    let mut out = vec![0u8; outp];
    while !inf.is_done() {
        let end = pos.saturating_add(inp).min(wire.len());
        let step = inf.step(&wire[pos..end], &mut out)?;
        pos += step.consumed;
        file.extend_from_slice(&out[..step.produced]);
        if step == Step::default() && pos == wire.len() {
            // Out of input for a chunk that is not complete.
            return Err(InflateError::CutShort);
        }
    }
    assert_eq!(pos, wire.len(), "every wire byte taken, none beyond");
    Ok(file)
}

fn refused((wire, size): (Vec<u8>, u64)) -> InflateError {
    match inflate(&wire, size, 4096, 4096) {
        Err(e) => e,
        Ok(_) => panic!("accepted"),
    }
}

/// `file` as chunks of at most `MAX_CHUNK_RAW`: chunk `i` plain where
/// `plain(i)`, else zstd at `level(i)`.
fn mixed_wire(file: &[u8], plain: impl Fn(usize) -> bool, level: impl Fn(usize) -> i32) -> Vec<u8> {
    let mut d = Deflater::new().expect("compressor");
    let mut wire = Vec::new();
    for (i, part) in file.chunks(MAX_CHUNK_RAW as usize).enumerate() {
        if plain(i) {
            wire.extend(Deflater::plain(part));
        } else {
            wire.extend(d.chunk(part, level(i)).expect("compress"));
        }
    }
    wire
}

#[test]
fn mixed_chunks_come_out_as_the_file_in_any_pieces() {
    let file = hostile::text(3 << 20 | 12_345);
    let wire = mixed_wire(&file, |i| i == 1, |i| 1 + i as i32);
    assert!(wire.len() < file.len() / 2);
    for (inp, outp) in [
        (1, 1),
        (7, 3),
        (4096, 65536),
        (1 << 20, 1 << 20),
        (usize::MAX, 9),
    ] {
        let got = inflate(&wire, file.len() as u64, inp, outp).expect("inflates");
        assert!(got == file, "pieces {inp}/{outp}");
    }
}

/// A reader waiting on the network calls the decoder with no input, many times
/// between two arrivals: that is waiting, never a refusal (zstd alone refuses
/// a stream after 16 calls in a row without progress; the WAN lab hit it).
#[test]
fn calls_without_input_between_arrivals_only_wait() {
    let mut d = Deflater::new().expect("compressor");
    let file = hostile::text(2 << 20 | 777);
    let mut wire = Vec::new();
    for part in file.chunks(MAX_CHUNK_RAW as usize) {
        wire.extend(d.chunk(part, 3).expect("compress"));
    }
    for (inp, outp) in [(1usize, 65536usize), (1000, 4096), (65536, 1 << 20)] {
        let mut inf = Inflater::new(file.len() as u64);
        let mut got = Vec::new();
        let mut out = vec![0u8; outp];
        let mut pos = 0usize;
        while !inf.is_done() {
            // Drain what the decoder holds, then wait (empty input) 40 times.
            for _ in 0..40 {
                let step = inf
                    .step(&[], &mut out)
                    .unwrap_or_else(|e| panic!("waiting refused ({inp}/{outp}): {e}"));
                got.extend_from_slice(&out[..step.produced]);
            }
            let end = pos.saturating_add(inp).min(wire.len());
            let step = inf
                .step(&wire[pos..end], &mut out)
                .unwrap_or_else(|e| panic!("refused ({inp}/{outp}): {e}"));
            pos += step.consumed;
            got.extend_from_slice(&out[..step.produced]);
        }
        assert_eq!(pos, wire.len());
        assert!(got == file, "pieces {inp}/{outp}");
    }
}

#[test]
fn a_frame_that_inflates_past_its_declared_bytes_is_a_bomb() {
    let (wire, size) = hostile::bomb();
    assert!((wire.len() - CHUNK_HEADER_LEN) as u64 <= max_wire_len(1000));
    // Whatever the output room: never more than the declared 1000 bytes come out.
    for outp in [1, 999, 1000, 1 << 20] {
        assert_eq!(
            inflate(&wire, size, 1 << 20, outp),
            Err(InflateError::Bomb { declared: 1000 })
        );
    }
}

#[test]
fn frames_that_lie_about_their_length_are_refused() {
    assert_eq!(
        refused(hostile::short_frame()),
        InflateError::Short {
            declared: 6000,
            got: 5000
        }
    );
    assert_eq!(
        refused(hostile::trailing_bytes()),
        InflateError::Trailing { extra: 3 }
    );
    assert_eq!(refused(hostile::cut_frame()), InflateError::CutShort);
    assert!(matches!(
        refused(hostile::lying_plain()),
        InflateError::WireLength { .. }
    ));
}

#[test]
fn corrupt_frames_and_unknown_kinds_are_refused() {
    let got = refused(hostile::corrupt_frame());
    assert!(matches!(got, InflateError::Corrupt(_)), "{got:?}");
    let garbage = hostile::chunk(ChunkKind::Zstd, 100, &[0xffu8; 64]);
    let got = refused((garbage, 100));
    assert!(matches!(got, InflateError::Corrupt(_)), "{got:?}");
    assert_eq!(
        refused(hostile::unknown_kind()),
        InflateError::UnknownKind(9)
    );
}

#[test]
fn a_window_beyond_the_limit_is_refused() {
    assert_eq!(refused(hostile::wide_window()), InflateError::Window);
}

#[test]
fn a_frame_that_needs_a_dictionary_is_refused() {
    assert_eq!(
        refused(hostile::needs_dictionary()),
        InflateError::Dictionary
    );
}

#[test]
fn chunks_never_declare_past_the_file() {
    let raw = hostile::text(100);
    let wire = [Deflater::plain(&raw), Deflater::plain(&raw)].concat();
    assert_eq!(
        inflate(&wire, 150, 64, 64),
        Err(InflateError::PastEnd {
            raw_len: 100,
            remaining: 50
        })
    );
    // At the end nothing more is taken: the Trailer that follows stays unread.
    let mut inf = Inflater::new(100);
    let mut out = [0u8; 200];
    let step = inf.step(&wire, &mut out).expect("header");
    assert_eq!(step.consumed, CHUNK_HEADER_LEN);
    let step = inf.step(&wire[CHUNK_HEADER_LEN..], &mut out).expect("body");
    assert_eq!(step.consumed, 100);
    assert!(inf.is_done());
    assert_eq!(inf.wants_input(), 0);
}

#[test]
fn decoder_bytes_cover_what_the_decoder_holds() {
    // The largest chunk, with a window as large as the limit, drained through
    // a small output so the decoder buffers the window itself.
    let wide: Vec<u8> = (0..MAX_CHUNK_RAW)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 & 0x0f)
        .collect();
    let mut d = Deflater::new().expect("compressor");
    let wire = d.chunk(&wide, 3).expect("compress");
    assert_eq!(wire[0], ChunkKind::Zstd as u8);
    let mut inf = Inflater::new(wide.len() as u64);
    let mut out = vec![0u8; 4096];
    let mut pos = 0;
    let mut got = 0;
    while !inf.is_done() {
        let step = inf.step(&wire[pos..], &mut out).expect("inflates");
        pos += step.consumed;
        got += step.produced;
    }
    assert_eq!(got, wide.len());
    let held = inf.dctx.as_ref().map_or(0, |d| d.sizeof()) as u64;
    assert!(held > 1 << 20, "the window is held: {held} bytes");
    // Printed for docs/SECURITY.md (`cargo test -p relay-proto decoder_bytes -- --nocapture`).
    eprintln!("zstd decoder after a 1 MiB frame: {held} bytes");
    let with_input = held + READ_AHEAD_BYTES as u64;
    assert!(
        with_input <= DECODER_BYTES,
        "the decoder holds {held} bytes"
    );
}

/// A caller that reads plain chunks' bytes straight into its own buffer
/// (`plain_left`/`took_plain`) and feeds the rest through `step` gets the file,
/// and never takes a wire byte past the last chunk.
#[test]
fn plain_bytes_taken_by_the_caller_come_out_as_the_file() {
    let file = hostile::text(2 << 20 | 777);
    let mut wire = mixed_wire(&file, |i| i % 2 == 0, |_| 1);
    let body = wire.len();
    wire.extend_from_slice(b"TRAILER");
    for piece in [1usize, 5, 4096, 1 << 20] {
        let mut inf = Inflater::new(file.len() as u64);
        let (mut pos, mut got, mut out) = (0usize, Vec::new(), vec![0u8; piece]);
        while !inf.is_done() {
            if let Some(left) = inf.plain_left() {
                let n = left.min(piece).min(wire.len() - pos);
                got.extend_from_slice(&wire[pos..pos + n]);
                inf.took_plain(n);
                pos += n;
                continue;
            }
            let want = inf.wants_input().min(piece);
            let room = inf.output_wanted().min(piece);
            let step = inf
                .step(&wire[pos..pos + want], &mut out[..room])
                .expect("inflates");
            assert!(step.produced <= room);
            pos += step.consumed;
            got.extend_from_slice(&out[..step.produced]);
        }
        assert!(got == file, "pieces of {piece}");
        assert_eq!(pos, body, "the Trailer is left for the frame reader");
        assert_eq!(inf.plain_left(), None);
        assert_eq!(inf.output_wanted(), 0);
    }
}

/// The file's last chunk: every file byte can come out before its frame ends.
/// Driven on to `is_done`, a frame cut before its checksum, one that inflates
/// past its chunk and a bomb are refused; an honest one ends where declared.
#[test]
fn the_last_chunks_end_is_checked_after_its_last_byte() {
    assert_eq!(refused(hostile::unchecked_end()), InflateError::CutShort);
    assert_eq!(
        refused((hostile::bomb().0, 1000)),
        InflateError::Bomb { declared: 1000 }
    );
    assert_eq!(
        refused(hostile::last_bomb()),
        InflateError::Bomb { declared: 1 << 20 }
    );
    // An honest frame: every byte is out while its checksum is still owed.
    let file = hostile::text(5000);
    let wire = Deflater::new()
        .and_then(|mut d| d.chunk(&file, 3))
        .expect("compress");
    let mut inf = Inflater::new(file.len() as u64);
    let mut out = vec![0u8; 8192];
    let head = inf.step(&wire, &mut out).expect("header");
    let body = wire.len() - 4;
    let step = inf
        .step(&wire[head.consumed..body], &mut out)
        .expect("body");
    assert_eq!(step.produced, file.len());
    assert!(inf.delivered_all() && !inf.is_done());
    assert_eq!(inf.wants_input(), 4, "the checksum is still owed");
    let step = inf.step(&wire[body..], &mut []).expect("checksum");
    assert_eq!((step.consumed, step.produced), (4, 0));
    assert!(inf.is_done());
}
