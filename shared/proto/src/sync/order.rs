//! The one total order both sides of a sync are put in, so that a merge of
//! two sorted streams can pair equal names without holding either side.
//!
//! A name is the blob name below the sync's prefix, after the client's name
//! mapping (path segments joined by `/`). Names are compared as sequences of
//! code units: Azure documents only "alphabetical order", measured it orders
//! by UTF-16 code units, and Azurite does so too; the two differ from UTF-8
//! byte order only between a character in U+E000..=U+FFFF and one above
//! U+FFFF (`😀` is a surrogate pair, 0xD83D.., before `！` 0xFF01 in UTF-16;
//! after it in UTF-8, 0xF0.. > 0xEF..). Both are lexicographic orders of a
//! prefix code, so everything below (the per-directory walk rule, the
//! merge's checks) holds for either; [`NameOrder`] says which one a listing
//! is expected to follow.
//!
//! The local walk yields this order one directory at a time: a directory's
//! entries are sorted by the name their blobs get, a subdirectory standing
//! for its name followed by `/` ([`NameOrder::compare_child`]). Every name below
//! directory `d` begins with `d/`, and no sibling's key begins with `d/`, so
//! the whole subtree sorts as one run at the place of `d/`. Sorting a
//! directory by plain file name instead is wrong: `/` (0x2F) sorts after
//! `.` (0x2E) and `-` (0x2D) and before `0` (0x30), so the file `a.b` comes
//! before everything in the directory `a` (`a.b` < `a/x`), while `a0` comes
//! after it (`a/x` < `a0`).

use std::cmp::Ordering;

/// How names compare: the service's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameOrder {
    /// UTF-16 code units: what Azure and Azurite were seen to list by.
    #[default]
    Utf16,
    /// UTF-8 bytes (Unicode code point order).
    Utf8,
}

impl NameOrder {
    /// Compares two names.
    pub fn compare(self, a: &str, b: &str) -> Ordering {
        self.compare_child((a, false), (b, false))
    }

    /// Compares two entries of one directory by the names their blobs get:
    /// `(name, is_dir)`, a directory's key being its name followed by `/`.
    pub fn compare_child(self, a: (&str, bool), b: (&str, bool)) -> Ordering {
        match self {
            NameOrder::Utf8 => utf8_key(a).cmp(utf8_key(b)),
            NameOrder::Utf16 => utf16_key(a).cmp(utf16_key(b)),
        }
    }

    /// Sorts one directory's entries into the order their blob names take.
    pub fn sort_children<T>(self, children: &mut [T], key: impl Fn(&T) -> (&str, bool)) {
        children.sort_by(|a, b| self.compare_child(key(a), key(b)));
    }
}

/// A directory entry's name as UTF-8 bytes, and `/` after a directory's.
fn utf8_key((name, dir): (&str, bool)) -> impl Iterator<Item = u8> + '_ {
    name.bytes().chain(dir.then_some(b'/'))
}

/// A directory entry's name as UTF-16 code units, and `/` after a directory's.
fn utf16_key((name, dir): (&str, bool)) -> impl Iterator<Item = u16> + '_ {
    name.encode_utf16().chain(dir.then_some(u16::from(b'/')))
}

/// Which input of a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Dest,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Source => "source",
            Side::Dest => "destination",
        })
    }
}

/// An input that broke the order: pairing by name would be wrong (a name
/// seen late looks absent on the other side, and absent means delete), so
/// the merge stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {side} is not in name order: {after:?} came after {before:?}")]
pub struct OrderError {
    pub side: Side,
    pub before: String,
    pub after: String,
}

/// Remembers the last name of one input and refuses one that does not come
/// strictly after it (a repeated name is refused too: two entries for one
/// blob cannot both be right).
#[derive(Debug, Clone)]
pub struct OrderCheck {
    side: Side,
    order: NameOrder,
    last: Option<String>,
}

impl OrderCheck {
    pub fn new(side: Side, order: NameOrder) -> Self {
        Self {
            side,
            order,
            last: None,
        }
    }

    /// Accepts `name` if it comes after the last one accepted.
    pub fn accept(&mut self, name: &str) -> Result<(), OrderError> {
        if let Some(last) = &self.last
            && self.order.compare(last, name) != Ordering::Less
        {
            return Err(OrderError {
                side: self.side,
                before: last.clone(),
                after: name.to_string(),
            });
        }
        match &mut self.last {
            Some(last) => {
                last.clear();
                last.push_str(name);
            }
            None => self.last = Some(name.to_string()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [NameOrder; 2] = [NameOrder::Utf8, NameOrder::Utf16];

    fn sorted(order: NameOrder, names: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        v.sort_by(|a, b| order.compare(a, b));
        v
    }

    #[test]
    fn ascii_punctuation_sorts_by_code_unit() {
        for order in BOTH {
            assert_eq!(
                sorted(
                    order,
                    &["a0", "a/x", "a.b", "a-c", "a", "A", "a/", "B", "b"]
                ),
                ["A", "B", "a", "a-c", "a.b", "a/", "a/x", "a0", "b"]
            );
        }
    }

    #[test]
    fn upper_case_comes_before_lower_case() {
        for order in BOTH {
            assert_eq!(sorted(order, &["b", "a", "Z", "A"]), ["A", "Z", "a", "b"]);
        }
    }

    #[test]
    fn the_two_orders_differ_only_above_the_basic_plane() {
        // U+FF01 (fullwidth '!') against U+1F600 (a surrogate pair in UTF-16).
        let (bmp, astral) = ("p/\u{FF01}", "p/\u{1F600}");
        assert_eq!(NameOrder::Utf8.compare(bmp, astral), Ordering::Less);
        assert_eq!(NameOrder::Utf16.compare(bmp, astral), Ordering::Greater);
        // Below U+D800 both agree with each other.
        for order in BOTH {
            assert_eq!(order.compare("p/\u{e9}", "p/\u{4E2D}"), Ordering::Less);
            assert_eq!(order.compare("p/z", "p/\u{e9}"), Ordering::Less);
            assert_eq!(order.compare("p/\u{e9}", "p/\u{1F600}"), Ordering::Less);
        }
    }

    #[test]
    fn a_directory_sorts_as_its_name_and_a_slash() {
        for order in BOTH {
            let c = |a, b| order.compare_child(a, b);
            // The directory `a` against its siblings in one directory.
            assert_eq!(c(("a.b", false), ("a", true)), Ordering::Less);
            assert_eq!(c(("a-b", false), ("a", true)), Ordering::Less);
            assert_eq!(c(("a", true), ("a0", false)), Ordering::Less);
            assert_eq!(c(("a", true), ("ab", false)), Ordering::Less);
            assert_eq!(c(("a", true), ("a.b", true)), Ordering::Greater);
            // Sorting by the plain file name gets `a` vs `a.b` wrong.
            assert_eq!(order.compare("a", "a.b"), Ordering::Less);
            let mut children = [("a0", false), ("a", true), ("a.b", false), ("a-", true)];
            order.sort_children(&mut children, |c| *c);
            assert_eq!(
                children,
                [("a-", true), ("a.b", false), ("a", true), ("a0", false)]
            );
        }
    }

    #[test]
    fn a_name_out_of_order_or_repeated_is_refused() {
        let mut check = OrderCheck::new(Side::Dest, NameOrder::Utf8);
        for name in ["a", "a.b", "a/b", "a0"] {
            assert_eq!(check.accept(name), Ok(()), "{name}");
        }
        let e = check.accept("a/c").expect_err("backwards");
        assert_eq!(
            e,
            OrderError {
                side: Side::Dest,
                before: "a0".into(),
                after: "a/c".into(),
            }
        );
        assert_eq!(
            e.to_string(),
            "the destination is not in name order: \"a/c\" came after \"a0\""
        );
        assert!(check.accept("a0").is_err(), "a repeated name");
        assert_eq!(check.accept("b"), Ok(()));
    }

    #[test]
    fn a_listing_in_the_other_order_is_refused() {
        let listed = sorted(NameOrder::Utf16, &["p/\u{FF01}", "p/\u{1F600}"]);
        let mut utf8 = OrderCheck::new(Side::Dest, NameOrder::Utf8);
        assert!(utf8.accept(&listed[0]).is_ok());
        assert!(utf8.accept(&listed[1]).is_err());
        let mut utf16 = OrderCheck::new(Side::Dest, NameOrder::Utf16);
        assert!(listed.iter().all(|n| utf16.accept(n).is_ok()));
    }
}
