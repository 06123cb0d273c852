//! Where a listing got to, so a listing lost midway is taken up at storage's
//! continuation marker of the last page handed on whole, skipping the names
//! of the page in progress that were handed on already. Never by comparing
//! names: storage orders them its own way (Azurite by UTF-16 code units).

use std::collections::HashSet;

use tokio::sync::oneshot;

/// Where a listing got to: storage's marker after the last page handed on
/// whole, the names handed on since (a digest each: a page's worth at most,
/// 16 bytes a name), how many names in all, and whether it was answered
/// for yet (`answered`).
#[derive(Debug, Default)]
pub struct Cursor {
    marker: Option<String>,
    since: HashSet<[u8; 16]>,
    pub handed: u64,
    /// Told at the listing's first answer: the relay's opening frame (or
    /// its first page, from a relay before that frame), or storage's first
    /// page in direct mode. What must not start for a caller who may not
    /// list (a sync's sends) waits for it, and no longer.
    answered: Option<oneshot::Sender<()>>,
}

/// A name's key in `Cursor::since`.
fn digest(name: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(name.as_bytes());
    let mut k = [0u8; 16];
    k.copy_from_slice(&h[..16]);
    k
}

impl Cursor {
    /// A cursor at the start that tells `answered` at the first answer.
    pub fn telling(answered: Option<oneshot::Sender<()>>) -> Self {
        Self {
            answered,
            ..Self::default()
        }
    }

    /// The listing was answered for: told once (nobody may be waiting).
    pub fn answered(&mut self) {
        if let Some(tell) = self.answered.take() {
            let _ = tell.send(());
        }
    }

    /// Where to take the listing up: storage's marker, or the start.
    pub fn marker(&self) -> Option<&str> {
        self.marker.as_deref()
    }

    /// Whether `name` was handed on by an earlier attempt of this listing.
    pub fn passed(&self, name: &str) -> bool {
        self.since.contains(&digest(name))
    }

    pub fn hand(&mut self, name: &str) {
        self.since.insert(digest(name));
        self.handed += 1;
    }

    /// Every name of the pages up to `marker` was handed on: a listing taken
    /// up there sees none of them again.
    pub fn page_ended(&mut self, marker: String) {
        self.marker = Some(marker);
        self.since.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_taken_up_again_skips_what_it_handed_on_since_its_marker() {
        let mut c = Cursor::default();
        assert_eq!(c.marker(), None);
        assert!(!c.passed("") && !c.passed("a"));
        // Azurite's order (UTF-16 code units): the emoji before the
        // full-width mark, the other way round by UTF-8 bytes.
        c.hand("p/\u{1F600}");
        assert!(c.passed("p/\u{1F600}"));
        assert!(!c.passed("p/\u{FF01}"), "not handed on, whatever its order");
        c.page_ended("2!opaque".into());
        assert_eq!(c.marker(), Some("2!opaque"));
        // Names before the marker are storage's to skip now, not ours.
        assert!(!c.passed("p/\u{1F600}"));
        c.hand("p/\u{FF01}");
        assert!(c.passed("p/\u{FF01}") && !c.passed("p/\u{FF5A}"));
        assert_eq!(c.handed, 2);
    }
}
