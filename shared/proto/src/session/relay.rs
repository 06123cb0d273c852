//! The relay's side of one file on one stream, after a valid Offer:
//!
//! ```text
//! Prepare ─▶ Prepared ─┬─ refused ───────────────▶ Reject
//!                      ├─ already committed ─────▶ Receipt (no bytes)
//!                      └─ writable ─▶ SendPlan ─┬─ eager, offset > 0 ─▶ Redirect
//!                                               ├─ eager, offset 0 ───▶ Receive from 0
//!                                               └─ plain ─▶ ReadFrame(Start) ─▶ Receive
//! Receive ─▶ ReadFrame(Trailer) ─▶ FinishStaging ─▶ verify ─▶ Commit ─▶ Receipt
//! ```
//!
//! Every end is an `Action::End`, so a driver's last step is one exhaustive
//! match. Any failure after the Plan ends in `End::Fail` (an Error frame); nothing is
//! committed unless the SHA-256 of every received byte equals the client's Trailer
//! and, when the Offer carried one, the manifest's. `Redirect` is an ordinary end,
//! not a failure: an eager stream for a file with staged blocks is left unread and
//! the client resumes on a new stream (`crate::exchange`).

use std::time::{Duration, Instant};

use crate::codec::FrameError;
use crate::exchange::{RelayTakes, relay_takes};
use crate::protocol::{Code, Encoding, Failure, Message, Plan, Receipt, Timings};

/// How long a peer may take to send a control frame (Start, Trailer).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// The accepted Offer, as far as the session needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub container: String,
    pub blob: String,
    pub size: u64,
    pub block_size: u64,
    pub eager: bool,
    /// The whole file's SHA-256 from the Offer (a manifest's, or a re-run's proof).
    pub sha256: Option<String>,
    /// The connection's handshake agreed on compressed chunks (ALPN): only
    /// then may a Start name an encoding.
    pub compression_agreed: bool,
}

/// Storage counters that go into the Receipt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub retries: u32,
    pub requests: u32,
}

/// A committed blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub etag: String,
    pub size: u64,
    pub sha256: String,
    pub usage: Usage,
    /// Found committed by an earlier commit, not written now (`Receipt`).
    pub earlier_commit: bool,
    /// The Content-MD5 this commit gave the blob (hex), if any.
    pub content_md5: Option<String>,
}

/// What storage said before any byte moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The destination is writable; blocks up to `offset` are staged and reusable.
    Writable {
        tag: String,
        offset: u64,
        checkpoint: String,
    },
    /// The blob already holds exactly the file the Offer's SHA-256 names.
    AlreadyCommitted(Committed),
}

/// What the stager produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub sha256: String,
    pub blocks: u64,
    pub bytes_resumed: u64,
    pub bytes_received: u64,
}

#[derive(Debug)]
pub enum Event {
    /// Storage answered `Action::Prepare`.
    Prepared(Result<Prepared, Failure>),
    /// The Plan went out (or could not).
    PlanSent(Result<(), FrameError>),
    /// A frame arrived for `Action::ReadFrame`, or reading it failed.
    Frame(Result<Message, FrameError>),
    /// `Action::ReadFrame`'s timeout passed first.
    TimedOut,
    /// The stream's bytes all arrived and were cut into blocks (or failed).
    Received(Result<(), Failure>),
    /// Every block is staged (or staging failed).
    Staged(Result<Staged, Failure>),
    /// Storage answered `Action::Commit`.
    Committed(Result<Committed, Failure>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Check the destination (and, for an Offer with a SHA-256 whose blob exists,
    /// whether it already holds that file); find the resume point.
    Prepare,
    SendPlan(Plan),
    /// Read the next frame within `timeout`.
    ReadFrame {
        timeout: Duration,
    },
    /// Receive the file's bytes after the Start: from the resume point, or from
    /// zero when the client's source differs from the staged blocks; as the
    /// Start said they travel (plain, or chunks when the handshake agreed).
    Receive {
        from_resume_point: bool,
        encoding: Option<Encoding>,
    },
    /// Wait until every block is staged.
    FinishStaging,
    /// Publish the staged bytes: their SHA-256 matched every expected one.
    Commit,
    /// The session is over: the driver says so on the stream and stops.
    End(End),
}

/// How a stream ends: what the driver writes (or leaves unread) last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Leave this eager stream unread; the client resumes on a new stream.
    Redirect { resume_offset: u64 },
    /// Before the Plan: a Reject frame.
    Reject(Failure),
    /// After the Plan: an Error frame; nothing committed.
    Fail(Failure),
    /// The file is committed: a Receipt.
    Receipt(Receipt),
}

impl Action {
    /// Whether the session is over after this action.
    pub fn is_end(&self) -> bool {
        matches!(self, Action::End(_))
    }

    fn fail(f: Failure) -> Self {
        Action::End(End::Fail(f))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Preparing,
    SendingPlan,
    AwaitingStart,
    Receiving,
    AwaitingTrailer,
    Staging,
    Committing,
    Ended,
}

/// One file on one stream, from the accepted Offer to its end.
#[derive(Debug)]
pub struct RelaySession {
    offer: Accepted,
    state: State,
    resume_offset: u64,
    trailer: Option<String>,
    staged: Option<Staged>,
    /// When each phase began, for the Receipt's timings.
    receive_from: Option<Instant>,
    receive_ms: u64,
    stage_from: Option<Instant>,
    stage_wait_ms: u64,
    commit_from: Option<Instant>,
}

fn ms(from: Option<Instant>, now: Instant) -> u64 {
    from.map(|t| now.saturating_duration_since(t).as_millis() as u64)
        .unwrap_or(0)
}

/// A control frame that could not be read: truncated streams may resume.
fn frame_failure(what: &str, e: FrameError) -> Failure {
    let code = match e {
        FrameError::Closed | FrameError::Truncated => Code::Truncated,
        _ => Code::InvalidOffer,
    };
    Failure::new(code, format!("{what}: {e}"))
}

impl RelaySession {
    /// A session for an Offer the relay accepted; its first action is `Prepare`.
    pub fn new(offer: Accepted) -> (Self, Action) {
        let session = Self {
            offer,
            state: State::Preparing,
            resume_offset: 0,
            trailer: None,
            staged: None,
            receive_from: None,
            receive_ms: 0,
            stage_from: None,
            stage_wait_ms: 0,
            commit_from: None,
        };
        (session, Action::Prepare)
    }

    /// Takes one event at time `now`; returns what the driver does next.
    pub fn handle(&mut self, event: Event, now: Instant) -> Action {
        let action = match (self.state, event) {
            (State::Preparing, Event::Prepared(p)) => self.prepared(p),
            (State::SendingPlan, Event::PlanSent(r)) => self.plan_sent(r),
            (State::AwaitingStart, Event::Frame(f)) => self.start(f, now),
            (State::AwaitingStart, Event::TimedOut) => {
                Action::fail(Failure::new(Code::InvalidOffer, "no Start within 30 s"))
            }
            (State::Receiving, Event::Received(r)) => match r {
                Ok(()) => {
                    self.receive_ms = ms(self.receive_from, now);
                    self.state = State::AwaitingTrailer;
                    Action::ReadFrame {
                        timeout: CONTROL_TIMEOUT,
                    }
                }
                Err(f) => Action::fail(f),
            },
            (State::AwaitingTrailer, Event::Frame(f)) => self.trailer(f, now),
            (State::AwaitingTrailer, Event::TimedOut) => {
                Action::fail(Failure::new(Code::Truncated, "no Trailer within 30 s"))
            }
            (State::Staging, Event::Staged(r)) => self.staged(r, now),
            (State::Committing, Event::Committed(r)) => match r {
                Ok(c) => self.receipt(c, now),
                Err(f) => Action::fail(f),
            },
            (state, event) => Action::fail(Failure::new(
                Code::Internal,
                format!("relay session: {event:?} while {state:?}"),
            )),
        };
        if action.is_end() {
            self.state = State::Ended;
        }
        action
    }

    fn prepared(&mut self, p: Result<Prepared, Failure>) -> Action {
        match p {
            Err(f) => Action::End(End::Reject(f)),
            Ok(Prepared::AlreadyCommitted(c)) => Action::End(End::Receipt(Receipt {
                container: self.offer.container.clone(),
                blob: self.offer.blob.clone(),
                etag: c.etag,
                size: c.size,
                sha256: c.sha256.to_ascii_lowercase(),
                block_size: self.offer.block_size,
                blocks: 0,
                bytes_resumed: self.offer.size,
                bytes_received: 0,
                retries: c.usage.retries,
                requests: c.usage.requests,
                earlier_commit: true,
                content_md5: c.content_md5,
                timings: Timings::default(),
            })),
            Ok(Prepared::Writable {
                tag,
                offset,
                checkpoint,
            }) => {
                self.resume_offset = offset;
                self.state = State::SendingPlan;
                Action::SendPlan(Plan {
                    tag,
                    block_size: self.offer.block_size,
                    resume_offset: offset,
                    checkpoint,
                    // The driver fills it in: the session knows no build.
                    relay_version: None,
                })
            }
        }
    }

    fn plan_sent(&mut self, sent: Result<(), FrameError>) -> Action {
        if let Err(e) = sent {
            return Action::fail(frame_failure("sending the Plan", e));
        }
        if let Some(RelayTakes::Redirect { resume_offset }) =
            relay_takes(self.offer.eager, self.resume_offset)
        {
            return Action::End(End::Redirect { resume_offset });
        }
        // Plain, or eager and read from 0: either way a Start comes first (an eager
        // client sent `Start{0}` right after its Offer).
        self.state = State::AwaitingStart;
        Action::ReadFrame {
            timeout: CONTROL_TIMEOUT,
        }
    }

    fn start(&mut self, frame: Result<Message, FrameError>, now: Instant) -> Action {
        let start = match frame {
            Ok(Message::Start(s)) => s,
            Ok(other) => {
                return Action::fail(Failure::new(
                    Code::InvalidOffer,
                    format!("expected Start, got {}", other.name()),
                ));
            }
            Err(e) => return Action::fail(frame_failure("reading Start", e)),
        };
        let from_resume_point = if start.offset == self.resume_offset {
            true
        } else if start.offset == 0 {
            false
        } else {
            return Action::fail(Failure::new(
                Code::InvalidOffer,
                format!(
                    "Start at {} is neither 0 nor the resume offset {}",
                    start.offset, self.resume_offset
                ),
            ));
        };
        if start.encoding.is_some() && !self.offer.compression_agreed {
            return Action::fail(Failure::new(
                Code::BadEncoding,
                "compressed chunks were not agreed in the handshake (ALPN); nothing committed",
            ));
        }
        self.state = State::Receiving;
        self.receive_from = Some(now);
        Action::Receive {
            from_resume_point,
            encoding: start.encoding,
        }
    }

    fn trailer(&mut self, frame: Result<Message, FrameError>, now: Instant) -> Action {
        match frame {
            Ok(Message::Trailer(t)) => {
                self.trailer = Some(t.sha256);
                self.state = State::Staging;
                self.stage_from = Some(now);
                Action::FinishStaging
            }
            Ok(other) => Action::fail(Failure::new(
                Code::InvalidOffer,
                format!("expected Trailer, got {}", other.name()),
            )),
            Err(e) => Action::fail(frame_failure("reading the Trailer", e)),
        }
    }

    /// Verify before publish: every expected SHA-256 must equal the received one.
    fn staged(&mut self, staged: Result<Staged, Failure>, now: Instant) -> Action {
        let staged = match staged {
            Ok(s) => s,
            Err(f) => return Action::fail(f),
        };
        self.stage_wait_ms = ms(self.stage_from, now);
        let client = self.trailer.clone().unwrap_or_default();
        let mut expected = vec![("the client", client)];
        if let Some(m) = &self.offer.sha256 {
            expected.push(("the manifest", m.clone()));
        }
        for (who, theirs) in expected {
            if !theirs.eq_ignore_ascii_case(&staged.sha256) {
                return Action::fail(Failure::new(
                    Code::HashMismatch,
                    format!(
                        "SHA-256 mismatch: received bytes hash to {}, {who} has {theirs}; nothing committed",
                        staged.sha256
                    ),
                ));
            }
        }
        self.staged = Some(staged);
        self.state = State::Committing;
        self.commit_from = Some(now);
        Action::Commit
    }

    fn receipt(&mut self, c: Committed, now: Instant) -> Action {
        let staged = self.staged.take().unwrap_or(Staged {
            sha256: c.sha256.clone(),
            blocks: 0,
            bytes_resumed: 0,
            bytes_received: 0,
        });
        Action::End(End::Receipt(Receipt {
            container: self.offer.container.clone(),
            blob: self.offer.blob.clone(),
            etag: c.etag,
            size: c.size,
            sha256: staged.sha256,
            block_size: self.offer.block_size,
            blocks: staged.blocks,
            bytes_resumed: staged.bytes_resumed,
            bytes_received: staged.bytes_received,
            retries: c.usage.retries,
            requests: c.usage.requests,
            earlier_commit: c.earlier_commit,
            content_md5: c.content_md5,
            timings: Timings {
                receive_ms: self.receive_ms,
                stage_wait_ms: self.stage_wait_ms,
                commit_ms: ms(self.commit_from, now),
            },
        }))
    }

    /// The trailer's SHA-256 and the manifest's, for storage's own last check.
    pub fn expected(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(t) = &self.trailer {
            out.push(("the client", t.clone()));
        }
        if let Some(m) = &self.offer.sha256 {
            out.push(("the manifest", m.clone()));
        }
        out
    }
}
