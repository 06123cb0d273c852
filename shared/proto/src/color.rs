//! Whether a log stream gets ANSI colour: only a person at a terminal wants
//! escape codes; in a file, journald or a CI log an ESC byte is noise. The usual
//! rules, in order: an explicit `--color always|never`, then `NO_COLOR` (any
//! non-empty value, <https://no-color.org>), then whether the stream is a
//! terminal. Pure: the caller passes the environment and the terminal check.

/// `--color WHEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

/// `--color` names no choice we have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown colour choice {0:?} (auto | always | never)")]
pub struct UnknownColorChoice(pub String);

impl std::str::FromStr for ColorChoice {
    type Err = UnknownColorChoice;
    fn from_str(s: &str) -> Result<Self, UnknownColorChoice> {
        match s {
            "auto" => Ok(Self::Auto),
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            _ => Err(UnknownColorChoice(s.to_string())),
        }
    }
}

impl ColorChoice {
    /// Colour on a stream: `no_color` is the value of `NO_COLOR` if set,
    /// `terminal` whether the stream is one.
    pub fn ansi(self, no_color: Option<&std::ffi::OsStr>, terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && no_color.is_none_or(|v| v.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_where_a_person_reads_it() {
        let set = Some(OsStr::new("1"));
        let empty = Some(OsStr::new(""));
        // auto: a terminal without NO_COLOR.
        assert!(ColorChoice::Auto.ansi(None, true));
        assert!(!ColorChoice::Auto.ansi(None, false));
        assert!(!ColorChoice::Auto.ansi(set, true));
        // An empty NO_COLOR counts as unset (no-color.org).
        assert!(ColorChoice::Auto.ansi(empty, true));
        // An explicit choice wins over both.
        assert!(ColorChoice::Always.ansi(set, false));
        assert!(!ColorChoice::Never.ansi(None, true));
        assert_eq!("never".parse(), Ok(ColorChoice::Never));
        assert!("sometimes".parse::<ColorChoice>().is_err());
    }
}
