//! The `--sync-rerun` tree: which sizes its files have, which files a round
//! changes, and writing both. The choices are pure functions of the file's
//! index and the round (tested below), so every run of the bench, and the
//! lead's run on another machine, builds the same tree and makes the same
//! changes.

use std::path::{Path, PathBuf};

use anyhow::bail;
use relay_tests::datasets::DataSet;

/// Files per folder: a tree, not one flat folder (a sync walks folders).
const PER_FOLDER: usize = 500;

/// The size range of the tree's files. Sizes are log-uniform in
/// `[min, max]`: as many files between 16 and 32 KiB as between 512 KiB and
/// 1 MiB, so most files are small and most bytes are in the large ones, as in
/// a real results folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeMix {
    pub min: u64,
    pub max: u64,
}

impl SizeMix {
    /// The default: 16 KiB to 1 MiB (10,000 files are 2.49 GB, mean 243 KiB:
    /// they fit the lab machine's disk and in-memory Azurite, where 64 KiB to
    /// 2 MiB would take about 5.9 GB of each).
    pub const DEFAULT: SizeMix = SizeMix {
        min: 16 << 10,
        max: 1 << 20,
    };

    /// `MIN-MAX`, e.g. `16KiB-1MiB`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let Some((a, b)) = s.split_once('-') else {
            bail!("--sync-sizes {s:?}: expected MIN-MAX, e.g. 16KiB-1MiB");
        };
        let mix = SizeMix {
            min: crate::plan::parse_size(a.trim())?,
            max: crate::plan::parse_size(b.trim())?,
        };
        if mix.min == 0 || mix.min > mix.max {
            bail!("--sync-sizes {s:?}: need 0 < MIN <= MAX");
        }
        Ok(mix)
    }

    /// The size drawn for `key` (log-uniform in the range).
    pub fn size(self, key: u64) -> u64 {
        if self.min == self.max {
            return self.min;
        }
        let u = (mix64(key) >> 11) as f64 / (1u64 << 53) as f64;
        let (lo, hi) = ((self.min as f64).ln(), (self.max as f64).ln());
        ((lo + u * (hi - lo)).exp() as u64).clamp(self.min, self.max)
    }

    pub fn label(self) -> String {
        format!("{}-{} log-uniform", kib(self.min), kib(self.max))
    }
}

fn kib(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b as f64 / 1024.0)
    }
}

/// splitmix64's finaliser: a well-spread 64-bit hash of `x`.
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The file of index `i`, relative to the tree's root (and below the sync's
/// prefix). Names are unique by themselves too, so the changed-alone upload
/// (blob = base name) names each file as the sync does, one folder down.
pub fn rel_name(i: usize) -> String {
    format!("d{:03}/f-{i:06}.bin", i / PER_FOLDER)
}

/// Files a round of `pct` % of `n` changes: at least one.
pub fn changed_count(n: usize, pct: f64) -> usize {
    ((n as f64 * pct / 100.0).round() as usize).clamp(1, n.max(1))
}

/// The `count` distinct indices (of `n`) round `round` changes, sorted.
pub fn pick_changed(n: usize, count: usize, round: u32) -> Vec<usize> {
    let count = count.min(n);
    let mut picked = std::collections::BTreeSet::new();
    let mut k = 0u64;
    while picked.len() < count {
        let h = mix64((u64::from(round) << 40) ^ k ^ 0x5eed);
        picked.insert((h % n as u64) as usize);
        k += 1;
    }
    picked.into_iter().collect()
}

/// One file of the tree: where it is, its size and its SHA-256 now.
#[derive(Clone, Debug)]
pub struct TreeFile {
    pub rel: String,
    pub path: PathBuf,
    pub bytes: u64,
    pub sha256: String,
}

/// Writes `n` files under `root` (random bytes: nothing compresses or dedups).
pub fn generate(root: &Path, n: usize, mix: SizeMix) -> Vec<TreeFile> {
    (0..n)
        .map(|i| {
            let rel = rel_name(i);
            let path = root.join(&rel);
            let bytes = mix.size(i as u64);
            let sha256 = DataSet::Random.write(&path, bytes, content_seed(0, i));
            TreeFile {
                rel,
                path,
                bytes,
                sha256,
            }
        })
        .collect()
}

/// Rewrites round `round`'s files in place (same inode, new bytes): every
/// other one keeps its size, the rest take a new size from the mix. Returns
/// the indices changed.
pub fn change(files: &mut [TreeFile], pct: f64, round: u32, mix: SizeMix) -> Vec<usize> {
    let picked = pick_changed(files.len(), changed_count(files.len(), pct), round);
    for (k, &i) in picked.iter().enumerate() {
        let f = &mut files[i];
        let bytes = if k % 2 == 0 {
            f.bytes
        } else {
            mix.size((u64::from(round) << 32) ^ i as u64 ^ 0xc4a9)
        };
        f.sha256 = DataSet::Random.write(&f.path, bytes, content_seed(round, i));
        f.bytes = bytes;
    }
    picked
}

/// Round 0 is the first tree; each later round writes bytes of its own.
fn content_seed(round: u32, i: usize) -> u64 {
    (u64::from(round) << 32) ^ (i as u64) ^ 0x7_0000_0000_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_stay_in_range_and_spread_log_uniformly() {
        let mix = SizeMix::DEFAULT;
        let sizes: Vec<u64> = (0..10_000).map(|i| mix.size(i)).collect();
        assert!(sizes.iter().all(|&s| (mix.min..=mix.max).contains(&s)));
        // Log-uniform over 16 KiB..1 MiB (6 doublings): about a sixth of
        // the files in each doubling, so about half below 128 KiB.
        let below = sizes.iter().filter(|&&s| s < 128 << 10).count();
        assert!((4_500..5_500).contains(&below), "{below}");
        let total = sizes.iter().sum::<u64>();
        // 2,488,444,974 bytes here: what the docs say the default tree is.
        assert!((2_400_000_000..2_600_000_000).contains(&total), "{total}");
        let mean = total / sizes.len() as u64;
        assert!((230 << 10..255 << 10).contains(&mean), "{mean}");
        assert_eq!(mix.size(7), SizeMix::DEFAULT.size(7));
    }

    #[test]
    fn parses_a_range() {
        assert_eq!(
            SizeMix::parse("64KiB-2MiB").expect("valid"),
            SizeMix {
                min: 64 << 10,
                max: 2 << 20
            }
        );
        assert!(SizeMix::parse("2MiB-64KiB").is_err());
        assert!(SizeMix::parse("64KiB").is_err());
    }

    #[test]
    fn each_round_changes_its_own_distinct_files() {
        assert_eq!(changed_count(10_000, 1.0), 100);
        assert_eq!(changed_count(200, 1.0), 2);
        assert_eq!(changed_count(10, 1.0), 1);
        let a = pick_changed(10_000, 100, 1);
        let b = pick_changed(10_000, 100, 2);
        assert_eq!(a.len(), 100);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a.iter().all(|&i| i < 10_000));
        assert_ne!(a, b);
        assert_eq!(a, pick_changed(10_000, 100, 1));
        assert_eq!(pick_changed(3, 5, 1), vec![0, 1, 2]);
    }

    #[test]
    fn names_are_unique_by_their_base_name() {
        assert_eq!(rel_name(0), "d000/f-000000.bin");
        assert_eq!(rel_name(9_999), "d019/f-009999.bin");
    }
}
