//! The eager-Offer handshake as one pure decision, shared by both ends so they
//! cannot disagree.
//!
//! An eager client sends `Offer{eager}`, `Start{0}`, the whole file and its Trailer
//! without waiting. The relay's first frame decides what happens to that stream,
//! and it decides from its own state only, never from how far the client got:
//!
//! | relay's first frame           | relay reads the bytes? | client                                   |
//! |-------------------------------|------------------------|------------------------------------------|
//! | `Reject`                      | no (stream stopped)    | fails the file with the Reject's code    |
//! | `Plan{resume_offset: 0}`      | yes, from 0            | finishes sending, then reads the Receipt |
//! | `Plan{resume_offset: n > 0}`  | no (stream stopped)    | re-offers, not eagerly, on a new stream  |
//!
//! The client acts on the frame, whatever moment it arrives: before its first
//! byte, mid-body, after the Trailer, or while it already waits for a Receipt. A
//! stream the relay stopped is therefore never read as a lost connection, and a
//! redirect never costs a retry. (Before this rule the client looked at the stop
//! code of a failed write, which on a long path arrives after the client has
//! finished writing: every rerun of an interrupted upload failed.)

use crate::protocol::{Failure, Message};

/// What the relay does with an eager stream once it knows its resume point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayTakes {
    /// Reads the stream's bytes from offset 0.
    BytesFromZero,
    /// Sends the Plan, stops the stream unread; the client resumes on a new one.
    Redirect { resume_offset: u64 },
}

/// The relay's side of the table above (after a valid Offer).
pub fn relay_takes(eager: bool, resume_offset: u64) -> Option<RelayTakes> {
    match (eager, resume_offset) {
        (false, _) => None,
        (true, 0) => Some(RelayTakes::BytesFromZero),
        (true, n) => Some(RelayTakes::Redirect { resume_offset: n }),
    }
}

/// The client's reading of the first frame on an eager stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EagerAnswer {
    /// The relay reads this stream from 0: keep sending, then await the Receipt.
    Proceed,
    /// Staged blocks exist: abandon this stream and re-offer plainly.
    Redirect { resume_offset: u64 },
    /// The Offer was refused.
    Refused(Failure),
    /// Anything else is a protocol violation by the relay.
    Unexpected(&'static str),
}

pub fn eager_answer(first: &Message) -> EagerAnswer {
    match first {
        Message::Plan(p) => match relay_takes(true, p.resume_offset) {
            Some(RelayTakes::Redirect { resume_offset }) => EagerAnswer::Redirect { resume_offset },
            _ => EagerAnswer::Proceed,
        },
        Message::Reject(f) => EagerAnswer::Refused(f.clone()),
        other => EagerAnswer::Unexpected(other.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Code, Plan, Receipt, Timings};

    fn plan(resume_offset: u64) -> Message {
        Message::Plan(Plan {
            tag: "00".into(),
            block_size: 16 << 20,
            resume_offset,
            checkpoint: String::new(),
            relay_version: None,
        })
    }

    #[test]
    fn both_ends_read_the_same_table() {
        for offset in [0u64, 64, 16 << 20, u64::MAX] {
            let relay = relay_takes(true, offset);
            let client = eager_answer(&plan(offset));
            match relay {
                Some(RelayTakes::BytesFromZero) => assert_eq!(client, EagerAnswer::Proceed),
                Some(RelayTakes::Redirect { resume_offset }) => {
                    assert_eq!(client, EagerAnswer::Redirect { resume_offset })
                }
                None => panic!("an eager stream always gets a decision"),
            }
        }
        assert_eq!(relay_takes(false, 5), None);
    }

    #[test]
    fn reject_and_strangers() {
        let f = Failure {
            code: Code::Unauthorized,
            message: "no".into(),
            existing: None,
            requests: None,
            outcome_unknown: false,
        };
        assert_eq!(
            eager_answer(&Message::Reject(f.clone())),
            EagerAnswer::Refused(f)
        );
        let receipt = Message::Receipt(Receipt {
            container: "c".into(),
            blob: "b".into(),
            etag: "e".into(),
            size: 0,
            sha256: String::new(),
            block_size: 0,
            blocks: 0,
            bytes_resumed: 0,
            bytes_received: 0,
            retries: 0,
            requests: 0,
            earlier_commit: false,
            content_md5: None,
            timings: Timings::default(),
        });
        assert_eq!(eager_answer(&receipt), EagerAnswer::Unexpected("Receipt"));
    }
}
