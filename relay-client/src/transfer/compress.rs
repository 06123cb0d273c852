//! `--compress` as the user types it. The rule that decides per 1 MiB chunk
//! whether and how hard to compress is `relay_proto::compress` (pure, shared
//! with the relay, which compresses downloads by the same rule); this client
//! applies it to uploads on its reader thread (`wire`).

pub use relay_proto::compress::{
    Choice, MAX_LEVEL, PROBE_EVERY, Policy, SAMPLE_BYTES, SAMPLE_PIECES, SHRINKS, Trial,
};

/// What the user asked for (`--compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Compress where it pays: per chunk, at a level the link leaves time for.
    #[default]
    Auto,
    /// Compress every chunk that shrinks, at the start level.
    Zstd,
    /// Send every byte as it is (and do not announce compression).
    Off,
}

impl From<Mode> for relay_proto::compress::Mode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Auto => Self::Auto,
            Mode::Zstd => Self::Zstd,
            Mode::Off => Self::Off,
        }
    }
}
