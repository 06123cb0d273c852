//! Where a downloaded blob goes, decided before any byte is written (pure).
//!
//! A blob name is whatever storage allows, so it is hostile input: it becomes
//! path components under the destination folder only if it passes the one
//! blob-name rule the relay applies (`relay_proto::blob_name`, so `--direct`
//! and the relay refuse the same names) and every segment is a plain name
//! that no file system can take for one of the client's own temporary files.
//! Nothing here touches the file system; `safe_fs` then creates the
//! components one at a time under the folder's descriptor.
//!
//! Names mirror `upload`: the source's last segment keeps its name
//! (`download c/2026/run1 --to restore` gives `restore/run1/...`,
//! `download c/2026/big.bin --to restore` gives `restore/big.bin`).

use std::collections::HashSet;

use relay_proto::blob_name::{BlobNameError, validate_blob_name};

/// The longest file name most local file systems take (ext4, XFS, APFS, NTFS
/// in UTF-16 units): `safe_fs` asks the destination's own limit.
pub const NAME_MAX: usize = 255;

/// What a sidecar's name ends with (`.relay-HEX.meta.relay-partial`).
pub const SIDECAR_SUFFIX: &str = ".meta.relay-partial";
/// What every partial file's name and its sidecar's end with, and what an
/// earlier client's sidecars ended with (reserved too, so a blob never lands
/// on a leftover one); `upload` and `watch` leave such files out.
pub use crate::transfer::walk::{OLD_SIDECAR_SUFFIX, PARTIAL_SUFFIX, is_partial_file};

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
        "blob name {name:?} has a segment ending like the client's own temporary files (`{PARTIAL_SUFFIX}`, in any case); refused"
    )]
    Reserved { name: String },
    /// The blob-name rule the relay applies to every Fetch.
    #[error("{0}; refused (the relay refuses it too)")]
    Name(#[from] BlobNameError),
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

/// Where one listed blob goes: its local name (none when the name is not
/// under the source) and that name's path components, or why it can have
/// none.
pub struct Placed {
    pub local: Option<String>,
    pub components: Result<Vec<String>, PlaceError>,
}

impl Selection {
    /// Where the blob `name` goes, its components at most `name_max` bytes.
    pub fn placed(&self, name: &str, name_max: usize) -> Placed {
        let (local, components) = match self.local_name(name) {
            Ok(local) => {
                let parts = components(name, local, name_max)
                    .map(|parts| parts.into_iter().map(str::to_string).collect());
                (Some(local.to_string()), parts)
            }
            Err(e) => (None, Err(e)),
        };
        Placed { local, components }
    }
}

/// The local names of a run with several sources: two may name one local
/// file, and the first keeps it. 16 bytes per file (a prefix of the name's
/// SHA-256), as upload's walk keeps per blob name; nothing with one source.
pub struct Places(Option<HashSet<[u8; 16]>>);

impl Places {
    pub fn new(sources: usize) -> Self {
        Self((sources > 1).then(HashSet::new))
    }

    /// Whether `local` is the first of the run at its local name.
    pub fn first(&mut self, local: &str) -> bool {
        use sha2::{Digest, Sha256};
        let Some(places) = &mut self.0 else {
            return true;
        };
        let h = Sha256::digest(local.as_bytes());
        let mut key = [0u8; 16];
        key.copy_from_slice(&h[..16]);
        places.insert(key)
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
    if parts.iter().any(|p| is_reserved(p)) {
        return Err(PlaceError::Reserved { name: name() });
    }
    // Whatever the checks above let through (bidirectional controls, a
    // trailing `.`, too many segments) meets the relay's own rule here, so
    // `--direct` places exactly the names the relay would serve.
    validate_blob_name(full)?;
    Ok(parts)
}

/// Whether a name segment is, on some file system, one of the client's own
/// temporary names. The endings are ASCII letters, `-` and `.`, and file
/// systems that fold case (vfat and exFAT upcase tables, NTFS and SMB
/// servers, ext4 and tmpfs `casefold`, APFS) map onto those only their ASCII
/// capitals: Unicode case folding sends no other character to `r e l a y p t
/// i j o n` (the Kelvin sign folds to `k`, the long s to `s`, neither of
/// which the partial endings hold; `.json`'s `s` is matched through the long
/// s below), and canonical decomposition leaves a mark on any accented
/// letter. So ASCII case folding suffices, after dropping the characters
/// older ext4 `casefold` ignored (zero-width and other default-ignorable
/// code points).
pub fn is_reserved(segment: &str) -> bool {
    let folded: String = segment
        .chars()
        .filter(|c| !is_default_ignorable(*c))
        .map(|c| {
            if c == '\u{17F}' {
                's'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    folded.ends_with(PARTIAL_SUFFIX) || folded.ends_with(OLD_SIDECAR_SUFFIX)
}

/// Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt).
fn is_default_ignorable(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFF8 | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0000..=0xE0FFF)
}

/// The blob's identity as the partial files know it: 128 bits of
/// SHA-256(container, `\n`, blob), in lowercase hex. Container names hold
/// no newline, so two blobs never share it; and two different lowercase hex
/// strings stay different under any case folding.
fn identity(container: &str, blob: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(container.as_bytes());
    h.update(b"\n");
    h.update(blob.as_bytes());
    hex::encode(&h.finalize()[..16])
}

/// The temporary name a blob is written under, beside its final name:
/// `.relay-HEX.relay-partial`, HEX from the blob's identity. Of fixed length
/// (53 bytes), so it fits any file system's name limit; no blob name maps to
/// it (`is_reserved`); a rerun of the same blob into the same folder finds it.
pub fn partial_name(container: &str, blob: &str) -> String {
    format!(".relay-{}{PARTIAL_SUFFIX}", identity(container, blob))
}

/// The partial file's sidecar (which blob and version it holds):
/// `.relay-HEX.meta.relay-partial`.
pub fn sidecar_name(container: &str, blob: &str) -> String {
    format!(".relay-{}{SIDECAR_SUFFIX}", identity(container, blob))
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
    fn partial_names_fit_anywhere_and_no_blob_name_maps_to_one() {
        let p = partial_name("c", "2026/big.bin");
        let side = sidecar_name("c", "2026/big.bin");
        // The form the rehearsal (tests/rehearsal/download_stage.py) and
        // people's scripts compute: 128 bits of SHA-256("c\n2026/big.bin").
        assert_eq!(p, ".relay-c13b235f02c1cd3f36097adaf0466cfe.relay-partial");
        assert_eq!(
            side,
            ".relay-c13b235f02c1cd3f36097adaf0466cfe.meta.relay-partial"
        );
        assert_eq!(p.len(), 53, "{p}");
        assert!(side.len() < 64, "{side}");
        assert!(
            p.starts_with(".relay-") && p.ends_with(PARTIAL_SUFFIX),
            "{p}"
        );
        assert!(side.ends_with(SIDECAR_SUFFIX), "{side}");
        assert!(is_partial_file(&p) && is_partial_file(&side));
        assert!(is_partial_file(".x.relay-partial.json"));
        assert!(!is_partial_file("x.relay-partial") && !is_partial_file(".x.bin"));
        // Another blob, another container, one name that differs by case:
        // other partial files, whatever the file system folds.
        let others = [
            partial_name("c", "2026/Big.bin"),
            partial_name("d", "2026/big.bin"),
            partial_name("c", "2026/big.bin2"),
        ];
        for o in &others {
            assert_ne!(o.to_lowercase(), p.to_lowercase());
        }
        // The name an earlier client gave a long leaf's partial is not this
        // one's, and the blob named like any partial file is refused.
        let long = "L".repeat(240);
        assert_ne!(partial_name("c", &long), partial_name("c", "relay-x"));
        for name in [&p[1..], &side[1..], &p, &side, &p.to_uppercase()] {
            assert!(
                matches!(place("", name), Err(PlaceError::Reserved { .. })),
                "{name}"
            );
        }
    }

    #[test]
    fn the_reserved_endings_are_refused_in_every_segment_and_every_case() {
        for name in [
            "x.relay-partial",
            "a/.x.relay-partial.json",
            "d/.f.relay-partial.json/z",
            "d/.f.relay-partial/z",
            "X.RELAY-PARTIAL",
            "a/b.Relay-Partial/c",
            // Zero-width characters older ext4 casefold dropped.
            "x.relay\u{200B}-partial",
            "x.re\u{FEFF}lay-partial",
            // The long s folds to s.
            "x.relay-partial.j\u{17F}on",
        ] {
            assert!(
                matches!(place("", name), Err(PlaceError::Reserved { .. })),
                "{name:?}"
            );
        }
        for name in [
            "x.relay-partials",
            "relay-partial",
            "x.relay-partiál",
            "a/relay/b",
        ] {
            assert!(place("", name).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn direct_and_the_relay_refuse_the_same_names() {
        // What the relay's Fetch refuses (relay_proto::blob_name) is refused
        // before any byte, through either way.
        for name in ["invoice\u{202E}fdp.exe", "a/\u{2066}b", "ends.", "a/b."] {
            assert!(
                matches!(place("", name), Err(PlaceError::Name(_))),
                "{name:?}"
            );
            assert!(validate_blob_name(name).is_err(), "{name:?}");
        }
        // Zero-width characters that are not bidirectional controls stay
        // names (they join emoji and scripts), through both ways.
        for name in ["fam\u{200D}ily.txt", "word\u{200B}break"] {
            assert!(place("", name).is_ok(), "{name:?}");
            assert!(validate_blob_name(name).is_ok(), "{name:?}");
        }
    }
}
