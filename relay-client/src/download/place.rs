//! Where a downloaded blob goes, decided before any byte is written (pure).
//!
//! A blob name is whatever storage allows, so it is hostile input: it becomes
//! path components under the destination folder only if every segment is a
//! plain name. Nothing here touches the file system; `safe_fs` then creates
//! the components one at a time under the folder's descriptor.
//!
//! Names mirror `upload`: the source's last segment keeps its name
//! (`download c/2026/run1 --to restore` gives `restore/run1/...`,
//! `download c/2026/big.bin --to restore` gives `restore/big.bin`).

/// The longest file name most local file systems take (ext4, XFS, APFS, NTFS
/// in UTF-16 units): `safe_fs` asks the destination's own limit.
pub const NAME_MAX: usize = 255;

/// What every partial file's name ends with (`.NAME.relay-partial`).
pub const PARTIAL_SUFFIX: &str = ".relay-partial";
/// What a partial file's sidecar adds to the partial's name.
pub const SIDECAR_SUFFIX: &str = ".json";

/// Why a blob cannot be placed under the destination folder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("blob name {name:?} has a `{segment}` segment; refused (it would leave the folder)")]
    DotSegment { name: String, segment: String },
    #[error("blob name {name:?} starts with `/`; refused (an absolute path)")]
    Absolute { name: String },
    #[error("blob name {name:?} has an empty segment (`//` or a trailing `/`); refused")]
    EmptySegment { name: String },
    #[error("blob name {name:?} has a backslash; refused (a path separator on Windows)")]
    Backslash { name: String },
    #[error("blob name {name:?} has a control character; refused")]
    Control { name: String },
    #[error(
        "blob name {name:?} has a segment of {len} bytes; this file system takes at most {max}"
    )]
    TooLong {
        name: String,
        len: usize,
        max: usize,
    },
    #[error(
        "blob name {name:?} ends like the client's own temporary files (`{PARTIAL_SUFFIX}`); refused"
    )]
    Reserved { name: String },
    #[error("blob name {name:?} is not under the source {prefix:?}")]
    NotUnder { name: String, prefix: String },
}

/// What one SOURCE argument names inside its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The listing prefix (no leading or trailing `/`; empty: the whole container).
    pub prefix: String,
}

impl Selection {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    /// Whether a listed blob belongs to this source: the blob named exactly
    /// `prefix`, or one under `prefix/` (`run1` does not take `run10/x`).
    pub fn takes(&self, name: &str) -> bool {
        self.prefix.is_empty()
            || name == self.prefix
            || name
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// The part of `name` that becomes the local path: from the prefix's last
    /// segment on (the source keeps its own name, as `upload` keeps a
    /// directory's). Not yet validated: see `components`.
    pub fn local_name<'a>(&self, name: &'a str) -> Result<&'a str, PlaceError> {
        if !self.takes(name) {
            return Err(PlaceError::NotUnder {
                name: name.to_string(),
                prefix: self.prefix.clone(),
            });
        }
        let base = match self.prefix.rfind('/') {
            Some(i) => &self.prefix[..=i],
            None => "",
        };
        Ok(&name[base.len()..])
    }

    /// The name `--include`/`--exclude` match: below the prefix (`a/b.txt`
    /// for `run1/a/b.txt`), or the blob's own last segment when it is the
    /// prefix itself.
    pub fn filter_name<'a>(&self, name: &'a str) -> &'a str {
        if self.prefix.is_empty() {
            return name;
        }
        match name.strip_prefix(self.prefix.as_str()) {
            Some(rest) if rest.starts_with('/') => &rest[1..],
            _ => name.rsplit('/').next().unwrap_or(name),
        }
    }
}

/// Splits a local name (from `Selection::local_name`) into path components,
/// each a plain file name of at most `name_max` bytes; refuses the whole
/// name otherwise. `full` is the blob's name, for the message.
pub fn components<'a>(
    full: &str,
    local: &'a str,
    name_max: usize,
) -> Result<Vec<&'a str>, PlaceError> {
    let name = || full.to_string();
    if local.starts_with('/') {
        return Err(PlaceError::Absolute { name: name() });
    }
    if local.contains('\\') {
        return Err(PlaceError::Backslash { name: name() });
    }
    if local.chars().any(char::is_control) {
        return Err(PlaceError::Control { name: name() });
    }
    let parts: Vec<&str> = local.split('/').collect();
    for p in &parts {
        match *p {
            "" => return Err(PlaceError::EmptySegment { name: name() }),
            "." | ".." => {
                return Err(PlaceError::DotSegment {
                    name: name(),
                    segment: p.to_string(),
                });
            }
            _ if p.len() > name_max => {
                return Err(PlaceError::TooLong {
                    name: name(),
                    len: p.len(),
                    max: name_max,
                });
            }
            _ => {}
        }
    }
    if let Some(leaf) = parts.last()
        && (leaf.ends_with(PARTIAL_SUFFIX)
            || leaf.ends_with(&format!("{PARTIAL_SUFFIX}{SIDECAR_SUFFIX}")))
    {
        return Err(PlaceError::Reserved { name: name() });
    }
    Ok(parts)
}

/// The temporary name a file is written under, beside its final name:
/// `.NAME.relay-partial`, or, when that and its sidecar would not fit the
/// file system's name limit, `.relay-HASH.relay-partial` (its sidecar still
/// names the blob).
pub fn partial_name(leaf: &str, name_max: usize) -> String {
    let plain = format!(".{leaf}{PARTIAL_SUFFIX}");
    if plain.len() + SIDECAR_SUFFIX.len() <= name_max {
        return plain;
    }
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(leaf.as_bytes());
    format!(".relay-{}{PARTIAL_SUFFIX}", hex::encode(&h[..12]))
}

/// The sidecar of a partial file: what it holds (container, blob, ETag, size).
pub fn sidecar_name(partial: &str) -> String {
    format!("{partial}{SIDECAR_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(prefix: &str, name: &str) -> Result<Vec<String>, PlaceError> {
        let s = Selection::new(prefix);
        let local = s.local_name(name)?;
        Ok(components(name, local, NAME_MAX)?
            .into_iter()
            .map(str::to_string)
            .collect())
    }

    fn ok(prefix: &str, name: &str) -> Vec<String> {
        place(prefix, name).unwrap_or_else(|e| panic!("{prefix:?} {name:?}: {e}"))
    }

    #[test]
    fn the_source_keeps_its_last_segment() {
        assert_eq!(ok("2026/run1", "2026/run1/a/b.txt"), ["run1", "a", "b.txt"]);
        assert_eq!(ok("2026/run1/", "2026/run1/a"), ["run1", "a"]);
        assert_eq!(ok("2026/big.bin", "2026/big.bin"), ["big.bin"]);
        assert_eq!(ok("big.bin", "big.bin"), ["big.bin"]);
        assert_eq!(ok("run1", "run1/x"), ["run1", "x"]);
        // The whole container: names as they are.
        assert_eq!(ok("", "a/b/c"), ["a", "b", "c"]);
        assert_eq!(ok("", "top"), ["top"]);
        // Unicode and spaces are plain names.
        assert_eq!(ok("", "données/é t.csv"), ["données", "é t.csv"]);
    }

    #[test]
    fn a_prefix_takes_only_whole_segments() {
        let s = Selection::new("2026/run1");
        assert!(s.takes("2026/run1"));
        assert!(s.takes("2026/run1/x"));
        assert!(!s.takes("2026/run10/x"));
        assert!(!s.takes("2026/run1x"));
        assert!(!s.takes("2026"));
        assert!(Selection::new("").takes("anything"));
        assert!(matches!(
            place("2026/run1", "2026/run10/x"),
            Err(PlaceError::NotUnder { .. })
        ));
    }

    #[test]
    fn filters_see_the_name_below_the_source() {
        let s = Selection::new("2026/run1");
        assert_eq!(s.filter_name("2026/run1/a/b.txt"), "a/b.txt");
        assert_eq!(
            Selection::new("2026/big.bin").filter_name("2026/big.bin"),
            "big.bin"
        );
        assert_eq!(Selection::new("").filter_name("a/b"), "a/b");
    }

    #[test]
    fn hostile_names_are_refused() {
        type Want = fn(&PlaceError) -> bool;
        let cases: &[(&str, &str, Want)] = &[
            (
                "",
                "a/../../x",
                |e| matches!(e, PlaceError::DotSegment { segment, .. } if segment == ".."),
            ),
            ("", "..", |e| matches!(e, PlaceError::DotSegment { .. })),
            ("", "../x", |e| matches!(e, PlaceError::DotSegment { .. })),
            ("", "a/..", |e| matches!(e, PlaceError::DotSegment { .. })),
            (
                "",
                "./x",
                |e| matches!(e, PlaceError::DotSegment { segment, .. } if segment == "."),
            ),
            ("", "a/./b", |e| matches!(e, PlaceError::DotSegment { .. })),
            ("d", "d/../../etc/passwd", |e| {
                matches!(e, PlaceError::DotSegment { .. })
            }),
            ("", "/abs", |e| matches!(e, PlaceError::Absolute { .. })),
            ("", "//abs", |e| matches!(e, PlaceError::Absolute { .. })),
            ("", "back\\slash", |e| {
                matches!(e, PlaceError::Backslash { .. })
            }),
            ("", "..\\..\\x", |e| {
                matches!(e, PlaceError::Backslash { .. })
            }),
            ("", "a\nb", |e| matches!(e, PlaceError::Control { .. })),
            ("", "a\u{0}b", |e| matches!(e, PlaceError::Control { .. })),
            ("", "a\u{1b}[31m", |e| {
                matches!(e, PlaceError::Control { .. })
            }),
            ("", "a\u{7f}", |e| matches!(e, PlaceError::Control { .. })),
            ("", "a\u{85}", |e| matches!(e, PlaceError::Control { .. })),
            ("", "a//b", |e| matches!(e, PlaceError::EmptySegment { .. })),
            ("", "dir/", |e| matches!(e, PlaceError::EmptySegment { .. })),
            ("", "", |e| matches!(e, PlaceError::EmptySegment { .. })),
            ("d", "d//x", |e| {
                matches!(e, PlaceError::EmptySegment { .. })
            }),
            ("", "x.relay-partial", |e| {
                matches!(e, PlaceError::Reserved { .. })
            }),
            ("", "a/.x.relay-partial.json", |e| {
                matches!(e, PlaceError::Reserved { .. })
            }),
        ];
        for (prefix, name, want) in cases {
            match place(prefix, name) {
                Err(e) => {
                    assert!(want(&e), "{name:?}: unexpected {e:?}");
                    // The message names the blob (escaped) and says it was refused.
                    let text = e.to_string();
                    assert!(!text.chars().any(char::is_control), "{text:?}");
                }
                Ok(p) => panic!("{name:?} was placed at {p:?}"),
            }
        }
    }

    #[test]
    fn names_longer_than_the_file_system_takes_are_refused() {
        let long = "x".repeat(NAME_MAX + 1);
        assert!(matches!(
            place("", &format!("d/{long}")),
            Err(PlaceError::TooLong { len, max: NAME_MAX, .. }) if len == NAME_MAX + 1
        ));
        assert!(matches!(
            place("", &format!("{long}/f")),
            Err(PlaceError::TooLong { .. })
        ));
        let fits = "y".repeat(NAME_MAX);
        assert_eq!(ok("", &fits), std::slice::from_ref(&fits));
        // Bytes count, not characters: 128 two-byte characters are 256 bytes.
        assert!(matches!(
            place("", &"é".repeat(128)),
            Err(PlaceError::TooLong { len: 256, .. })
        ));
        assert!(components("n", "abcd", 3).is_err());
        assert!(components("n", "abc", 3).is_ok());
    }

    #[test]
    fn partial_names_always_fit() {
        assert_eq!(partial_name("big.bin", NAME_MAX), ".big.bin.relay-partial");
        assert_eq!(
            sidecar_name(".big.bin.relay-partial"),
            ".big.bin.relay-partial.json"
        );
        for len in [1, 100, 235, 236, 240, 254, 255] {
            let leaf = "z".repeat(len);
            let p = partial_name(&leaf, NAME_MAX);
            assert!(sidecar_name(&p).len() <= NAME_MAX, "{len}: {p}");
            assert!(p.ends_with(PARTIAL_SUFFIX));
        }
        // Two long names that differ get different partial names.
        let a = partial_name(&format!("{}a", "z".repeat(254)), NAME_MAX);
        let b = partial_name(&format!("{}b", "z".repeat(254)), NAME_MAX);
        assert_ne!(a, b);
    }
}
