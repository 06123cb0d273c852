//! One blob's download decisions, apart from I/O (in the manner of
//! `relay_proto::session::client`): what to do about a local file already
//! there, where to start (a partial file the same version of the blob left),
//! what the relay's `Source` means, and whether the bytes written may take
//! the final name. The driver (`fetch`) performs each action and feeds back
//! what happened.
//!
//! ```text
//! local file? ─┬─ none ──────────────────────────────────▶ Fetch{partial's length, etag}
//!              ├─ same size ─▶ Fetch{size, compare only} ─▶ Source
//!              │     ├─ sealed / Content-MD5 ─▶ HashLocal ─▶ identical: Skip (sha256, md5)
//!              │     ├─ ranges, and this machine's index knows the file ─▶ Skip (index)
//!              │     └─ differs, or cannot be compared ─▶ refuse (never) or Fetch
//!              └─ differs ─▶ refuse (never) or Fetch (always, if-different, if-newer)
//! Fetch ─▶ Source ─┬─ a resume nothing checks whole (ranges) ─▶ Fetch{0}
//!                  └─▶ Receive{from, fresh} ─▶ Received ─▶ verify ─▶ Place
//!                                                  └─ mismatch ─▶ Fail (retryable, discard)
//! ```

use relay_proto::protocol::{Check, Code, Failure, Source};

use crate::transfer::overwrite::OverwriteMode;

/// The blob as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub size: u64,
    pub etag: String,
    pub last_modified: Option<u64>,
}

/// What is at the final name now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    Absent,
    /// A regular file: its size and modification time (seconds since the
    /// epoch); `indexed`: this machine's index says it placed this very file
    /// (size, times, inode unchanged since) from the listed version of the blob.
    File {
        size: u64,
        mtime: i64,
        indexed: bool,
    },
    Folder,
    Symlink,
    Other,
}

/// A partial file of an earlier run for this very blob (its sidecar named
/// this container and blob): its length and the version it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub len: u64,
    pub etag: String,
    pub size: u64,
}

/// The local file's hashes, for `Action::HashLocal`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hashes {
    pub sha256: String,
    pub md5: String,
}

/// What the driver saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    LocalHashed(Hashes),
    /// The relay's Source for the last Fetch.
    Source(Source),
    /// The relay refused the Fetch or failed the stream.
    Refused(Failure),
    /// Every section up to `Sent` was written: the whole partial file's
    /// length and hashes (the prefix re-hashed on a resume).
    Received {
        len: u64,
        hashes: Hashes,
    },
}

/// Why the file failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub code: &'static str,
    pub message: String,
    /// Worth another attempt (the driver's retries; each starts from what is
    /// on disk).
    pub retryable: bool,
    /// The partial file is worth nothing (its bytes failed their check, the
    /// blob is gone or keeps changing): removed, never resumed.
    pub discard: bool,
}

/// How a skipped file was found to need nothing (`compared` in the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// Its SHA-256 equals the seal's.
    Sha256,
    /// Its MD5 equals the blob's Content-MD5.
    Md5,
    /// This machine placed it from this version, and it is unchanged since.
    Index,
    /// `--overwrite=if-newer`: modified after the blob.
    Mtime,
}

impl Compared {
    pub fn label(self) -> &'static str {
        match self {
            Compared::Sha256 => "sha256",
            Compared::Md5 => "md5",
            Compared::Index => "index",
            Compared::Mtime => "mtime",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Hash the file at the final name: SHA-256, and MD5 when `md5`.
    HashLocal {
        md5: bool,
    },
    /// Open a stream: `Fetch{offset, etag}`; with `compare_only` the driver
    /// wants only the Source and stops the stream after it.
    Fetch {
        offset: u64,
        etag: Option<String>,
        compare_only: bool,
    },
    /// Receive the sections from `from`: `fresh` empties the partial file and
    /// records the Source's version in its sidecar first; otherwise the
    /// partial's first `from` bytes are re-hashed and kept.
    Receive {
        from: u64,
        fresh: bool,
    },
    /// fsync, then rename the partial file to the final name.
    Place {
        check: Check,
        resumed: u64,
    },
    /// Nothing to do: `reason` and how it was compared, for the report.
    Skip {
        reason: String,
        compared: Compared,
    },
    Fail(Failed),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Comparing { indexed: bool },
    Hashing { source: Source },
    Fetching { offset: u64 },
    Receiving { source: Source, from: u64 },
    Ended,
}

/// Restarts from 0 one file may take (the blob changed while it was read)
/// before it fails.
pub const MAX_RESTARTS: u32 = 3;

#[derive(Debug)]
pub struct Session {
    blob: Blob,
    overwrite: OverwriteMode,
    partial: Option<Partial>,
    state: State,
    restarts: u32,
}

fn fail(code: &'static str, message: impl Into<String>, retryable: bool) -> Action {
    Action::Fail(Failed {
        code,
        message: message.into(),
        retryable,
        discard: false,
    })
}

/// A failure after which the partial file is worth nothing.
fn discard(code: &'static str, message: impl Into<String>, retryable: bool) -> Action {
    Action::Fail(Failed {
        code,
        message: message.into(),
        retryable,
        discard: true,
    })
}

fn skip(reason: &str, compared: Compared) -> Action {
    Action::Skip {
        reason: reason.into(),
        compared,
    }
}

/// Why a local file is not replaced, and how to replace it.
fn exists_message(what: &str) -> String {
    format!(
        "a local file of this name differs from the blob ({what}); not overwritten without --overwrite (always, if-different, if-newer)"
    )
}

/// A local file nothing can compare with a blob that has no SHA-256 or MD5.
const UNCOMPARABLE: &str = "a local file of this name cannot be compared with the blob: the blob carries no SHA-256 or MD5, and this machine's index has no record of placing this very file from this version; not overwritten without --overwrite (always, if-different, if-newer)";

/// Whether two ETags name one version: storage quotes them in headers (the
/// Source's) and not in listings.
pub fn same_etag(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
}

/// An ETag as storage's headers (and so the relay's `If-Match`) write it.
pub fn quoted(etag: &str) -> String {
    if etag.starts_with('"') || etag.is_empty() {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}

fn same_hex(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

impl Session {
    /// `local`: what is at the final name; `partial`: an earlier run's
    /// partial file of this blob, if any.
    pub fn new(
        blob: Blob,
        local: Local,
        partial: Option<Partial>,
        overwrite: OverwriteMode,
    ) -> (Self, Action) {
        let mut s = Self {
            blob,
            overwrite,
            partial,
            state: State::Ended,
            restarts: 0,
        };
        let first = s.first(local);
        (s, first)
    }

    fn first(&mut self, local: Local) -> Action {
        let (size, mtime, indexed) = match local {
            Local::Absent => return self.fetch(),
            Local::Folder => {
                return fail(
                    "in_the_way",
                    "a folder is where the file must be (other blobs are under this name)",
                    false,
                );
            }
            Local::Symlink => {
                return fail(
                    "symlink",
                    "a symbolic link is at the file's name; not followed, not replaced",
                    false,
                );
            }
            Local::Other => return fail("special_file", "not a regular file; refused", false),
            Local::File {
                size,
                mtime,
                indexed,
            } => (size, mtime, indexed),
        };
        let newer_here = self
            .blob
            .last_modified
            .is_some_and(|b| i64::try_from(b).is_ok_and(|b| mtime >= b));
        match self.overwrite {
            OverwriteMode::Always => self.fetch(),
            OverwriteMode::IfNewer if newer_here => {
                skip("the local file is newer than the blob", Compared::Mtime)
            }
            _ if size == self.blob.size => {
                // The Source says how the blob can be compared: a local file
                // is hashed only when a hash can be compared with it.
                self.state = State::Comparing { indexed };
                Action::Fetch {
                    offset: self.blob.size,
                    etag: Some(quoted(&self.blob.etag)),
                    compare_only: true,
                }
            }
            OverwriteMode::Never => fail("exists", exists_message("its size"), false),
            OverwriteMode::IfDifferent | OverwriteMode::IfNewer => self.fetch(),
        }
    }

    /// The download proper: from the partial file when it holds this version.
    fn fetch(&mut self) -> Action {
        let resume = self.partial.as_ref().filter(|p| {
            p.len > 0
                && same_etag(&p.etag, &self.blob.etag)
                && p.size == self.blob.size
                && p.len <= p.size
        });
        let (offset, etag) = match resume {
            Some(p) => (p.len, Some(p.etag.clone())),
            None => (0, None),
        };
        self.state = State::Fetching { offset };
        Action::Fetch {
            offset,
            etag,
            compare_only: false,
        }
    }

    /// Starts over from 0, if restarts remain.
    fn restart(&mut self, why: &str) -> Action {
        self.restarts += 1;
        if self.restarts > MAX_RESTARTS {
            self.state = State::Ended;
            return discard(
                "changed",
                format!("{why}; gave up after {MAX_RESTARTS} restarts"),
                false,
            );
        }
        self.partial = None;
        self.fetch()
    }

    pub fn handle(&mut self, event: Event) -> Action {
        let state = std::mem::replace(&mut self.state, State::Ended);
        match (state, event) {
            (State::Comparing { indexed }, Event::Source(src)) => self.compare(indexed, src),
            (State::Hashing { source }, Event::LocalHashed(local)) => self.hashed(&source, &local),
            (State::Fetching { offset }, Event::Source(src)) => self.source(offset, src),
            (State::Receiving { source, from }, Event::Received { len, hashes }) => {
                self.received(source, from, len, hashes)
            }
            (_, Event::Refused(f)) => match f.code {
                Code::Changed => self.restart("the blob changed while it was read"),
                Code::NotFound => {
                    discard("not_found", format!("no such blob ({})", f.message), false)
                }
                code => fail(code.label(), f.message, code.is_retryable()),
            },
            (state, event) => fail(
                "internal",
                format!("download session: {event:?} in state {state:?}"),
                false,
            ),
        }
    }

    /// The Source of a comparison: hash the local file when the blob can be
    /// compared by a hash, else ask what the index knows.
    fn compare(&mut self, indexed: bool, src: Source) -> Action {
        match src.check {
            Check::Sealed | Check::ContentMd5 => {
                let md5 = src.check == Check::ContentMd5;
                self.state = State::Hashing { source: src };
                Action::HashLocal { md5 }
            }
            Check::Ranges => {
                let same_version =
                    same_etag(&src.etag, &self.blob.etag) && src.size == self.blob.size;
                if indexed && same_version {
                    return skip("identical", Compared::Index);
                }
                self.differs(UNCOMPARABLE.to_string())
            }
        }
    }

    fn hashed(&mut self, src: &Source, local: &Hashes) -> Action {
        let (same, compared, what) = match src.check {
            Check::Sealed => (
                src.sha256
                    .as_deref()
                    .is_some_and(|h| same_hex(h, &local.sha256)),
                Compared::Sha256,
                "its SHA-256",
            ),
            _ => (
                src.content_md5
                    .as_deref()
                    .is_some_and(|h| same_hex(h, &local.md5)),
                Compared::Md5,
                "its MD5",
            ),
        };
        if same && src.size == self.blob.size {
            return skip("identical", compared);
        }
        self.differs(exists_message(what))
    }

    /// A local file that differs (or cannot be compared): refused, or downloaded.
    fn differs(&mut self, why: String) -> Action {
        match self.overwrite {
            OverwriteMode::Never => fail("exists", why, false),
            _ => self.fetch(),
        }
    }

    fn source(&mut self, requested: u64, src: Source) -> Action {
        if src.offset != 0 && src.offset != requested {
            return fail(
                "protocol",
                format!(
                    "the relay sent from {} when asked from {requested}",
                    src.offset
                ),
                false,
            );
        }
        if src.offset > src.size {
            return fail(
                "protocol",
                "the relay's Source starts past the blob's end",
                false,
            );
        }
        let vouched = match src.check {
            Check::Sealed => src.sha256.is_some(),
            Check::ContentMd5 => src.content_md5.is_some(),
            Check::Ranges => true,
        };
        if !vouched {
            return fail(
                "protocol",
                "the relay named a check without its checksum",
                false,
            );
        }
        if src.offset > 0 && src.check == Check::Ranges {
            // Nothing checks a kept prefix of this blob (no seal, no
            // Content-MD5): start from 0 rather than trust it.
            self.partial = None;
            return self.fetch();
        }
        let from = src.offset;
        self.state = State::Receiving { source: src, from };
        Action::Receive {
            from,
            fresh: from == 0,
        }
    }

    fn received(&mut self, src: Source, from: u64, len: u64, h: Hashes) -> Action {
        if len != src.size {
            return fail(
                "truncated",
                format!("the relay's bytes ended at {len} of {}", src.size),
                true,
            );
        }
        let (ok, what) = match src.check {
            Check::Sealed => (
                src.sha256
                    .as_deref()
                    .is_some_and(|s| same_hex(s, &h.sha256)),
                "SHA-256",
            ),
            Check::ContentMd5 => (
                src.content_md5
                    .as_deref()
                    .is_some_and(|s| same_hex(s, &h.md5)),
                "MD5",
            ),
            Check::Ranges => (true, ""),
        };
        if ok {
            return Action::Place {
                check: src.check,
                resumed: from,
            };
        }
        // Bytes that differ from what the blob's checksum says (a bit flipped
        // on the way, a kept prefix that changed on disk): the partial file
        // is thrown away and the file tried again from 0, within --attempts.
        discard(
            "verify",
            format!(
                "the {what} of the bytes written differs from the blob's; the partial file is discarded, nothing placed"
            ),
            true,
        )
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
