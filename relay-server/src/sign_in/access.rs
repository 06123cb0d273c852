//! What a stream asks to do with a container, below both the tokens file's
//! grants (`tokens_file`) and the checks that read them (`auth`).

/// What a stream asks to do with a container: an Offer writes, a Fetch or a
/// List reads, a Delete deletes. Each is granted apart: none implies another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Delete,
}

/// The rights of one grant on one container, each apart: the tokens file's
/// access letters (`r`, `w`, `d`) and `--entra-grant`'s modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rights {
    pub read: bool,
    pub write: bool,
    pub delete: bool,
}

impl Rights {
    /// Whether these rights cover `access`.
    pub fn allows(self, access: Access) -> bool {
        match access {
            Access::Read => self.read,
            Access::Write => self.write,
            Access::Delete => self.delete,
        }
    }

    /// Both grants' rights.
    pub fn union(self, other: Rights) -> Rights {
        Rights {
            read: self.read || other.read,
            write: self.write || other.write,
            delete: self.delete || other.delete,
        }
    }

    /// Access letters (`r`, `w`, `d`, each at most once, in any order:
    /// `rw`, `wd`, `rwd`); `None` for an empty string, a repeated letter or
    /// any other character.
    pub fn parse(letters: &str) -> Option<Rights> {
        let mut r = Rights::default();
        if letters.is_empty() {
            return None;
        }
        for c in letters.chars() {
            let slot = match c {
                'r' => &mut r.read,
                'w' => &mut r.write,
                'd' => &mut r.delete,
                _ => return None,
            };
            if *slot {
                return None;
            }
            *slot = true;
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_letters_parse_each_right_apart() {
        let r = |read, write, delete| {
            Some(Rights {
                read,
                write,
                delete,
            })
        };
        assert_eq!(Rights::parse("r"), r(true, false, false));
        assert_eq!(Rights::parse("w"), r(false, true, false));
        assert_eq!(Rights::parse("d"), r(false, false, true));
        assert_eq!(Rights::parse("rw"), r(true, true, false));
        assert_eq!(Rights::parse("wd"), r(false, true, true));
        assert_eq!(Rights::parse("rwd"), r(true, true, true));
        assert_eq!(Rights::parse("dwr"), r(true, true, true));
        for bad in ["", "x", "rr", "rwdd", "R", "D", "r w", "rwx", "dd"] {
            assert_eq!(Rights::parse(bad), None, "{bad:?}");
        }
        // Delete is implied by nothing else.
        let rw = Rights::parse("rw").unwrap_or_default();
        assert!(!rw.allows(Access::Delete));
        assert!(Rights::parse("d").is_some_and(|d| d.allows(Access::Delete)
            && !d.allows(Access::Read)
            && !d.allows(Access::Write)));
    }
}
