//! Whether and how hard to compress each 1 MiB chunk (`--compress`), as a
//! pure decision fed with what the sender measured: the client's for an
//! upload (`relay-client`'s `transfer::wire`, on its reader thread ahead of
//! the sender), the relay's for a download (`relay-server`'s
//! `transfer::deflating`, before a range is written). The bytes themselves
//! are encoded by `chunk::Deflater`, so compressing and sending overlap.
//!
//! The rule (`auto`):
//! - **Does it shrink?** The file's first chunk is compressed as a sample; a
//!   chunk whose frame is not below `SHRINKS` of its bytes goes plain (always:
//!   in `zstd` mode too), and in `auto` the next `PROBE_EVERY - 1` chunks go
//!   plain without trying. Then one chunk is sampled again, so a file that
//!   turns compressible later (a tar of mixed files) is noticed within 16 MiB,
//!   and already-compressed data costs one trial per 16 MiB.
//! - **A sample's first look is a spread of its bytes.** In `auto`, until a
//!   chunk has shrunk, a chunk larger than `SAMPLE_BYTES` is first tried on
//!   `SAMPLE_PIECES` pieces spread evenly over it (`sample_ranges`), put
//!   together; if they do not shrink, the chunk goes plain as above without
//!   compressing the rest. Every small file starts with a sample, so
//!   already-compressed data costs a sample, not a whole chunk's compression.
//!   Spread, not a prefix: a disk image's chunk that opens with random bytes
//!   and goes on in zeros still shrinks. A sample that shrinks costs its
//!   compression again, at most a quarter of a 64 KiB chunk.
//! - **Does the compressor keep up with the link?** Each compressed chunk's
//!   compression time `c` is compared with the time `s` the link takes to
//!   carry its frame at the connection's current pace (the relay
//!   controller's bottleneck estimate, else the congestion window over the
//!   round trip; the sender measures it). `c > s`: the compressor, not the
//!   link, sets the pace, so step down a level (3 → 2 → 1). At level 1 it
//!   still pays while `c < s / r` (r = wire/raw: sending the chunk plain would
//!   take `s / r`); otherwise the next `PROBE_EVERY - 1` chunks go plain. With
//!   headroom (`c < UP_SHARE × s`) it steps up, to `MAX_LEVEL` at most, but not
//!   within `PROBE_EVERY` chunks of a step down (so a level just too slow for
//!   the link is tried once per 16 MiB, not every other chunk).
//! - Why up to 5: on a link of a few hundred Mbit/s level 5 still keeps up
//!   and shrinks text-like data noticeably more than level 3, while levels 6
//!   and 7 cost up to twice its time for little more
//!   (docs/bench/compression/levels/).
//!
//! So compression never makes a transfer slower than `off` by more than the
//! one-chunk trials, and on a slow link it uses the level the link leaves time for.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::chunk::DEFAULT_LEVEL;

/// What the user asked for (`--compress`; a download's `Fetch.compress`
/// carries it to the relay, which compresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Compress where it pays: per chunk, at a level the link leaves time for.
    #[default]
    Auto,
    /// Compress every chunk that shrinks, at the start level.
    Zstd,
    /// Send every byte as it is (and do not announce compression).
    Off,
}

/// How the next chunk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Plain,
    Zstd { level: i32 },
}

/// A chunk pays for its compression if its frame is below this share of its bytes.
pub const SHRINKS: f64 = 0.95;
/// Chunks between samples of data that did not shrink (or was too slow to shrink).
pub const PROBE_EVERY: u64 = 16;
/// What a sample is first tried on: 16 KiB of sequencer reads or logs
/// already shrink well below `SHRINKS`.
pub const SAMPLE_BYTES: usize = 16 * 1024;
/// In this many pieces, spread evenly over the chunk.
pub const SAMPLE_PIECES: usize = 4;
const MIN_LEVEL: i32 = 1;
/// The highest level a link with headroom steps up to.
pub const MAX_LEVEL: i32 = 5;
/// Step up only while a chunk compresses in this share of its sending time:
/// the next level costs 1.2-1.6× the time (zstd 3 → 4 → 5 on sequencer
/// reads), so below 3/4 a step up rarely lands above the link's time.
const UP_SHARE: f64 = 0.75;

/// One compressed chunk, as measured.
#[derive(Debug, Clone, Copy)]
pub struct Trial {
    pub raw: usize,
    pub wire: usize,
    /// Seconds spent compressing it.
    pub compress_s: f64,
}

#[derive(Debug, Clone)]
pub struct Policy {
    mode: Mode,
    level: i32,
    /// Index of the next chunk.
    next: u64,
    /// Chunks before this index go plain without a trial.
    plain_until: u64,
    /// No step up before this chunk index (set by a step down).
    calm_until: u64,
    /// A chunk shrank since the start or the last rest: no sample trials.
    shrinking: bool,
}

impl Policy {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            level: DEFAULT_LEVEL,
            next: 0,
            plain_until: 0,
            calm_until: 0,
            shrinking: false,
        }
    }

    /// Which of a chosen chunk's `raw_len` bytes to try first (`auto`, until a
    /// chunk shrank): `SAMPLE_PIECES` ranges of `SAMPLE_BYTES` in all, one at
    /// the start of each quarter; `None`: compress the chunk whole.
    pub fn sample_ranges(&self, raw_len: usize) -> Option<[Range<usize>; SAMPLE_PIECES]> {
        if self.mode != Mode::Auto || self.shrinking || raw_len <= SAMPLE_BYTES {
            return None;
        }
        let piece = SAMPLE_BYTES / SAMPLE_PIECES;
        Some(std::array::from_fn(|i| {
            let start = i * raw_len / SAMPLE_PIECES;
            start..start + piece
        }))
    }

    /// What the sample (`sample_ranges`) gave; true: compress the whole chunk.
    /// A sample that does not shrink rests the policy as a chunk would. One
    /// that shrinks changes nothing: the whole chunk's `record` sets the pace.
    pub fn record_sample(&mut self, t: Trial) -> bool {
        let shrinks = t.wire < t.raw && (t.wire as f64) < SHRINKS * t.raw as f64;
        if !shrinks {
            self.rest();
        }
        shrinks
    }

    /// The level compressed chunks use now.
    pub fn level(&self) -> i32 {
        self.level
    }

    /// How the next chunk goes.
    pub fn choose(&mut self) -> Choice {
        let index = self.next;
        self.next += 1;
        match self.mode {
            Mode::Off => Choice::Plain,
            Mode::Auto if index < self.plain_until => Choice::Plain,
            Mode::Auto | Mode::Zstd => Choice::Zstd { level: self.level },
        }
    }

    /// What the last chosen chunk's compression gave, and how long the link
    /// takes to carry its frame (`send_s`, None while unknown).
    pub fn record(&mut self, t: Trial, send_s: Option<f64>) {
        if self.mode != Mode::Auto || t.raw == 0 {
            return;
        }
        let ratio = t.wire as f64 / t.raw as f64;
        if ratio >= SHRINKS {
            self.rest();
            return;
        }
        self.shrinking = true;
        let Some(s) = send_s else {
            return;
        };
        let c = t.compress_s;
        if c > s {
            if self.level > MIN_LEVEL {
                self.level -= 1;
                self.calm_until = self.next + PROBE_EVERY - 1;
            } else if c >= s / ratio {
                // Even the fastest level takes longer than the plain bytes would.
                self.rest();
            }
        } else if c < UP_SHARE * s && self.level < MAX_LEVEL && self.next >= self.calm_until {
            self.level += 1;
        }
    }

    /// Plain until the next sample.
    fn rest(&mut self) {
        self.plain_until = self.next + PROBE_EVERY - 1;
        self.shrinking = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(ratio: f64, compress_s: f64) -> Trial {
        Trial {
            raw: 1 << 20,
            wire: ((1 << 20) as f64 * ratio) as usize,
            compress_s,
        }
    }

    /// Runs `n` chunks, each compressed one answering `trial`; returns the choices.
    fn run(p: &mut Policy, n: usize, t: Trial, send_s: Option<f64>) -> Vec<Choice> {
        (0..n)
            .map(|_| {
                let c = p.choose();
                if matches!(c, Choice::Zstd { .. }) {
                    p.record(t, send_s);
                }
                c
            })
            .collect()
    }

    fn zstd_count(c: &[Choice]) -> usize {
        c.iter()
            .filter(|c| matches!(c, Choice::Zstd { .. }))
            .count()
    }

    #[test]
    fn off_never_compresses_and_zstd_always_tries() {
        let mut off = Policy::new(Mode::Off);
        assert_eq!(zstd_count(&run(&mut off, 64, trial(0.2, 0.0), None)), 0);
        let mut z = Policy::new(Mode::Zstd);
        // Incompressible or slow: zstd mode still tries every chunk, at its level.
        assert_eq!(
            zstd_count(&run(&mut z, 64, trial(1.0, 1.0), Some(0.001))),
            64
        );
        assert_eq!(z.level(), DEFAULT_LEVEL);
    }

    #[test]
    fn incompressible_data_is_sampled_once_per_probe_interval() {
        let mut p = Policy::new(Mode::Auto);
        let c = run(&mut p, 160, trial(0.999, 0.001), None);
        assert_eq!(zstd_count(&c), 10, "one trial per {PROBE_EVERY} chunks");
        assert_eq!(c[0], Choice::Zstd { level: 3 });
        assert_eq!(c[1], Choice::Plain);
        assert_eq!(c[16], Choice::Zstd { level: 3 });
    }

    #[test]
    fn samples_are_tried_on_a_spread_until_a_chunk_shrinks() {
        let big = 64 * 1024;
        let mut p = Policy::new(Mode::Auto);
        let spread = p.sample_ranges(big).expect("a file's first chunk");
        let q = big / 4;
        let piece = SAMPLE_BYTES / SAMPLE_PIECES;
        assert_eq!(spread, std::array::from_fn(|i| i * q..i * q + piece));
        // The pieces never overlap and stay inside the chunk, down to the
        // smallest chunk sampled.
        let small = p.sample_ranges(SAMPLE_BYTES + 1).expect("just above");
        assert!(
            small.windows(2).all(|w| w[0].end <= w[1].start),
            "{small:?}"
        );
        assert!(small[SAMPLE_PIECES - 1].end <= SAMPLE_BYTES + 1);
        assert_eq!(p.sample_ranges(SAMPLE_BYTES), None, "small: tried whole");
        // A sample that shrinks leaves the level and the sampling as they were.
        assert!(p.record_sample(trial(0.3, 0.0)));
        assert_eq!(p.level(), DEFAULT_LEVEL);
        assert!(p.sample_ranges(big).is_some());
        // One that does not rests the policy like a whole chunk.
        assert!(!p.record_sample(trial(0.97, 0.0)));
        assert_eq!(p.choose(), Choice::Plain);
        let mut p = Policy::new(Mode::Auto);
        run(&mut p, 1, trial(0.3, 0.001), None);
        assert_eq!(
            p.sample_ranges(big),
            None,
            "shrinking data: compressed whole"
        );
        // Data that stops shrinking rests; its next sample is a spread again.
        run(&mut p, 1, trial(0.99, 0.001), None);
        assert!(p.sample_ranges(big).is_some());
        // `zstd` compresses every chunk whole: it keeps whatever shrinks.
        assert_eq!(Policy::new(Mode::Zstd).sample_ranges(big), None);
        assert_eq!(Policy::new(Mode::Off).sample_ranges(big), None);
    }

    #[test]
    fn data_that_turns_compressible_is_noticed_at_the_next_sample() {
        let mut p = Policy::new(Mode::Auto);
        run(&mut p, 16, trial(1.0, 0.001), None);
        let c = run(&mut p, 16, trial(0.3, 0.001), None);
        assert!(c.iter().all(|c| matches!(c, Choice::Zstd { .. })), "{c:?}");
    }

    /// Like `run`, with each level's compression time from `cost(level)`.
    fn run_levels(p: &mut Policy, n: usize, cost: impl Fn(i32) -> f64, send_s: f64) -> Vec<i32> {
        (0..n)
            .map(|_| match p.choose() {
                Choice::Zstd { level } => {
                    p.record(trial(0.35, cost(level)), Some(send_s));
                    level
                }
                Choice::Plain => 0,
            })
            .collect()
    }

    #[test]
    fn a_slow_link_steps_up_to_the_level_it_leaves_time_for() {
        let mut p = Policy::new(Mode::Auto);
        // 1 MiB of reads at 200 Mbit/s, 35 % on the wire: ~16 ms per chunk to
        // send; level 3 takes ~5 ms, 4 ~6 ms, 5 ~10 ms.
        let cost = |l: i32| [0.0, 0.003, 0.004, 0.005, 0.006, 0.011][l as usize];
        let levels = run_levels(&mut p, 200, cost, 0.016);
        assert_eq!(&levels[..3], &[3, 4, 5]);
        assert!(levels[3..].iter().all(|&l| l == MAX_LEVEL), "{levels:?}");
        // Never above MAX_LEVEL, however fast the compressor.
        let mut p = Policy::new(Mode::Auto);
        run(&mut p, 64, trial(0.3, 0.0001), Some(0.013));
        assert_eq!(p.level(), MAX_LEVEL);
    }

    #[test]
    fn a_level_just_too_slow_is_retried_once_per_probe_interval() {
        let mut p = Policy::new(Mode::Auto);
        // Level 5 takes 20 ms against 16 ms to send; level 4 has headroom.
        let cost = |l: i32| [0.0, 0.003, 0.004, 0.005, 0.006, 0.020][l as usize];
        let levels = run_levels(&mut p, 160, cost, 0.016);
        let too_slow = levels.iter().filter(|&&l| l == 5).count();
        assert!(too_slow <= 1 + 160 / PROBE_EVERY as usize, "{levels:?}");
        assert!(levels[2..].iter().all(|&l| l == 4 || l == 5), "{levels:?}");
    }

    #[test]
    fn nothing_is_judged_before_the_link_is_known() {
        let mut p = Policy::new(Mode::Auto);
        let c = run(&mut p, 64, trial(0.5, 0.004), None);
        assert_eq!(zstd_count(&c), 64);
        assert_eq!(p.level(), DEFAULT_LEVEL);
    }

    #[test]
    fn a_fast_link_steps_down_then_goes_plain() {
        let mut p = Policy::new(Mode::Auto);
        // Compression takes 8× the link's time per chunk: down to level 1,
        // and there plain beats it (0.004 ≥ 0.0005 / 0.5).
        let c = run(&mut p, 64, trial(0.5, 0.004), Some(0.0005));
        assert_eq!(p.level(), 1);
        assert!(zstd_count(&c) <= 3 + 64 / PROBE_EVERY as usize, "{c:?}");
    }

    #[test]
    fn level_one_stays_while_it_beats_plain() {
        let mut p = Policy::new(Mode::Auto);
        run(&mut p, 4, trial(0.2, 0.002), Some(0.001));
        // c = 2 ms > s = 1 ms, but plain would take s / r = 5 ms: keep level 1.
        let c = run(&mut p, 64, trial(0.2, 0.002), Some(0.001));
        assert_eq!(p.level(), 1);
        assert_eq!(zstd_count(&c), 64);
    }

    #[test]
    fn headroom_steps_back_up_after_a_calm_interval() {
        let mut p = Policy::new(Mode::Auto);
        run(&mut p, 4, trial(0.3, 0.01), Some(0.005));
        assert_eq!(p.level(), 1);
        run(&mut p, 8, trial(0.3, 0.001), Some(0.005));
        assert_eq!(p.level(), 1, "no step up within PROBE_EVERY of a step down");
        run(&mut p, 16, trial(0.3, 0.001), Some(0.005));
        assert_eq!(p.level(), MAX_LEVEL);
    }
}
