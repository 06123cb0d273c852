//! Validation of destinations before any byte moves: container names, blob names
//! and metadata, with messages that say what is wrong.

use std::collections::BTreeMap;

use crate::limits::{MAX_BLOB_NAME_CHARS, MAX_METADATA_BYTES};
use crate::logsafe::{is_bidi_control, safe_to};

/// Metadata key the relay writes itself; clients may not set it.
pub const SHA256_METADATA_KEY: &str = "sha256";

/// Why a container name is refused. Names are as `shown`: escaped, cut short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContainerNameError {
    #[error(
        "invalid container name \"{name}\": contains a bidirectional-control character ({code_point})"
    )]
    Bidi { name: String, code_point: String },
    #[error(
        "invalid container name \"{name}\": use 3-63 lowercase letters, digits and single hyphens"
    )]
    Invalid { name: String },
}

/// Why a blob name is refused; `name` as `shown` (escaped, cut short).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid blob name \"{name}\": {problem}")]
pub struct BlobNameError {
    pub name: String,
    pub problem: BlobNameProblem,
}

/// The rule a blob name breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobNameProblem {
    #[error("empty")]
    Empty,
    #[error("longer than 1024 characters")]
    TooLong,
    #[error("contains a control character")]
    Control,
    /// The character as `U+XXXX`.
    #[error("contains a bidirectional-control character ({0})")]
    Bidi(String),
    #[error("contains a backslash (use / between segments)")]
    Backslash,
    #[error("ends with '/' or '.'")]
    TrailingSlashOrDot,
    #[error("has an empty path segment")]
    EmptySegment,
    #[error("has a '.' or '..' path segment")]
    DotSegment,
    #[error("has more than 254 path segments")]
    TooManySegments,
}

/// Why metadata is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Not a C# identifier; `name` as `shown`.
    #[error("invalid metadata name \"{name}\": use letters, digits and '_'")]
    InvalidName { name: String },
    #[error("metadata name 'sha256' is reserved for the verified hash")]
    Reserved,
    /// `key` as given (quoted with its escapes), the character as `U+XXXX`.
    #[error("metadata value for {key:?} contains a bidirectional-control character ({code_point})")]
    BidiValue { key: String, code_point: String },
    /// `key` as `shown`.
    #[error("metadata value for \"{key}\" must be printable ASCII")]
    NotPrintable { key: String },
    #[error("metadata totals {total} bytes; Azure allows 8 KiB")]
    TooLarge { total: usize },
}

/// Azure container names: 3-63 of `a-z0-9-`, starting with a letter or digit,
/// no `--`, not ending in `-`.
pub fn validate_container(name: &str) -> Result<(), ContainerNameError> {
    if let Some(code_point) = bidi(name) {
        return Err(ContainerNameError::Bidi {
            name: shown(name),
            code_point,
        });
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
        return Err(ContainerNameError::Invalid { name: shown(name) });
    }
    Ok(())
}

/// Blob names we accept: 1-1024 characters; no control, bidirectional-control
/// characters or backslashes; no empty, `.` or `..` segments; no trailing `/` or
/// `.`; at most 254 segments.
pub fn validate_blob_name(name: &str) -> Result<(), BlobNameError> {
    blob_name_problem(name).map_or(Ok(()), |problem| {
        Err(BlobNameError {
            name: shown(name),
            problem,
        })
    })
}

/// The first rule `name` breaks, if any.
fn blob_name_problem(name: &str) -> Option<BlobNameProblem> {
    use BlobNameProblem as P;
    if name.is_empty() {
        return Some(P::Empty);
    }
    if name.chars().count() > MAX_BLOB_NAME_CHARS {
        return Some(P::TooLong);
    }
    if name.chars().any(char::is_control) {
        return Some(P::Control);
    }
    if let Some(c) = bidi(name) {
        // They reorder what people read: `invoice\u{202e}fdp.exe` shows as `invoiceexe.pdf`.
        return Some(P::Bidi(c));
    }
    if name.contains('\\') {
        return Some(P::Backslash);
    }
    if name.ends_with('/') || name.ends_with('.') {
        return Some(P::TrailingSlashOrDot);
    }
    let mut segments = 0;
    for seg in name.split('/') {
        segments += 1;
        match seg {
            "" => return Some(P::EmptySegment),
            "." | ".." => return Some(P::DotSegment),
            _ => {}
        }
    }
    if segments > 254 {
        return Some(P::TooManySegments);
    }
    None
}

/// Metadata names must be C# identifiers (Azure's rule); values printable ASCII;
/// the total within Azure's 8 KiB; `sha256` is reserved for the verified hash.
pub fn validate_metadata(meta: &BTreeMap<String, String>) -> Result<(), MetadataError> {
    let mut total = SHA256_METADATA_KEY.len() + 64;
    for (k, v) in meta {
        let mut chars = k.chars();
        let ident = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident {
            return Err(MetadataError::InvalidName { name: shown(k) });
        }
        if k.eq_ignore_ascii_case(SHA256_METADATA_KEY) {
            return Err(MetadataError::Reserved);
        }
        if let Some(code_point) = bidi(v) {
            return Err(MetadataError::BidiValue {
                key: k.clone(),
                code_point,
            });
        }
        if !v.chars().all(|c| c.is_ascii() && !c.is_ascii_control()) {
            return Err(MetadataError::NotPrintable { key: shown(k) });
        }
        total += k.len() + v.len();
    }
    if total > MAX_METADATA_BYTES {
        return Err(MetadataError::TooLarge { total });
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
            let e = validate_blob_name(&name)
                .expect_err("bidi blob name")
                .to_string();
            assert!(e.contains("bidirectional-control character (U+"), "{e}");
            assert!(
                !e.contains(c),
                "the message must not carry the raw character: {e}"
            );
            let e = validate_container(&format!("ab{c}c"))
                .expect_err("bidi container")
                .to_string();
            assert!(e.contains("bidirectional-control"), "{e}");
            assert!(!e.contains(c), "{e}");
            let meta: BTreeMap<_, _> = [("k".into(), format!("v{c}"))].into();
            let e = validate_metadata(&meta)
                .expect_err("bidi metadata")
                .to_string();
            assert!(e.contains("bidirectional-control"), "{e}");
        }
        let e = validate_blob_name("a\u{202e}b")
            .expect_err("bidi")
            .to_string();
        assert!(e.contains("U+202E"), "{e}");
    }

    #[test]
    fn messages_never_carry_raw_control_characters() {
        let e = validate_blob_name("x\ncommitted\u{1b}[2J")
            .expect_err("control")
            .to_string();
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
        let long = format!("{}\n", "a".repeat(60_000));
        let e = validate_blob_name(&long).expect_err("long").to_string();
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

    #[test]
    fn messages_keep_their_wording() {
        let text = |e: &dyn std::error::Error| e.to_string();
        assert_eq!(
            text(&validate_container("Ab").expect_err("upper case")),
            "invalid container name \"Ab\": use 3-63 lowercase letters, digits and single hyphens"
        );
        assert_eq!(
            text(&validate_blob_name("a/").expect_err("trailing slash")),
            "invalid blob name \"a/\": ends with '/' or '.'"
        );
        let meta: BTreeMap<_, _> = [("k".into(), "v\u{7}".into())].into();
        assert_eq!(
            text(&validate_metadata(&meta).expect_err("control in value")),
            "metadata value for \"k\" must be printable ASCII"
        );
        let meta: BTreeMap<_, _> = [("k".into(), "\u{202e}".into())].into();
        assert_eq!(
            text(&validate_metadata(&meta).expect_err("bidi value")),
            "metadata value for \"k\" contains a bidirectional-control character (U+202E)"
        );
    }
}
