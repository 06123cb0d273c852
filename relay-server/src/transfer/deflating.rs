//! A download's ranges as compressed chunks: when the client asked
//! (`Fetch.compress`) on a connection that agreed on compression and the blob
//! is worth a try (`relay_proto::compressible`), each range the driver read
//! goes out as one section of whole chunks (`relay_proto::chunk`), each 1 MiB
//! of the blob plain or one zstd frame, as `relay_proto::compress::Policy`
//! decides with the pace this connection sends at: the rule upload's client
//! follows, so compression does not make the relay the bottleneck on a fast
//! link (the level steps down, then chunks go plain) and a chunk that does not
//! shrink goes as it is.
//!
//! What it costs, from the same budget as the ranges: `ENCODER_BYTES` for the
//! compressor and one range's frames, taken (without waiting) when the
//! Source is decided; with no memory free, the blob goes plain. Compression
//! runs on a blocking thread, one range at a time per download, in the
//! blob's order, while the next ranges are read.

use std::time::{Duration, Instant};

use bytes::Bytes;
use relay_proto::chunk::{DeflateError, Deflater, MAX_CHUNK_RAW};
use relay_proto::compress::{Choice, Mode, Policy, SAMPLE_BYTES, Trial};
use relay_proto::protocol::{Code, Failure, Fetch};
use relay_storage::read::ReadProperties;
use relay_storage::staging::Budget;

use crate::connection::link::Link;
use crate::state::Shared;
use crate::state::shares::Held;

/// Memory a compressing download holds beyond its ranges, for chunks of
/// 1 MiB: zstd's context at the highest level the policy uses
/// (`compress::MAX_LEVEL`, window `chunk::WINDOW_LOG_MAX`) and one chunk's
/// output buffer (`encoder_bytes_cover_what_the_compressor_holds` measures
/// it); a range's frames come on top (`extra_bytes`).
pub const ENCODER_BYTES: u64 = 5 << 20;

/// The same for a blob whose chunks are at most `chunk` bytes: zstd sizes its
/// context and window to the input, so a small blob's compressor is small
/// (64 KiB and 21 bytes a chunk byte cover it with room, measured by the
/// same test), and a budget full of small downloads still compresses them.
pub fn encoder_bytes(chunk: u64) -> u64 {
    ENCODER_BYTES.min((64 << 10) + 21 * chunk)
}

/// Whether this download's sections go as chunks, and how hard: the client
/// asked (`asked`), the handshake agreed (`agreed`) and the blob is worth a
/// try (`compressible::worth_trying`, on the `remaining` bytes to send).
pub fn choose(
    asked: Option<Mode>,
    agreed: bool,
    blob: &str,
    content_type: Option<&str>,
    remaining: u64,
) -> Option<Mode> {
    let mode = asked.filter(|m| *m != Mode::Off)?;
    let worth = relay_proto::compressible::worth_trying(blob, content_type, remaining);
    (agreed && worth).then_some(mode)
}

/// Budget a compressing download of `remaining` bytes takes beyond its
/// ranges of `range` bytes: the compressor, and the frames of the range being
/// sent (together smaller than the range: a frame that does not shrink is not
/// kept).
pub fn extra_bytes(range: u64, remaining: u64) -> u64 {
    let chunk = remaining.min(u64::from(MAX_CHUNK_RAW));
    encoder_bytes(chunk) + range.min(remaining)
}

/// One range as it goes on the wire: the pieces written after its `Data`
/// frame, `wire_len` bytes in all, carrying `raw_len` of the blob's bytes.
pub struct Section {
    pub pieces: Vec<Bytes>,
    pub wire_len: u64,
    pub raw_len: u64,
}

impl Section {
    /// The range's bytes as they are (a download that does not compress).
    pub fn plain(raw: Bytes) -> Self {
        let n = raw.len() as u64;
        Self {
            pieces: vec![raw],
            wire_len: n,
            raw_len: n,
        }
    }
}

/// A download that compresses: its encoder, the connection whose pace it
/// follows, and the budget memory it holds until it ends.
pub struct Compressing {
    /// Out on a blocking thread while a range is compressed.
    encoder: Option<Encoder>,
    conn: quinn::Connection,
    /// `--max-rate`, in bytes per second.
    cap: Option<f64>,
    _held: Held,
}

impl Compressing {
    /// For `fetch`, if it goes compressed (`choose`) and its memory is free
    /// now (`start`); `remaining`: the bytes to send.
    pub async fn for_fetch(
        shared: &Shared,
        link: &Link,
        share: &Budget,
        fetch: &Fetch,
        props: &ReadProperties,
        remaining: u64,
        range: u64,
    ) -> Option<Self> {
        let ct = props.content_type.as_deref();
        let mode = choose(fetch.compress, link.zstd, &fetch.blob, ct, remaining)?;
        let bytes = extra_bytes(range, remaining);
        Self::start(shared, share, mode, &link.conn, bytes).await
    }

    /// If the caller's share and the relay's budget have `bytes` free now
    /// (`extra_bytes`): a busy relay sends the blob plain rather than hold
    /// the download up (or let one client's compression wait out others'
    /// ranges).
    pub async fn start(
        shared: &Shared,
        share: &Budget,
        mode: Mode,
        conn: &quinn::Connection,
        bytes: u64,
    ) -> Option<Self> {
        let take = shared.hold(share, bytes);
        // Polled once: granted at once or not at all.
        let held = tokio::time::timeout(Duration::ZERO, take)
            .await
            .ok()
            .flatten()?;
        match Encoder::new(mode) {
            Ok(encoder) => Some(Self {
                encoder: Some(encoder),
                conn: conn.clone(),
                cap: shared.admission.max_rate_mbit().map(|m| m * 1e6 / 8.0),
                _held: held,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "no compressor; the blob goes plain");
                None
            }
        }
    }

    /// One range as a section of chunks, compressed on a blocking thread at
    /// the connection's current pace.
    pub async fn section(&mut self, raw: Bytes) -> Result<Section, Failure> {
        let Some(mut encoder) = self.encoder.take() else {
            return Err(Failure::new(Code::Internal, "the compressor was lost"));
        };
        let rate = match (send_rate(&self.conn), self.cap) {
            (Some(r), Some(cap)) => Some(r.min(cap)),
            (r, cap) => r.or(cap),
        };
        let (encoder, section) = tokio::task::spawn_blocking(move || {
            let section = encoder.section(&raw, rate);
            (encoder, section)
        })
        .await
        .map_err(|e| Failure::new(Code::Internal, format!("compressing a range: {e}")))?;
        self.encoder = Some(encoder);
        section.map_err(|e| Failure::new(Code::Internal, format!("compressing a range: {e}")))
    }
}

/// The compressor and the policy of one download, moved onto a blocking
/// thread for each range.
pub struct Encoder {
    deflater: Deflater,
    policy: Policy,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("level", &self.policy.level())
            .finish()
    }
}

impl Encoder {
    pub fn new(mode: Mode) -> Result<Self, DeflateError> {
        Ok(Self {
            deflater: Deflater::new()?,
            policy: Policy::new(mode),
        })
    }

    /// `raw` (one range, in the blob's order) as whole chunks. `rate`: the
    /// bytes per second the connection sends at, when known.
    pub fn section(&mut self, raw: &Bytes, rate: Option<f64>) -> Result<Section, DeflateError> {
        let mut pieces = Vec::new();
        let mut wire_len = 0u64;
        let mut at = 0;
        while at < raw.len() {
            let end = raw.len().min(at + MAX_CHUNK_RAW as usize);
            let chunk = raw.slice(at..end);
            match self.chunk(&chunk, rate)? {
                Some(frame) => {
                    wire_len += frame.len() as u64;
                    pieces.push(frame);
                }
                None => {
                    // As it is: a header, then the range's own bytes, uncopied.
                    let head = Bytes::copy_from_slice(&Deflater::plain_header(chunk.len()));
                    wire_len += (head.len() + chunk.len()) as u64;
                    pieces.push(head);
                    pieces.push(chunk);
                }
            }
            at = end;
        }
        Ok(Section {
            pieces,
            wire_len,
            raw_len: raw.len() as u64,
        })
    }

    /// One chunk as a zstd chunk (header and frame), or None: it goes plain.
    fn chunk(&mut self, raw: &[u8], rate: Option<f64>) -> Result<Option<Bytes>, DeflateError> {
        let Choice::Zstd { level } = self.policy.choose() else {
            return Ok(None);
        };
        if let Some(ranges) = self.policy.sample_ranges(raw.len()) {
            let mut sample = Vec::with_capacity(SAMPLE_BYTES);
            for r in ranges {
                sample.extend_from_slice(&raw[r]);
            }
            let (_, trial) = self.trial(&sample, level)?;
            if !self.policy.record_sample(trial) {
                return Ok(None);
            }
        }
        let (frame, trial) = self.trial(raw, level)?;
        let link_s = rate.filter(|r| *r > 0.0).map(|r| trial.wire as f64 / r);
        self.policy.record(trial, link_s);
        Ok(frame.map(|mut f| {
            // The buffer was sized for the worst case; keep only the frame.
            f.shrink_to_fit();
            Bytes::from(f)
        }))
    }

    /// Compresses `bytes` at `level`: the chunk (None: it would not shrink)
    /// and what it cost.
    fn trial(
        &mut self,
        bytes: &[u8],
        level: i32,
    ) -> Result<(Option<Vec<u8>>, Trial), DeflateError> {
        let t0 = Instant::now();
        let frame = self.deflater.compressed(bytes, level)?;
        let trial = Trial {
            raw: bytes.len(),
            wire: frame.as_ref().map_or(bytes.len(), Vec::len),
            compress_s: t0.elapsed().as_secs_f64(),
        };
        Ok((frame, trial))
    }
}

/// The pace a connection sends at, in bytes per second: the relay
/// controller's bottleneck estimate, else (another controller, or before it
/// has one) the congestion window over the round trip, which errs high, so
/// the policy errs toward a lower level, never toward holding the link up.
/// (`--max-rate` bounds it further: on a short path the window lets the
/// relay run above its cap, and the estimate with it.)
pub fn send_rate(conn: &quinn::Connection) -> Option<f64> {
    relay_transport::congestion::bottleneck_rate(conn)
        .map(|b| b as f64)
        .or_else(|| {
            let path = conn.stats().path;
            window_rate(path.cwnd, path.rtt)
        })
}

fn window_rate(window: u64, rtt: std::time::Duration) -> Option<f64> {
    let rtt = rtt.as_secs_f64();
    (window > 0 && rtt > 0.0).then(|| window as f64 / rtt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::hostile_chunks::text;
    use relay_proto::inflate::Inflater;

    /// The wire bytes of `s`, inflated as the client does.
    fn inflate(s: &Section) -> Vec<u8> {
        let wire: Vec<u8> = s.pieces.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(wire.len() as u64, s.wire_len);
        let mut inf = Inflater::new(s.raw_len);
        let mut out = vec![0u8; s.raw_len as usize];
        let (mut pos, mut got) = (0, 0);
        while !inf.is_done() {
            let step = inf.step(&wire[pos..], &mut out[got..]).expect("inflates");
            assert!(step.consumed + step.produced > 0, "stuck at {pos}");
            pos += step.consumed;
            got += step.produced;
        }
        assert_eq!(pos, wire.len(), "nothing after the last chunk");
        out
    }

    #[test]
    fn only_an_agreed_request_for_a_blob_worth_it_compresses() {
        let auto = Some(Mode::Auto);
        // (asked, agreed, blob, content type, remaining, chosen)
        type Case = (
            Option<Mode>,
            bool,
            &'static str,
            Option<&'static str>,
            u64,
            Option<Mode>,
        );
        let cases: &[Case] = &[
            (auto, true, "a.log", Some("text/plain"), 1 << 20, auto),
            (
                Some(Mode::Zstd),
                true,
                "a.log",
                None,
                1 << 20,
                Some(Mode::Zstd),
            ),
            (auto, false, "a.log", None, 1 << 20, None),
            (None, true, "a.log", None, 1 << 20, None),
            (Some(Mode::Off), true, "a.log", None, 1 << 20, None),
            (auto, true, "a.jpg", None, 1 << 20, None),
            (auto, true, "a", Some("video/mp4"), 1 << 20, None),
            // A resume with a few bytes left: not worth a compressor.
            (auto, true, "a.log", None, 100, None),
        ];
        for &(asked, agreed, blob, ct, remaining, want) in cases {
            assert_eq!(
                choose(asked, agreed, blob, ct, remaining),
                want,
                "{asked:?} {agreed} {blob} {ct:?} {remaining}"
            );
        }
    }

    #[test]
    fn text_shrinks_noise_goes_plain_and_both_inflate_to_the_range() {
        let mut e = Encoder::new(Mode::Auto).expect("encoder");
        let logs = Bytes::from(text((4 << 20) - 1000));
        let s = e.section(&logs, None).expect("section");
        assert!(
            s.wire_len < s.raw_len / 5,
            "{} of {}",
            s.wire_len,
            s.raw_len
        );
        assert_eq!(s.raw_len, logs.len() as u64);
        assert!(inflate(&s) == logs[..]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Bytes = (0..3 << 20)
            .map(|_| {
                // xorshift64: bytes no compressor shrinks.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect::<Vec<u8>>()
            .into();
        let mut e = Encoder::new(Mode::Auto).expect("encoder");
        let s = e.section(&noise, None).expect("section");
        // Plain: a 9-byte header per MiB, and the range's own bytes, uncopied.
        assert_eq!(s.wire_len, noise.len() as u64 + 3 * 9);
        assert!(s.pieces.iter().any(|p| p.as_ptr() == noise.as_ptr()));
        assert!(inflate(&s) == noise[..]);
        let plain = Section::plain(noise.clone());
        assert_eq!(
            (plain.wire_len, plain.pieces.len()),
            (noise.len() as u64, 1)
        );
    }

    #[test]
    fn a_link_faster_than_the_compressor_gets_plain_chunks() {
        let logs = Bytes::from(text(32 << 20));
        let mut e = Encoder::new(Mode::Auto).expect("encoder");
        // A link that carries any frame in no time: every compression is
        // slower than it; the level steps down to 1, then chunks go plain.
        let s = e.section(&logs, Some(1e18)).expect("section");
        assert_eq!(e.policy.level(), 1);
        let plain_chunks = s.pieces.iter().filter(|p| p.len() == 1 << 20).count();
        assert!(plain_chunks >= 16, "{plain_chunks} of 32 plain");
        assert!(inflate(&s) == logs[..]);
        // `zstd` compresses every chunk that shrinks, whatever the link.
        let mut e = Encoder::new(Mode::Zstd).expect("encoder");
        let s = e.section(&logs, Some(1e18)).expect("section");
        assert!(s.pieces.iter().all(|p| p.len() < 1 << 20));
    }

    #[test]
    fn encoder_bytes_cover_what_the_compressor_holds() {
        let wide: Vec<u8> = (0..MAX_CHUNK_RAW)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 & 0x0f)
            .collect();
        for size in [600, 4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20] {
            // Every level, largest chunk last: what one blob's compressor
            // holds at most (a frame's window is never above its chunk).
            let mut e = Encoder::new(Mode::Zstd).expect("encoder");
            let mut held = 0;
            for level in 1..=relay_proto::compress::MAX_LEVEL {
                for part in [&wide[..size / 2], &wide[..size]] {
                    e.deflater.compressed(part, level).expect("compress");
                    held = held.max(e.deflater.context_bytes());
                }
            }
            // Printed for docs/SECURITY.md (`cargo test -p relay-server encoder_bytes -- --nocapture`).
            eprintln!("zstd compressor up to level 5, chunks of {size} bytes: {held} bytes");
            let scratch = relay_proto::chunk::max_wire_len(size as u32) + 9;
            let bound = encoder_bytes(size as u64);
            assert!(
                held as u64 + scratch <= bound,
                "{size}: {held} + {scratch} > {bound}"
            );
        }
        assert_eq!(encoder_bytes(1 << 20), ENCODER_BYTES);
        assert_eq!(extra_bytes(4 << 20, 1 << 30), ENCODER_BYTES + (4 << 20));
        assert_eq!(extra_bytes(4 << 20, 4096), encoder_bytes(4096) + 4096);
    }

    #[test]
    fn the_window_over_the_round_trip_is_a_rate() {
        let rate = window_rate(5_000_000, std::time::Duration::from_millis(200));
        assert_eq!(rate, Some(25_000_000.0));
        assert_eq!(window_rate(0, std::time::Duration::from_millis(200)), None);
        assert_eq!(window_rate(5, std::time::Duration::ZERO), None);
    }
}
