//! Human byte sizes for flags such as `--memory-budget 1GiB`.

use crate::limits::{GIB, KIB, MIB, TIB};

/// Why a size flag's text is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// `parse_size`: the text does not start with a number.
    #[error("invalid size {text:?}: expected e.g. 1GiB, 512MiB or 1048576")]
    NotANumber { text: String },
    /// `parse_size`: a unit other than B, K(i)B, M(i)B, G(i)B or T(i)B.
    #[error("invalid size unit {unit:?} in {text:?}")]
    UnknownUnit { unit: String, text: String },
    /// `parse_size`: negative, or more bytes than a `u64` holds.
    #[error("size {text:?} out of range")]
    OutOfRange { text: String },
    /// `parse_byte_size`: what the `parse-size` crate refused, and why.
    #[error(
        "invalid size {text:?} ({source}): expected e.g. 1GiB (2^30 bytes), 1GB (10^9), 512MiB or 1048576"
    )]
    Invalid {
        text: String,
        source: parse_size::Error,
    },
}

/// Parses `1073741824`, `512MiB`, `1GiB`, `1G`, `64m` (binary units; a bare number is bytes).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| SizeError::NotANumber {
        text: text.to_string(),
    })?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => TIB,
        other => {
            return Err(SizeError::UnknownUnit {
                unit: other.to_string(),
                text: text.to_string(),
            });
        }
    };
    let bytes = value * mult as f64;
    if !(0.0..=u64::MAX as f64).contains(&bytes) {
        return Err(SizeError::OutOfRange {
            text: text.to_string(),
        });
    }
    Ok(bytes as u64)
}

/// Parses a byte size with SI and IEC units, through the `parse-size` crate:
/// `1GB` is 10^9 bytes and `1GiB` 2^30, `512MiB`, `1.5 TiB`, `16 M` (10^6), a
/// bare number is bytes; case-insensitive, the `B` optional. The relay's flags
/// use it; it is here so the client's can too.
pub fn parse_byte_size(text: &str) -> Result<u64, SizeError> {
    parse_size::parse_size(text).map_err(|source| SizeError::Invalid {
        text: text.to_string(),
        source,
    })
}

/// `16 MiB`, `1.5 GiB`: for messages and logs.
pub fn format_size(bytes: u64) -> String {
    let units = [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")];
    for (mult, name) in units {
        if bytes >= mult {
            let v = bytes as f64 / mult as f64;
            return if bytes.is_multiple_of(mult) {
                format!("{} {name}", bytes / mult)
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_take_si_and_iec_units() {
        for (text, bytes) in [
            ("1048576", 1u64 << 20),
            ("1GiB", 1 << 30),
            ("1GB", 1_000_000_000),
            ("512MiB", 512 << 20),
            ("512 mib", 512 << 20),
            ("1.5 TiB", 3 << 39),
            ("16M", 16_000_000),
            ("2KB", 2000),
            ("2KiB", 2048),
        ] {
            assert_eq!(parse_byte_size(text), Ok(bytes), "{text}");
        }
        for bad in ["", "GiB", "1 GiX", "-1", "99999 EiB"] {
            let e = parse_byte_size(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("invalid size"), "{bad}: {e}");
        }
    }

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("1GiB"), Ok(GIB));
        assert_eq!(parse_size("512MiB"), Ok(512 * MIB));
        assert_eq!(parse_size("64m"), Ok(64 * MIB));
        assert_eq!(parse_size("1048576"), Ok(MIB));
        assert_eq!(parse_size("1.5G"), Ok(GIB + GIB / 2));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(16 * MIB), "16 MiB");
        assert_eq!(format_size(3 * GIB / 2), "1.5 GiB");
        assert_eq!(format_size(12), "12 B");
    }

    #[test]
    fn messages_keep_their_wording() {
        let text = |r: Result<u64, SizeError>| r.expect_err("invalid").to_string();
        assert_eq!(
            text(parse_size("lots")),
            "invalid size \"lots\": expected e.g. 1GiB, 512MiB or 1048576"
        );
        assert_eq!(
            text(parse_size("5 Parsecs")),
            "invalid size unit \"parsecs\" in \"5 Parsecs\""
        );
        assert!(text(parse_byte_size("1 GiX")).starts_with("invalid size \"1 GiX\" ("));
    }
}
