//! The relay's decoder of compressed chunks (`relay_proto::inflate`) on
//! arbitrary bytes: the `inflate` fuzz target and its stable property tests.

use relay_proto::chunk::{CHUNK_HEADER_LEN, Deflater, MAX_CHUNK_RAW};
use relay_proto::inflate::Inflater;

/// File sizes the inputs may declare: a few chunks, so a run stays fast.
const MAX_FILE: u64 = 4 * MAX_CHUNK_RAW as u64;

/// The decoder on arbitrary input. The first 4 bytes choose the file size the
/// Start implies (at most `MAX_FILE`), the next 2 the output room per step
/// (1 ..= 65536); the rest is the wire. Whatever the bytes:
/// * it never panics and always ends (each step takes input, gives output, or
///   the input is exhausted);
/// * a step never takes more input than given, nor writes more than its room;
/// * the file bytes out never exceed the declared size (no bomb gets through),
///   and once they are all out, no further input is taken (the Trailer that
///   follows stays unread);
/// * with an odd room, the caller takes plain chunks' bytes itself
///   (`plain_left`/`took_plain`, as the relay's reader does), never more than
///   the chunk has nor than the step's `wants_input`, and the properties above
///   hold the same.
pub fn check_inflate_bytes(data: &[u8]) {
    if data.len() < 6 {
        return;
    }
    let size = u64::from(u32::from_be_bytes([data[0], data[1], data[2], data[3]])) % (MAX_FILE + 1);
    let room = usize::from(u16::from_be_bytes([data[4], data[5]])) + 1;
    let wire = &data[6..];
    let mut inflater = Inflater::new(size);
    let mut out = vec![0u8; room];
    let (mut pos, mut produced) = (0usize, 0u64);
    let caller_takes_plain = room % 2 == 1;
    loop {
        let before = inflater.wants_input();
        if caller_takes_plain && let Some(left) = inflater.plain_left() {
            assert!(
                left > 0 && left <= before,
                "plain_left {left} past its chunk"
            );
            assert!(inflater.output_wanted() == left);
            let n = left.min(room).min(wire.len() - pos);
            if n == 0 {
                return;
            }
            inflater.took_plain(n);
            pos += n;
            produced += n as u64;
            assert!(
                produced <= size,
                "{produced} bytes out of a {size} byte file"
            );
            continue;
        }
        match inflater.step(&wire[pos..], &mut out) {
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return;
            }
            Ok(step) => {
                assert!(step.consumed <= wire.len() - pos, "took more than given");
                assert!(step.consumed <= before, "took past its chunk");
                assert!(step.produced <= room, "wrote past its room");
                pos += step.consumed;
                produced += step.produced as u64;
                assert!(
                    produced <= size,
                    "{produced} bytes out of a {size} byte file"
                );
                if inflater.is_done() {
                    assert_eq!(produced, size, "done before every byte");
                    assert_eq!(inflater.wants_input(), 0);
                    return;
                }
                if step.consumed == 0 && step.produced == 0 {
                    // Nothing moved: only because the input ran out.
                    assert_eq!(pos, wire.len(), "stuck with input left");
                    return;
                }
            }
        }
    }
}

/// What the client makes, the relay takes back: `raw` cut into chunks of
/// `chunk` bytes, each compressed at `level` (or plain if it does not shrink),
/// inflates to exactly `raw` through any output room.
pub fn check_round_trip(raw: &[u8], chunk: usize, level: i32, room: usize) {
    if raw.is_empty() {
        return;
    }
    let chunk = chunk.clamp(1, MAX_CHUNK_RAW as usize);
    let mut deflater = Deflater::new().expect("compressor");
    let mut wire = Vec::new();
    for part in raw.chunks(chunk) {
        wire.extend(deflater.chunk(part, level.clamp(1, 19)).expect("compress"));
    }
    let mut inflater = Inflater::new(raw.len() as u64);
    let mut out = vec![0u8; room.max(1)];
    let (mut pos, mut got) = (0usize, Vec::with_capacity(raw.len()));
    while !inflater.is_done() {
        let step = inflater
            .step(&wire[pos..], &mut out)
            .unwrap_or_else(|e| panic!("the client's own chunks refused: {e}"));
        assert!(step.consumed + step.produced > 0, "stuck on valid chunks");
        pos += step.consumed;
        got.extend_from_slice(&out[..step.produced]);
    }
    assert_eq!(pos, wire.len());
    assert!(got == raw, "inflated bytes differ");
}

/// Seeds for the `inflate` target: each hostile chunk of
/// `relay_proto::hostile_chunks` and a valid two-chunk file, with the 6-byte
/// prefix `check_inflate_bytes` reads.
pub fn seed_inputs() -> Vec<Vec<u8>> {
    use relay_proto::hostile_chunks as h;
    let mut valid = Deflater::new().expect("compressor");
    let text = h::text(70_000);
    let mut good = valid.chunk(&text[..65_536], 3).expect("compress");
    good.extend(Deflater::plain(&text[65_536..]));
    let mut seeds = vec![(good, text.len() as u64)];
    seeds.extend([
        h::bomb(),
        h::short_frame(),
        h::trailing_bytes(),
        h::cut_frame(),
        h::corrupt_frame(),
        h::wide_window(),
        h::needs_dictionary(),
        h::unknown_kind(),
        h::lying_plain(),
    ]);
    seeds
        .into_iter()
        .map(|(wire, size)| {
            let mut input = (size as u32).to_be_bytes().to_vec();
            input.extend_from_slice(&4095u16.to_be_bytes());
            input.extend_from_slice(&wire);
            debug_assert!(wire.len() >= CHUNK_HEADER_LEN);
            input
        })
        .collect()
}
