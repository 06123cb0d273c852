//! Deterministic data sets like what users ship: the compression
//! tests and the WAN-lab bench make them from a seed, so a run is reproducible
//! to the byte and needs no download. How well each compresses is a property
//! of its generator, shown by the bench, not assumed by the tests.

use std::io::Write;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataSet {
    /// Service logs: timestamps, levels, components, request IDs, latencies.
    Logs,
    /// A CSV export: IDs, dates, categories, prices.
    Csv,
    /// FASTQ-like reads: random bases, qualities from a small alphabet.
    Fastq,
    /// A sparse VM image: zeros with a 256 KiB island of random bytes every 4 MiB.
    Sparse,
    /// Random bytes (already-compressed data: media, archives, ciphertext).
    Random,
}

impl DataSet {
    pub const ALL: [DataSet; 5] = [
        DataSet::Logs,
        DataSet::Csv,
        DataSet::Fastq,
        DataSet::Sparse,
        DataSet::Random,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DataSet::Logs => "logs",
            DataSet::Csv => "csv",
            DataSet::Fastq => "fastq",
            DataSet::Sparse => "sparse",
            DataSet::Random => "random",
        }
    }

    /// Writes `size` bytes of this set from `seed`; returns their SHA-256 (hex).
    pub fn write(self, path: &Path, size: u64, seed: u64) -> String {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        }
        let file = std::fs::File::create(path)
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        let mut out = std::io::BufWriter::new(file);
        let mut rng = StdRng::seed_from_u64(seed ^ (self as u64) << 56);
        let mut h = Sha256::new();
        let mut buf = Vec::with_capacity(1 << 20);
        let mut written = 0u64;
        while written < size {
            buf.clear();
            self.fill(&mut rng, &mut buf, written);
            let n = buf.len().min((size - written) as usize);
            h.update(&buf[..n]);
            out.write_all(&buf[..n])
                .unwrap_or_else(|e| panic!("write: {e}"));
            written += n as u64;
        }
        out.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        hex::encode(h.finalize())
    }

    /// About 1 MiB more of the set, which starts at file offset `at`.
    fn fill(self, rng: &mut StdRng, buf: &mut Vec<u8>, at: u64) {
        const LEVELS: [&str; 4] = ["INFO", "INFO", "WARN", "DEBUG"];
        const PARTS: [&str; 5] = ["ingest", "scheduler", "store", "api", "auth"];
        const CITIES: [&str; 6] = ["Oslo", "Lima", "Pune", "Kyiv", "Perth", "Quito"];
        while buf.len() < 1 << 20 {
            let line = match self {
                DataSet::Logs => format!(
                    "2026-12-02T{:02}:{:02}:{:02}.{:03}Z {} {} request_id={:016x} status={} latency_ms={} bytes={}\n",
                    rng.random_range(0..24),
                    rng.random_range(0..60),
                    rng.random_range(0..60),
                    rng.random_range(0..1000),
                    LEVELS[rng.random_range(0..LEVELS.len())],
                    PARTS[rng.random_range(0..PARTS.len())],
                    rng.next_u64() >> 16,
                    [200, 200, 200, 204, 404, 500][rng.random_range(0..6)],
                    rng.random_range(1..900),
                    rng.random_range(0..100_000),
                ),
                DataSet::Csv => format!(
                    "{},2026-{:02}-{:02},{},{},{}.{:02},{}\n",
                    rng.random_range(1_000_000..9_999_999u32),
                    rng.random_range(1..13),
                    rng.random_range(1..29),
                    CITIES[rng.random_range(0..CITIES.len())],
                    ["retail", "wholesale", "online"][rng.random_range(0..3)],
                    rng.random_range(0..5000),
                    rng.random_range(0..100),
                    rng.random_range(1..50),
                ),
                DataSet::Fastq => {
                    let bases: String = (0..100)
                        .map(|_| ['A', 'C', 'G', 'T'][rng.random_range(0..4)])
                        .collect();
                    let quals: String = (0..100)
                        .map(|_| ['I', 'H', 'G', 'F', '#'][rng.random_range(0..5)])
                        .collect();
                    format!(
                        "@SEQ.{} lane={}\n{bases}\n+\n{quals}\n",
                        rng.random_range(0..10_000_000u32),
                        rng.random_range(1..9)
                    )
                }
                DataSet::Sparse => {
                    let offset = at + buf.len() as u64;
                    let mut block = vec![0u8; 256 << 10];
                    if offset.is_multiple_of(4 << 20) {
                        rng.fill_bytes(&mut block);
                    }
                    buf.extend_from_slice(&block);
                    continue;
                }
                DataSet::Random => {
                    let mut block = vec![0u8; 1 << 20];
                    rng.fill_bytes(&mut block);
                    buf.extend_from_slice(&block);
                    continue;
                }
            };
            buf.extend_from_slice(line.as_bytes());
        }
    }
}
