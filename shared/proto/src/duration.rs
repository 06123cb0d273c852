//! Human durations for every duration flag of both binaries (`--patience 90s`,
//! `--settle 500ms`, `--auth-deadline 10`): one syntax, so what works for one
//! flag works for all.
//!
//! A bare number is seconds (`90`, `0.5`); otherwise numbers with units, `ms`,
//! `s`, `m` (minutes), `h`, written together (`1h30m`, `1.5h`, `2m 30s`).

use std::time::Duration;

/// The forms, for error messages and help.
pub const DURATION_FORMS: &str = "e.g. 500ms, 90s, 2m, 1h, 1h30m; a bare number = seconds";

/// Longer than any wait a flag means (about 31 years): a typo, not a setting.
const MAX_SECONDS: f64 = 1e9;

/// Why a duration flag's text is not a duration; `text` as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} is not a duration ({DURATION_FORMS})")]
    Invalid { text: String },
    #[error("unknown unit {unit:?} in {text:?} (units: ms, s, m, h; {DURATION_FORMS})")]
    UnknownUnit { unit: String, text: String },
    #[error("duration {text:?} is out of range")]
    OutOfRange { text: String },
    #[error("{text:?}: must be more than 0 ({DURATION_FORMS})")]
    Zero { text: String },
}

/// Parses `600`, `0.5`, `500ms`, `90s`, `2m`, `1h`, `1h30m`, `1.5h`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid {
        text: text.to_string(),
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0.0f64;
    let mut parts = 0;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(split);
        let value: f64 = num.parse().map_err(|_| invalid())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit = unit.trim();
        let seconds = match unit.to_ascii_lowercase().as_str() {
            "" | "s" | "sec" | "secs" => 1.0,
            "ms" => 1e-3,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            _ => {
                return Err(DurationError::UnknownUnit {
                    unit: unit.to_string(),
                    text: text.to_string(),
                });
            }
        };
        // A bare number stands alone (`90`, not `1h30`: 30 what?).
        if unit.is_empty() && (parts > 0 || !tail.trim().is_empty()) {
            return Err(invalid());
        }
        total += value * seconds;
        parts += 1;
        rest = tail.trim_start();
    }
    if !(0.0..MAX_SECONDS).contains(&total) {
        return Err(DurationError::OutOfRange {
            text: text.to_string(),
        });
    }
    Ok(Duration::from_secs_f64(total))
}

/// As `parse_duration`, for the flags where 0 would mean "never" or "at once"
/// and neither is meant (an interval, a deadline).
pub fn parse_nonzero_duration(text: &str) -> Result<Duration, DurationError> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(DurationError::Zero {
            text: text.to_string(),
        });
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn every_form() {
        assert_eq!(parse_duration("600"), Ok(600 * S));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0.5"), Ok(S / 2));
        assert_eq!(parse_duration("500ms"), Ok(S / 2));
        assert_eq!(parse_duration("90s"), Ok(90 * S));
        assert_eq!(parse_duration("2m"), Ok(120 * S));
        assert_eq!(parse_duration("1h"), Ok(3600 * S));
        assert_eq!(parse_duration("1h30m"), Ok(5400 * S));
        assert_eq!(parse_duration("1.5h"), Ok(5400 * S));
        assert_eq!(parse_duration("2m 30s"), Ok(150 * S));
        assert_eq!(parse_duration(" 10S "), Ok(10 * S));
        assert_eq!(parse_duration("5min"), Ok(300 * S));
    }

    #[test]
    fn refusals_say_why() {
        for bad in ["", "soon", "1h30", "-5s", "m", "1..5s", "5 s 3"] {
            let e = parse_duration(bad);
            assert!(
                matches!(e, Err(DurationError::Invalid { .. })),
                "{bad}: {e:?}"
            );
        }
        let e = parse_duration("10 parsecs");
        assert!(matches!(&e, Err(DurationError::UnknownUnit { unit, .. }) if unit == "parsecs"));
        assert!(e.is_err_and(|e| e.to_string().contains("500ms, 90s, 2m, 1h")));
        assert!(matches!(
            parse_duration("99999999999"),
            Err(DurationError::OutOfRange { .. })
        ));
    }

    #[test]
    fn nonzero() {
        assert_eq!(parse_nonzero_duration("1ms"), Ok(S / 1000));
        for zero in ["0", "0s", "0ms", "0h0m"] {
            assert!(
                matches!(
                    parse_nonzero_duration(zero),
                    Err(DurationError::Zero { .. })
                ),
                "{zero}"
            );
        }
    }
}
