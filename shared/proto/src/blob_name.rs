//! Validation of destinations before any byte moves: container names, blob names
//! and metadata, with messages that say what is wrong.

use std::collections::BTreeMap;

use crate::limits::{MAX_BLOB_NAME_CHARS, MAX_METADATA_BYTES};
use crate::logsafe::{is_bidi_control, safe_to};

/// Metadata key the relay writes itself; clients may not set it.
pub const SHA256_METADATA_KEY: &str = "sha256";

/// Azure container names: 3-63 of `a-z0-9-`, starting with a letter or digit,
/// no `--`, not ending in `-`.
pub fn validate_container(name: &str) -> Result<(), String> {
    if let Some(c) = bidi(name) {
        return Err(format!(
            "invalid container name \"{}\": contains a bidirectional-control character ({c})",
            shown(name)
        ));
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !(3..=63).contains(&name.len())
        || !ok_chars
        || name.starts_with('-')
        || name.ends_with('-')
        || name.contains("--")
    {
        return Err(format!(
            "invalid container name \"{}\": use 3-63 lowercase letters, digits and single hyphens",
            shown(name)
        ));
    }
    Ok(())
}

/// Blob names we accept: 1-1024 characters; no control, bidirectional-control
/// characters or backslashes; no empty, `.` or `..` segments; no trailing `/` or
/// `.`; at most 254 segments.
pub fn validate_blob_name(name: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("invalid blob name \"{}\": {why}", shown(name)));
    if name.is_empty() {
        return fail("empty");
    }
    if name.chars().count() > MAX_BLOB_NAME_CHARS {
        return fail("longer than 1024 characters");
    }
    if name.chars().any(char::is_control) {
        return fail("contains a control character");
    }
    if let Some(c) = bidi(name) {
        // They reorder what people read: `invoice\u{202e}fdp.exe` shows as `invoiceexe.pdf`.
        return fail(&format!("contains a bidirectional-control character ({c})"));
    }
    if name.contains('\\') {
        return fail("contains a backslash (use / between segments)");
    }
    if name.ends_with('/') || name.ends_with('.') {
        return fail("ends with '/' or '.'");
    }
    let mut segments = 0;
    for seg in name.split('/') {
        segments += 1;
        match seg {
            "" => return fail("has an empty path segment"),
            "." | ".." => return fail("has a '.' or '..' path segment"),
            _ => {}
        }
    }
    if segments > 254 {
        return fail("has more than 254 path segments");
    }
    Ok(())
}

/// Metadata names must be C# identifiers (Azure's rule); values printable ASCII;
/// the total within Azure's 8 KiB; `sha256` is reserved for the verified hash.
pub fn validate_metadata(meta: &BTreeMap<String, String>) -> Result<(), String> {
    let mut total = SHA256_METADATA_KEY.len() + 64;
    for (k, v) in meta {
        let mut chars = k.chars();
        let ident = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident {
            return Err(format!(
                "invalid metadata name \"{}\": use letters, digits and '_'",
                shown(k)
            ));
        }
        if k.eq_ignore_ascii_case(SHA256_METADATA_KEY) {
            return Err("metadata name 'sha256' is reserved for the verified hash".into());
        }
        if let Some(c) = bidi(v) {
            return Err(format!(
                "metadata value for {k:?} contains a bidirectional-control character ({c})"
            ));
        }
        if !v.chars().all(|c| c.is_ascii() && !c.is_ascii_control()) {
            return Err(format!(
                "metadata value for \"{}\" must be printable ASCII",
                shown(k)
            ));
        }
        total += k.len() + v.len();
    }
    if total > MAX_METADATA_BYTES {
        return Err(format!("metadata totals {total} bytes; Azure allows 8 KiB"));
    }
    Ok(())
}

/// A name as it may appear in an error message: the message reaches the relay's
/// log and the client's terminal, so escaped and cut short.
fn shown(name: &str) -> String {
    safe_to(name, 80).to_string()
}

/// The first bidirectional-control character in `s`, as `U+XXXX`.
fn bidi(s: &str) -> Option<String> {
    s.chars()
        .find(|&c| is_bidi_control(c))
        .map(|c| format!("U+{:04X}", c as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_pass() {
        for n in ["a", "dir/file.bin", "x y/ünïcode.txt", "a.b/c", ".hidden/x"] {
            assert_eq!(validate_blob_name(n), Ok(()), "{n}");
        }
        assert!(validate_blob_name(&"a".repeat(1024)).is_ok());
    }

    #[test]
    fn hostile_names_fail() {
        let long = "a".repeat(1025);
        for n in [
            "",
            "../etc/passwd",
            "a/../b",
            "a/./b",
            "./a",
            "a/",
            "a.",
            "a//b",
            "/a",
            "a\nb",
            "a\u{7f}b",
            "a\\b",
            long.as_str(),
        ] {
            assert!(validate_blob_name(n).is_err(), "{n:?} should fail");
        }
        let deep = vec!["d"; 255].join("/");
        assert!(validate_blob_name(&deep).is_err());
    }

    #[test]
    fn bidi_controls_are_refused_with_a_clear_message() {
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ] {
            let name = format!("invoice{c}fdp.exe");
            let e = validate_blob_name(&name).expect_err("bidi blob name");
            assert!(e.contains("bidirectional-control character (U+"), "{e}");
            assert!(
                !e.contains(c),
                "the message must not carry the raw character: {e}"
            );
            let e = validate_container(&format!("ab{c}c")).expect_err("bidi container");
            assert!(e.contains("bidirectional-control"), "{e}");
            assert!(!e.contains(c), "{e}");
            let meta: BTreeMap<_, _> = [("k".into(), format!("v{c}"))].into();
            let e = validate_metadata(&meta).expect_err("bidi metadata");
            assert!(e.contains("bidirectional-control"), "{e}");
        }
        let e = validate_blob_name("a\u{202e}b").expect_err("bidi");
        assert!(e.contains("U+202E"), "{e}");
    }

    #[test]
    fn messages_never_carry_raw_control_characters() {
        let e = validate_blob_name("x\ncommitted\u{1b}[2J").expect_err("control");
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
        let long = format!("{}\n", "a".repeat(60_000));
        let e = validate_blob_name(&long).expect_err("long");
        assert!(e.len() < 200, "{} bytes", e.len());
    }

    #[test]
    fn containers() {
        for c in ["abc", "my-data-01", &"a".repeat(63)] {
            assert!(validate_container(c).is_ok(), "{c}");
        }
        for c in [
            "ab",
            "Abc",
            "a--b",
            "-ab",
            "ab-",
            "a_b",
            &"a".repeat(64),
            "a/b",
        ] {
            assert!(validate_container(c).is_err(), "{c}");
        }
    }

    #[test]
    fn metadata_rules() {
        let ok: BTreeMap<_, _> = [("project".into(), "alpha 1".into())].into();
        assert!(validate_metadata(&ok).is_ok());
        let reserved: BTreeMap<_, _> = [("SHA256".into(), "x".into())].into();
        assert!(validate_metadata(&reserved).is_err());
        let bad: BTreeMap<_, _> = [("1x".into(), "v".into())].into();
        assert!(validate_metadata(&bad).is_err());
        let big: BTreeMap<_, _> = [("k".into(), "v".repeat(9000))].into();
        assert!(validate_metadata(&big).is_err());
    }
}
