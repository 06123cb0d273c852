//! Peer-supplied strings as they may appear in a log line or a terminal: control
//! and bidirectional-control characters escaped, length bounded. A blob name with
//! a newline must not forge a second log line, an ESC must not drive the reader's
//! terminal, U+202E must not reorder what an operator reads, and a 60 KB name must
//! not turn every rejection into 60 KB of log.

use std::fmt;

/// Characters kept from a peer-supplied string in a log line; the rest is
/// summarised by a marker.
pub const MAX_LOG_CHARS: usize = 128;

/// Unicode's explicit bidirectional formatting characters (embeddings, overrides,
/// isolates and marks): invisible, yet they reorder the text around them.
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
    )
}

/// Whether `c` is written as an escape rather than as itself. (Backslashes are
/// kept: a literal `\n` cannot start a line, and messages that already escaped
/// their names stay readable instead of growing `\\n`.)
fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// Formats `s` escaped (`\n`, `\u{1b}`, `\u{202e}`) and cut after
/// `max_chars` characters with a `…(+N chars)` marker. Allocates nothing.
#[derive(Clone, Copy)]
pub struct LogSafe<'a> {
    text: &'a str,
    max_chars: usize,
}

/// `s` ready for a log field: escaped and cut to [`MAX_LOG_CHARS`].
pub fn safe(s: &str) -> LogSafe<'_> {
    LogSafe {
        text: s,
        max_chars: MAX_LOG_CHARS,
    }
}

/// Like [`safe`] with another length bound.
pub fn safe_to(s: &str, max_chars: usize) -> LogSafe<'_> {
    LogSafe { text: s, max_chars }
}

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.text.chars();
        for c in chars.by_ref().take(self.max_chars) {
            if needs_escape(c) {
                // `escape_debug` writes `\n`, `\t` and `\u{..}` forms; should it
                // ever pass a character through as itself, write the `\u{..}` form.
                let e = c.escape_debug();
                if e.len() > 1 {
                    write!(f, "{e}")?;
                } else {
                    write!(f, "\\u{{{:x}}}", c as u32)?;
                }
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        let rest = chars.count();
        if rest > 0 {
            write!(f, "…(+{rest} chars)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        let forged = "x.bin\n2026-01-01T00:00:00Z INFO committed etag=1\u{1b}[2J\u{202e}gpj.exe";
        let out = safe(forged).to_string();
        assert!(!out.contains('\n') && !out.contains('\u{1b}') && !out.contains('\u{202e}'));
        assert!(out.contains("\\n") && out.contains("\\u{1b}") && out.contains("\\u{202e}"));
        for c in [
            '\u{0}', '\r', '\u{7f}', '\u{85}', '\u{2066}', '\u{61c}', '\u{200f}',
        ] {
            let s = format!("a{c}b");
            let out = safe(&s).to_string();
            assert!(!out.contains(c), "{c:?} left raw in {out}");
            assert!(out.starts_with('a') && out.ends_with('b'), "{out}");
        }
    }

    #[test]
    fn backslashes_are_kept() {
        assert_eq!(safe("a\\nb").to_string(), "a\\nb");
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(
            safe("dir/ünïcode file.txt").to_string(),
            "dir/ünïcode file.txt"
        );
        assert_eq!(format!("{:?}", safe("a b")), "\"a b\"");
    }

    #[test]
    fn long_strings_are_cut_with_a_marker() {
        let long = "é".repeat(60_000);
        let out = safe(&long).to_string();
        assert_eq!(out, format!("{}…(+59872 chars)", "é".repeat(128)));
        assert_eq!(safe_to("abcdef", 3).to_string(), "abc…(+3 chars)");
        assert_eq!(safe_to("abc", 3).to_string(), "abc");
        // Escapes count as one character of the budget, and stay whole.
        assert_eq!(safe_to("\n\n\n\n", 2).to_string(), "\\n\\n…(+2 chars)");
    }

    #[test]
    fn bidi_set_is_exactly_the_formatting_characters() {
        let bidi: Vec<u32> = (0..0x3000u32)
            .filter_map(char::from_u32)
            .filter(|&c| is_bidi_control(c))
            .map(|c| c as u32)
            .collect();
        assert_eq!(
            bidi,
            [
                0x61C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067,
                0x2068, 0x2069
            ]
        );
    }
}
