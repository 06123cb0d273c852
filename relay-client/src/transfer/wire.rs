//! A file's chunks as they go on the wire after a `Start{encoding: zstd}`:
//! each chunk encoded on the reader thread (`source::read_range_with`) as
//! `compress::Policy` decides, with the link's pace (a `Meter` the sender keeps
//! up to date from the connection) fed back to that policy. Without
//! compression the chunks go as they are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use relay_proto::chunk::Deflater;

use crate::transfer::compress::{Choice, Mode, Policy, SAMPLE_BYTES, Trial};

/// One chunk of the file: its bytes (hashed by the sender) and what goes on
/// the wire for them, `head` then `wire`.
pub struct Piece {
    pub raw: Bytes,
    /// A plain chunk's header, written before `raw` itself (as `wire`), so
    /// data that does not shrink is never copied (the copy would cost a fast
    /// link's CPU); empty otherwise.
    pub head: Bytes,
    pub wire: Bytes,
}

impl Piece {
    /// Bytes on the wire for this chunk.
    pub fn wire_len(&self) -> usize {
        self.head.len() + self.wire.len()
    }
}

/// The link's pace as the encoder needs it: how fast the connection sends,
/// from its congestion controller (the relay controller's bottleneck estimate;
/// before it has one, or with another controller, the window over the
/// smoothed round trip, which errs high), so the encoder can tell whether
/// compressing a chunk takes longer than the link would take to carry it.
///
/// Not the time a write to the stream blocks: QUIC's send buffer and the
/// relay's windows (64 MiB per stream) take a chunk at once for the first
/// tens of MiB, so a blocked-write measure says "the link is fast" exactly
/// while it is slow, and `auto` would step down to plain on a slow link
/// (docs/bench/compression/).
#[derive(Debug, Default)]
pub struct Meter {
    /// f64 bytes per second as bits; 0 until the sender first looked.
    rate: AtomicU64,
}

impl Meter {
    /// The connection's state after a chunk went to QUIC (and `--max-rate`,
    /// which holds the sender below what the window allows).
    pub fn observe(&self, conn: &quinn::Connection) {
        // The window over the round trip is about twice the bottleneck rate
        // (the window holds a round trip's bytes at twice the rate): with it,
        // a link would look twice as fast and the level stay too low.
        let window = relay_transport::congestion::bottleneck_rate(conn)
            .map(|b| b as f64)
            .or_else(|| {
                let path = conn.stats().path;
                link_rate(path.cwnd, path.rtt)
            });
        let rate = match (window, crate::relay::rate::cap_bytes_per_s()) {
            (Some(w), Some(cap)) => Some(w.min(cap)),
            (w, cap) => w.or(cap),
        };
        if let Some(rate) = rate {
            // Written by the one sender only: a plain store is enough.
            self.rate.store(rate.to_bits(), Ordering::Relaxed);
        }
    }

    /// Seconds the link takes to carry `wire_bytes` at its current pace, or
    /// None while the sender has not looked yet.
    fn link_s(&self, wire_bytes: usize) -> Option<f64> {
        let rate = f64::from_bits(self.rate.load(Ordering::Relaxed));
        (rate > 0.0).then(|| wire_bytes as f64 / rate)
    }
}

/// Bytes per second a congestion window allows over a round trip. It errs
/// high (a BBR-style window holds up to twice the path's bytes in flight), so
/// the encoder errs toward a lower level, never toward holding the link up.
fn link_rate(window: u64, rtt: Duration) -> Option<f64> {
    let rtt = rtt.as_secs_f64();
    (window > 0 && rtt > 0.0).then(|| window as f64 / rtt)
}

/// The reader thread's encoder: each chunk plain or compressed, as `mode` and
/// the measured pace decide.
pub fn encoder(
    mode: Mode,
    meter: Arc<Meter>,
) -> std::io::Result<impl FnMut(Bytes) -> std::io::Result<Piece> + Send + 'static> {
    let mut deflater = Lent::take()?;
    let mut policy = Policy::new(mode.into());
    Ok(move |raw: Bytes| {
        let Choice::Zstd { level } = policy.choose() else {
            return Ok(plain(raw));
        };
        // Compresses `bytes` at the chosen level: the frame (None: it would
        // not shrink) and what it cost.
        let mut zstd = |bytes: &[u8]| {
            let t0 = Instant::now();
            let frame = deflater
                .get()?
                .compressed(bytes, level)
                .map_err(std::io::Error::other)?;
            let trial = Trial {
                raw: bytes.len(),
                wire: frame.as_ref().map_or(bytes.len(), Vec::len),
                compress_s: t0.elapsed().as_secs_f64(),
            };
            std::io::Result::Ok((frame, trial))
        };
        if let Some(ranges) = policy.sample_ranges(raw.len()) {
            let mut sample = Vec::with_capacity(SAMPLE_BYTES);
            for r in ranges {
                sample.extend_from_slice(&raw[r]);
            }
            let (_, trial) = zstd(&sample)?;
            if !policy.record_sample(trial) {
                return Ok(plain(raw));
            }
        }
        let (frame, trial) = zstd(&raw)?;
        policy.record(trial, meter.link_s(trial.wire));
        Ok(match frame {
            Some(frame) => Piece {
                raw,
                head: Bytes::new(),
                wire: Bytes::from(frame),
            },
            None => plain(raw),
        })
    })
}

/// A chunk sent as it is: its header, then the bytes without a copy.
fn plain(raw: Bytes) -> Piece {
    Piece {
        head: Bytes::copy_from_slice(&Deflater::plain_header(raw.len())),
        wire: raw.clone(),
        raw,
    }
}

/// Compressors kept between files. Making one (zstd's context and its
/// tables) cost more than compressing a 4 KiB file's sample chunk
/// (docs/PERFORMANCE.md, "CPU per small file"); a compressor carries no data
/// from one frame to the next, and `Deflater::chunk` sets its level each time
/// it differs, so any file may take any spare one.
static SPARE: Mutex<Vec<Deflater>> = Mutex::new(Vec::new());
/// Spares kept at most: about the reader threads that encode at once.
const SPARES_KEPT: usize = 16;

/// Drops every kept compressor (a watch gone quiet gives their memory back,
/// up to 50 MB, rather than hold it until its next file).
pub fn drop_spare_compressors() {
    if let Ok(mut spare) = SPARE.lock() {
        *spare = Vec::new();
    }
}

/// A compressor lent to one file's encoder, given back when the encoder ends.
struct Lent(Option<Deflater>);

impl Lent {
    fn take() -> std::io::Result<Self> {
        let spare = SPARE.lock().ok().and_then(|mut s| s.pop());
        match spare {
            Some(d) => Ok(Self(Some(d))),
            None => Ok(Self(Some(Deflater::new().map_err(std::io::Error::other)?))),
        }
    }

    /// Always the compressor: it leaves only when the encoder is dropped.
    fn get(&mut self) -> std::io::Result<&mut Deflater> {
        self.0
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the compressor was given back"))
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let (Some(d), Ok(mut spare)) = (self.0.take(), SPARE.lock())
            && spare.len() < SPARES_KEPT
        {
            spare.push(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_pace_is_the_window_over_the_round_trip() {
        // 5 MB in flight over 200 ms: 25 MB/s, so 1 MiB takes ~42 ms.
        let rate = link_rate(5_000_000, Duration::from_millis(200));
        assert_eq!(rate, Some(25_000_000.0));
        assert_eq!(link_rate(0, Duration::from_millis(200)), None);
        assert_eq!(link_rate(5_000_000, Duration::ZERO), None);
    }

    #[test]
    fn nothing_is_known_before_the_sender_looked() {
        let m = Meter::default();
        assert_eq!(m.link_s(1 << 20), None);
        m.rate.store(25_000_000f64.to_bits(), Ordering::Relaxed);
        let s = m.link_s(250_000).unwrap_or_default();
        assert!((s - 0.01).abs() < 1e-9, "{s}");
    }
}
