//! The client's side of one file, across the streams it may take:
//!
//! ```text
//! Offer{eager} ─┬─ Receipt ─────────────────────────────────▶ verify ─▶ Done
//!               ├─ Reject{exists}, never overwrite ─▶ HashWholeFile
//!               │  or Reject{conflict}, replacing one version
//!               │      ─▶ Offer{sha256} ─┬─ Receipt (already committed) ─▶ verify ─▶ Done
//!               │                        └─ Reject ─▶ Fail
//!               ├─ redirected (Plan{offset > 0}) ─▶ Offer, not eager, on a new stream
//!               └─ Reject / Error ─▶ Fail
//! ```
//!
//! Within one stream the driver moves the bytes; this session decides which
//! Offer comes next, where a plain stream starts (`start_offset`: the same-source
//! check), and whether a Receipt names exactly the bytes this client read. A
//! redirect is an ordinary event, not a failure.

use crate::checkpoint::Checkpoint;
use crate::protocol::{Code, Failure, Overwrite, Plan, Receipt};

/// Which existing blob an upload may replace (its Offer's overwrite policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaces {
    /// None: "exists" may be an earlier run's commit of this very file.
    Nothing,
    /// Only the version the user saw (If-Match): "conflict" may be this upload's
    /// own commit whose Receipt was lost (a retry finds the etag moved).
    OneVersion,
    /// Any: the refusal is final.
    AnyVersion,
}

impl From<&Overwrite> for Replaces {
    fn from(o: &Overwrite) -> Self {
        match o {
            Overwrite::Never => Replaces::Nothing,
            Overwrite::IfMatch { .. } => Replaces::OneVersion,
            Overwrite::Always => Replaces::AnyVersion,
        }
    }
}

/// How one stream ended, as far as the protocol goes (a lost connection or an
/// unreadable source end the file in the driver, before any of these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// The relay's Receipt; `sha256` is the whole file's as this client read it
    /// (the one it sent in the Trailer or the Offer).
    Receipt { receipt: Receipt, sha256: String },
    /// A Reject, or an Error after the Plan.
    Refused(Failure),
    /// The relay left an eager stream unread: it has staged blocks to resume.
    Redirected { resume_offset: u64 },
}

#[derive(Debug)]
pub enum Event {
    Stream(StreamEnd),
    /// The whole file's SHA-256, for `Action::HashWholeFile`.
    WholeFileHashed(String),
}

/// Why the file failed, in the protocol's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// The relay refused or failed it.
    Relay(Failure),
    /// The relay broke the protocol (e.g. redirected a stream that was not eager).
    Protocol(String),
    /// The Receipt does not name the bytes this client read.
    Verify(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open a stream and offer the file; eager: bytes follow at once.
    Offer {
        eager: bool,
        sha256: Option<String>,
    },
    /// Hash the whole file (proof for a re-run whose blob may already hold it).
    HashWholeFile,
    /// The file is committed and verified.
    Done(Receipt),
    Fail(Failed),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Offered { eager: bool, with_sha: bool },
    Hashing,
    Ended,
}

/// One file: which Offer next, and what the relay's answers mean.
#[derive(Debug)]
pub struct ClientSession {
    size: u64,
    /// Which blob by this name may be replaced: decides which refusals may hide
    /// a commit that already holds this file.
    replaces: Replaces,
    state: State,
}

impl ClientSession {
    /// A file of `size` bytes; its first action is an eager Offer.
    pub fn new(size: u64, replaces: Replaces) -> (Self, Action) {
        let s = Self {
            size,
            replaces,
            state: State::Offered {
                eager: true,
                with_sha: false,
            },
        };
        let first = Action::Offer {
            eager: true,
            sha256: None,
        };
        (s, first)
    }

    /// A file whose whole SHA-256 is known before any byte is read (a checksum
    /// manifest): the first Offer is plain and carries it, so the relay can
    /// answer with a Receipt if the blob already holds exactly this file, and
    /// commits nothing else.
    pub fn with_sha256(size: u64, replaces: Replaces, sha256: Option<String>) -> (Self, Action) {
        let Some(sha256) = sha256 else {
            return Self::new(size, replaces);
        };
        let s = Self {
            size,
            replaces,
            state: State::Offered {
                eager: false,
                with_sha: true,
            },
        };
        let first = Action::Offer {
            eager: false,
            sha256: Some(sha256),
        };
        (s, first)
    }

    pub fn handle(&mut self, event: Event) -> Action {
        let action = match (self.state, event) {
            (State::Offered { eager, with_sha }, Event::Stream(end)) => {
                self.stream_ended(eager, with_sha, end)
            }
            (State::Hashing, Event::WholeFileHashed(sha256)) => {
                self.state = State::Offered {
                    eager: false,
                    with_sha: true,
                };
                Action::Offer {
                    eager: false,
                    sha256: Some(sha256),
                }
            }
            (state, event) => Action::Fail(Failed::Protocol(format!(
                "client session: {event:?} while {state:?}"
            ))),
        };
        if matches!(action, Action::Done(_) | Action::Fail(_)) {
            self.state = State::Ended;
        }
        action
    }

    fn stream_ended(&mut self, eager: bool, with_sha: bool, end: StreamEnd) -> Action {
        match end {
            StreamEnd::Receipt { receipt, sha256 } => self.verify(receipt, &sha256),
            // A blob by this name exists. If an earlier run (killed after the relay
            // got every byte) committed this very file, the re-run is done: prove
            // it with the file's SHA-256 and let the relay compare. Likewise when
            // replacing one version: the etag moved, maybe by this upload's own
            // commit whose Receipt was lost.
            StreamEnd::Refused(f) if !with_sha && self.may_hide_own_commit(f.code) => {
                self.state = State::Hashing;
                Action::HashWholeFile
            }
            StreamEnd::Refused(f) => Action::Fail(Failed::Relay(f)),
            StreamEnd::Redirected { .. } if eager => {
                self.state = State::Offered {
                    eager: false,
                    with_sha,
                };
                Action::Offer {
                    eager: false,
                    sha256: None,
                }
            }
            StreamEnd::Redirected { .. } => Action::Fail(Failed::Protocol(
                "the relay redirected a stream that was not eager".into(),
            )),
        }
    }

    fn may_hide_own_commit(&self, code: Code) -> bool {
        matches!(
            (code, self.replaces),
            (Code::Exists, Replaces::Nothing) | (Code::Conflict, Replaces::OneVersion)
        )
    }

    /// Accepts a Receipt only if it names exactly the bytes this client read.
    fn verify(&self, receipt: Receipt, sha256: &str) -> Action {
        if !receipt.sha256.eq_ignore_ascii_case(sha256) || receipt.size != self.size {
            return Action::Fail(Failed::Verify(format!(
                "relay receipt ({} bytes, sha256 {}) does not match the source ({} bytes, {sha256})",
                receipt.size, receipt.sha256, self.size
            )));
        }
        Action::Done(receipt)
    }
}

/// The prefix a plain stream must hash before its Start: `Some(offset)` when the
/// Plan offers to resume inside the file, `None` to start at 0.
pub fn prefix_to_check(plan: &Plan, size: u64) -> Option<u64> {
    (plan.resume_offset > 0 && plan.resume_offset <= size).then_some(plan.resume_offset)
}

/// Where a plain stream starts: the Plan's resume offset only if this client's own
/// prefix hashes to the relay's checkpoint (same source), else 0.
pub fn start_offset(plan: &Plan, size: u64, ours: Option<Checkpoint>) -> u64 {
    match prefix_to_check(plan, size) {
        Some(offset) if ours.is_some() && ours == Checkpoint::from_hex(&plan.checkpoint) => offset,
        _ => 0,
    }
}
