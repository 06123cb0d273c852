//! Size flags as common CLIs read them: `MiB`/`GiB` are powers of 1024, `MB`/`GB`
//! powers of 1000 (a bare `M` or `G` is binary, as in `dd` and AzCopy). A value
//! the upload cannot use is a usage error (exit 2) that says why, never a per-file
//! failure later.

use relay_proto::limits::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

const EXPLAIN: &str = "units: KiB/MiB/GiB/TiB = 1024-based (K/M/G/T too), KB/MB/GB/TB = 1000-based, a bare number = bytes";

/// Why a size flag's value is refused; `text` as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeFlagError {
    #[error("{text:?} is not a size ({EXPLAIN})")]
    NotASize { text: String },
    #[error("unknown unit {unit:?} in {text:?} ({EXPLAIN})")]
    UnknownUnit { unit: String, text: String },
    #[error("size {text:?} is out of range")]
    OutOfRange { text: String },
    #[error(
        "{text:?} is {bytes} bytes; a block is 5MiB to 4000MiB (blocks under 4 MiB are slow on Azure)"
    )]
    BlockSizeRange { text: String, bytes: u64 },
    #[error("{text:?} is {bytes} bytes, not a whole number of MiB; e.g. 8MiB ({EXPLAIN})")]
    NotWholeMiB { text: String, bytes: u64 },
}

/// Parses `1048576`, `512MiB`, `8MB` (= 8,000,000), `1.5GiB`, `64m`.
pub fn size(text: &str) -> Result<u64, SizeFlagError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| SizeFlagError::NotASize {
        text: text.to_string(),
    })?;
    let unit = unit.trim();
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(SizeFlagError::UnknownUnit {
                unit: unit.to_string(),
                text: text.to_string(),
            });
        }
    };
    let bytes = value * mult as f64;
    if !(0.0..=u64::MAX as f64).contains(&bytes) {
        return Err(SizeFlagError::OutOfRange {
            text: text.to_string(),
        });
    }
    Ok(bytes as u64)
}

/// A block size the relay and Azure accept: 5 MiB to 4000 MiB, a whole number of MiB.
pub fn block_size(text: &str) -> Result<u64, SizeFlagError> {
    let bytes = size(text)?;
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bytes) {
        return Err(SizeFlagError::BlockSizeRange {
            text: text.to_string(),
            bytes,
        });
    }
    if bytes % (1 << 20) != 0 {
        return Err(SizeFlagError::NotWholeMiB {
            text: text.to_string(),
            bytes,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_units() {
        assert_eq!(size("512MiB"), Ok(512 << 20));
        assert_eq!(size("64m"), Ok(64 << 20));
        assert_eq!(size("8MB"), Ok(8_000_000));
        assert_eq!(size("1.5GiB"), Ok(3 << 29));
        assert_eq!(size("1048576"), Ok(1 << 20));
        assert!(size("lots").is_err_and(|e| e.to_string().contains("1024-based")));
        assert!(size("5 parsecs").is_err());
    }

    #[test]
    fn block_sizes_are_checked_up_front() {
        assert_eq!(block_size("8MiB"), Ok(8 << 20));
        assert!(block_size("1MiB").is_err_and(|e| e.to_string().contains("5MiB to 4000MiB")));
        assert!(block_size("8MB").is_err_and(|e| e.to_string().contains("whole number of MiB")));
        assert!(block_size("5000MiB").is_err());
    }
}
