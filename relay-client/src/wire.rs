//! A file's chunks as they go on the wire after a `Start{encoding: zstd}`:
//! each chunk encoded on the reader thread (`source::read_range_with`) as
//! `compress::Policy` decides, and the sender's pace fed back to that policy
//! through a `Meter`. Without compression the chunks go as they are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use relay_proto::chunk::Deflater;

use crate::compress::{Choice, Mode, Policy, Trial};

/// One chunk of the file: its bytes (hashed by the sender) and what goes on
/// the wire for them.
pub struct Piece {
    pub raw: Bytes,
    pub wire: Bytes,
}

/// How long the sender was held per chunk (an exponentially weighted mean, so
/// it follows a link that changes): the link's pace as the encoder sees it.
#[derive(Debug, Default)]
pub struct Meter {
    /// f64 seconds as bits; 0 until the first chunk went out.
    send_s: AtomicU64,
}

impl Meter {
    /// One chunk's wire bytes took `took` to hand to QUIC.
    pub fn sent(&self, took: Duration) {
        let now = took.as_secs_f64();
        let prev = f64::from_bits(self.send_s.load(Ordering::Relaxed));
        let next = if prev == 0.0 {
            now
        } else {
            0.8 * prev + 0.2 * now
        };
        // Written by the one sender only: a plain store is enough.
        self.send_s
            .store(next.max(f64::MIN_POSITIVE).to_bits(), Ordering::Relaxed);
    }

    fn send_s(&self) -> Option<f64> {
        let s = f64::from_bits(self.send_s.load(Ordering::Relaxed));
        (s > 0.0).then_some(s)
    }
}

/// The reader thread's encoder: each chunk plain or compressed, as `mode` and
/// the measured pace decide.
pub fn encoder(
    mode: Mode,
    meter: Arc<Meter>,
) -> std::io::Result<impl FnMut(Bytes) -> std::io::Result<Piece> + Send + 'static> {
    let mut deflater = Lent::take()?;
    let mut policy = Policy::new(mode);
    Ok(move |raw: Bytes| {
        let wire = match policy.choose() {
            Choice::Plain => Deflater::plain(&raw),
            Choice::Zstd { level } => {
                let t0 = Instant::now();
                let wire = deflater
                    .get()?
                    .chunk(&raw, level)
                    .map_err(std::io::Error::other)?;
                let trial = Trial {
                    raw: raw.len(),
                    wire: wire.len(),
                    compress_s: t0.elapsed().as_secs_f64(),
                };
                policy.record(trial, meter.send_s());
                wire
            }
        };
        Ok(Piece {
            raw,
            wire: Bytes::from(wire),
        })
    })
}

/// Compressors kept between files. Making one (zstd's context and its
/// tables) cost more than compressing a 4 KiB file's sample chunk
/// (docs/PERFORMANCE.md, "CPU per small file"); a compressor carries no data
/// from one frame to the next, and `Deflater::chunk` sets its level each time
/// it differs, so any file may take any spare one.
static SPARE: Mutex<Vec<Deflater>> = Mutex::new(Vec::new());
/// Spares kept at most: about the reader threads that encode at once.
const SPARES_KEPT: usize = 16;

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
