//! Peer-supplied strings as they may appear in a log line or a terminal: control
//! and bidirectional-control characters escaped, length bounded. A blob name with
//! a newline must not forge a second log line, an ESC must not drive the reader's
//! terminal, U+202E must not reorder what an operator reads, and a 60 KB name must
//! not turn every rejection into 60 KB of log. A SAS's signature never reaches
//! a log line, an error or a printed command (`hide_sas_signatures`).

use std::borrow::Cow;
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

/// What a SAS signature's value is replaced with: the Azure SDK's own word in
/// its request logs, so one search finds both.
pub const REDACTED: &str = "REDACTED";

/// `text` with the value of every SAS signature (`sig=...` in a URL's query,
/// or `sig%3D...` in a URL that is itself percent-encoded inside another) replaced by
/// [`REDACTED`]; the rest of the URL stays readable (account, container,
/// permissions, expiry). The signature is the one secret of a SAS: with it,
/// anyone holds the access the SAS grants until it expires.
pub fn hide_sas_signatures(text: &str) -> Cow<'_, str> {
    // Byte offsets are the same in both: only ASCII letters change.
    let lower = text.to_ascii_lowercase();
    let mut out = String::new();
    let mut done = 0;
    let mut at = 0;
    while let Some(found) = next_signature(&lower, at) {
        out.push_str(&text[done..found.value]);
        out.push_str(REDACTED);
        done = found.end;
        at = found.end;
    }
    if done == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[done..]);
    Cow::Owned(out)
}

/// Where a signature's value starts and ends.
struct Signature {
    value: usize,
    end: usize,
}

/// The first signature value at or after `from` in `lower` (the text in
/// ASCII lower case), if any.
fn next_signature(lower: &str, from: usize) -> Option<Signature> {
    let mut at = from;
    while let Some(i) = lower[at..].find("sig").map(|i| i + at) {
        at = i + 3;
        let plain = lower[at..].starts_with('=')
            && (i == 0 || matches!(lower.as_bytes()[i - 1], b'?' | b'&'));
        let encoded = lower[at..].starts_with("%3d")
            && (lower[..i].ends_with("%26") || lower[..i].ends_with("%3f"));
        if !plain && !encoded {
            continue;
        }
        let value = at + if plain { 1 } else { 3 };
        let rest = &lower[value..];
        let mut len = rest
            .find(|c: char| c.is_whitespace() || "&#\"'<>()[]{},;`\\".contains(c))
            .unwrap_or(rest.len());
        if encoded && let Some(amp) = rest[..len].find("%26") {
            len = amp;
        }
        if len == 0 {
            continue;
        }
        return Some(Signature {
            value,
            end: value + len,
        });
    }
    None
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

    #[test]
    fn sas_signatures_are_hidden_and_the_rest_kept() {
        let url = "https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=rw&se=2026-01-01T00%3A00%3A00Z&sig=AbC%2Bd%2Fe%3D";
        assert_eq!(
            hide_sas_signatures(url),
            "https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=rw&se=2026-01-01T00%3A00%3A00Z&sig=REDACTED"
        );
        let cases = [
            // First in the query, then more parameters.
            ("http://h/a?sig=S3CRET&sv=1", "http://h/a?sig=REDACTED&sv=1"),
            // Decoded, in an error's parentheses, any case.
            (
                "error sending request for url (http://h/b?comp=block&SIG=ab+c/d==): timed out",
                "error sending request for url (http://h/b?comp=block&SIG=REDACTED): timed out",
            ),
            // A bare query string, as a SAS is often handed around.
            ("sv=1&sig=xyz", "sv=1&sig=REDACTED"),
            ("sig=xyz", "sig=REDACTED"),
            // Two URLs in one text, quoted.
            (
                "'http://a?sig=1' and \"http://b?x=1&sig=2\"",
                "'http://a?sig=REDACTED' and \"http://b?x=1&sig=REDACTED\"",
            ),
            // Quoted in JSON (a backslash ends it: no signature holds one).
            (
                "{\"message\": \"--to \\\"http://h/c?sig=S3\\\": bad\"}",
                "{\"message\": \"--to \\\"http://h/c?sig=REDACTED\\\": bad\"}",
            ),
            // A SAS URL percent-encoded inside another URL's query.
            (
                "http://h/?copy=http%3A%2F%2Fa%2Fb%3Fsv%3D1%26sig%3DS3%252B%26se%3D2",
                "http://h/?copy=http%3A%2F%2Fa%2Fb%3Fsv%3D1%26sig%3DREDACTED%26se%3D2",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(hide_sas_signatures(text), want, "{text}");
        }
    }

    #[test]
    fn text_without_a_signature_is_not_copied() {
        for text in [
            "no url here",
            "http://h/a?signature=1&design=2",
            "a blob named sig=1",
            "http://h/a?sig=",
            "",
        ] {
            assert!(
                matches!(hide_sas_signatures(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }
}
