//! Every combination of eager × resume × (writable, exists, already committed — a
//! re-run after a lost Receipt) × Start (at the resume point, at 0, elsewhere, not
//! a Start, none) × hashes (match, Trailer differs, manifest differs), each run
//! through the relay's session against an oracle written from the protocol's
//! rules, plus the invariants that hold in every case.

use std::time::{Duration, Instant};

use super::relay::*;
use crate::codec::FrameError;
use crate::protocol::{Code, Encoding, Failure, Message, Start, Trailer};

const SIZE: u64 = 40 << 20;
const BLOCK: u64 = 16 << 20;
const FILE_SHA: &str = "aa";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Storage {
    Writable,
    Exists,
    AlreadyCommitted,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum StartFrame {
    AtResume,
    AtZero,
    Elsewhere,
    NotStart,
    Missing,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Hashes {
    Match,
    TrailerDiffers,
    ManifestDiffers,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    eager: bool,
    resume: u64,
    storage: Storage,
    start: StartFrame,
    hashes: Hashes,
    manifest: bool,
}

fn offer(c: &Case) -> Accepted {
    Accepted {
        container: "c".into(),
        blob: "b".into(),
        size: SIZE,
        block_size: BLOCK,
        eager: c.eager,
        sha256: c.manifest.then(|| match c.hashes {
            Hashes::ManifestDiffers => "bb".to_string(),
            _ => FILE_SHA.to_string(),
        }),
        compression_agreed: false,
    }
}

fn committed() -> Committed {
    Committed {
        etag: "e".into(),
        size: SIZE,
        sha256: FILE_SHA.into(),
        usage: Usage {
            retries: 1,
            requests: 7,
        },
        earlier_commit: false,
        content_md5: None,
    }
}

/// Plays the world (storage, the client, the clock) for one case; returns every
/// action the session asked for.
fn run(c: &Case) -> Vec<Action> {
    let t0 = Instant::now();
    let (mut s, mut action) = RelaySession::new(offer(c));
    let mut actions = vec![];
    for step in 1..20u64 {
        actions.push(action.clone());
        if action.is_end() {
            return actions;
        }
        let now = t0 + Duration::from_millis(10 * step);
        let event = match &action {
            Action::Prepare => Event::Prepared(match c.storage {
                Storage::Writable => Ok(Prepared::Writable {
                    tag: "t".into(),
                    offset: c.resume,
                    checkpoint: "cp".into(),
                }),
                Storage::Exists => Err(Failure {
                    code: Code::Exists,
                    message: "a blob with this name exists (add --overwrite)".into(),
                    existing: None,
                    requests: None,
                    outcome_unknown: false,
                }),
                Storage::AlreadyCommitted => Ok(Prepared::AlreadyCommitted(committed())),
            }),
            Action::SendPlan(_) => Event::PlanSent(Ok(())),
            Action::ReadFrame { .. }
                if actions.iter().any(|a| matches!(a, Action::Receive { .. })) =>
            {
                let sha = match c.hashes {
                    Hashes::TrailerDiffers => "cc",
                    _ => FILE_SHA,
                };
                Event::Frame(Ok(Message::Trailer(Trailer { sha256: sha.into() })))
            }
            Action::ReadFrame { .. } => match c.start {
                StartFrame::AtResume => Event::Frame(Ok(Message::Start(Start::plain(c.resume)))),
                StartFrame::AtZero => Event::Frame(Ok(Message::Start(Start::plain(0)))),
                StartFrame::Elsewhere => Event::Frame(Ok(Message::Start(Start::plain(7)))),
                StartFrame::NotStart => Event::Frame(Ok(Message::Trailer(Trailer {
                    sha256: FILE_SHA.into(),
                }))),
                StartFrame::Missing => Event::TimedOut,
            },
            Action::Receive { .. } => Event::Received(Ok(())),
            Action::FinishStaging => Event::Staged(Ok(Staged {
                sha256: FILE_SHA.into(),
                blocks: 3,
                bytes_resumed: 0,
                bytes_received: SIZE,
            })),
            Action::Commit => Event::Committed(Ok(committed())),
            end => panic!("no event after an end: {end:?}"),
        };
        action = s.handle(event, now);
    }
    panic!("{c:?} did not end: {actions:?}")
}

/// What the protocol says must happen (docs/ARCHITECTURE.md, `exchange`).
fn oracle(c: &Case) -> Result<(), Code> {
    match c.storage {
        Storage::Exists => return Err(Code::Exists),
        Storage::AlreadyCommitted => return Ok(()),
        Storage::Writable => {}
    }
    if c.eager && c.resume > 0 {
        return Ok(()); // redirected, checked apart
    }
    match c.start {
        StartFrame::Missing | StartFrame::NotStart => return Err(Code::InvalidOffer),
        StartFrame::Elsewhere => return Err(Code::InvalidOffer),
        StartFrame::AtResume | StartFrame::AtZero => {}
    }
    match c.hashes {
        Hashes::Match => Ok(()),
        Hashes::TrailerDiffers => Err(Code::HashMismatch),
        Hashes::ManifestDiffers if c.manifest => Err(Code::HashMismatch),
        Hashes::ManifestDiffers => Ok(()),
    }
}

fn cases() -> Vec<Case> {
    let mut out = vec![];
    for eager in [false, true] {
        for resume in [0, BLOCK, 2 * BLOCK] {
            for storage in [
                Storage::Writable,
                Storage::Exists,
                Storage::AlreadyCommitted,
            ] {
                for start in [
                    StartFrame::AtResume,
                    StartFrame::AtZero,
                    StartFrame::Elsewhere,
                    StartFrame::NotStart,
                    StartFrame::Missing,
                ] {
                    for hashes in [
                        Hashes::Match,
                        Hashes::TrailerDiffers,
                        Hashes::ManifestDiffers,
                    ] {
                        for manifest in [false, true] {
                            out.push(Case {
                                eager,
                                resume,
                                storage,
                                start,
                                hashes,
                                manifest,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_combination_ends_as_the_protocol_says() {
    let all = cases();
    assert_eq!(all.len(), 540);
    for c in &all {
        let actions = run(c);
        let end = actions.last().expect("an end");
        let plan_sent = actions.iter().any(|a| matches!(a, Action::SendPlan(_)));
        let received = actions.iter().any(|a| matches!(a, Action::Receive { .. }));
        let commits = actions.iter().filter(|a| **a == Action::Commit).count();
        // Invariants, whatever the case.
        assert_eq!(actions.iter().filter(|a| a.is_end()).count(), 1, "{c:?}");
        assert!(commits <= 1, "{c:?}");
        if commits == 1 {
            assert!(received, "committed without receiving: {c:?}");
        }
        match end {
            Action::End(End::Reject(_)) => assert!(!plan_sent, "Reject after a Plan: {c:?}"),
            Action::End(End::Fail(_)) => assert!(plan_sent, "Error before a Plan: {c:?}"),
            _ => {}
        }
        // The case's expected end.
        if c.storage == Storage::Writable && c.eager && c.resume > 0 {
            assert_eq!(
                *end,
                Action::End(End::Redirect {
                    resume_offset: c.resume
                }),
                "{c:?}"
            );
            assert!(!received, "read a redirected stream: {c:?}");
            continue;
        }
        match (oracle(c), end) {
            (Ok(()), Action::End(End::Receipt(r))) => {
                assert_eq!(r.sha256, FILE_SHA, "{c:?}");
                if c.storage == Storage::AlreadyCommitted {
                    // The lost-Receipt re-run: nothing sent, nothing staged.
                    assert!(!plan_sent && !received, "{c:?}");
                    assert_eq!((r.bytes_received, r.bytes_resumed, r.blocks), (0, SIZE, 0));
                } else {
                    assert_eq!(commits, 1, "{c:?}");
                }
            }
            (Err(code), Action::End(End::Reject(f) | End::Fail(f))) => {
                assert_eq!(f.code, code, "{c:?}: {}", f.message);
                assert_eq!(commits, 0, "{c:?}");
            }
            (want, got) => panic!("{c:?}: expected {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn start_at_zero_restarts_and_at_the_resume_point_resumes() {
    for (offset, from_resume_point) in [(BLOCK, true), (0, false)] {
        let c = Case {
            eager: false,
            resume: BLOCK,
            storage: Storage::Writable,
            start: if offset == 0 {
                StartFrame::AtZero
            } else {
                StartFrame::AtResume
            },
            hashes: Hashes::Match,
            manifest: false,
        };
        let actions = run(&c);
        assert!(
            actions.contains(&Action::Receive {
                from_resume_point,
                encoding: None
            }),
            "{actions:?}"
        );
    }
}

#[test]
fn timings_come_from_the_instants_passed_in() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let c = Case {
        eager: false,
        resume: 0,
        storage: Storage::Writable,
        start: StartFrame::AtZero,
        hashes: Hashes::Match,
        manifest: false,
    };
    let (mut s, _) = RelaySession::new(offer(&c));
    let plan = s.handle(
        Event::Prepared(Ok(Prepared::Writable {
            tag: "t".into(),
            offset: 0,
            checkpoint: "cp".into(),
        })),
        at(0),
    );
    assert!(matches!(plan, Action::SendPlan(_)));
    s.handle(Event::PlanSent(Ok(())), at(1));
    s.handle(Event::Frame(Ok(Message::Start(Start::plain(0)))), at(100));
    s.handle(Event::Received(Ok(())), at(1100));
    s.handle(
        Event::Frame(Ok(Message::Trailer(Trailer {
            sha256: FILE_SHA.into(),
        }))),
        at(1200),
    );
    let staged = Staged {
        sha256: FILE_SHA.into(),
        blocks: 3,
        bytes_resumed: 0,
        bytes_received: SIZE,
    };
    assert_eq!(
        s.handle(Event::Staged(Ok(staged)), at(1500)),
        Action::Commit
    );
    let Action::End(End::Receipt(r)) = s.handle(Event::Committed(Ok(committed())), at(1750)) else {
        panic!("no Receipt");
    };
    assert_eq!(
        (
            r.timings.receive_ms,
            r.timings.stage_wait_ms,
            r.timings.commit_ms
        ),
        (1000, 300, 250)
    );
    assert_eq!((r.retries, r.requests), (1, 7));
}

#[test]
fn broken_streams_fail_as_truncated_and_events_out_of_order_fail() {
    let c = Case {
        eager: false,
        resume: 0,
        storage: Storage::Writable,
        start: StartFrame::AtZero,
        hashes: Hashes::Match,
        manifest: false,
    };
    let now = Instant::now();
    let (mut s, _) = RelaySession::new(offer(&c));
    s.handle(
        Event::Prepared(Ok(Prepared::Writable {
            tag: "t".into(),
            offset: 0,
            checkpoint: "cp".into(),
        })),
        now,
    );
    s.handle(Event::PlanSent(Ok(())), now);
    let Action::End(End::Fail(f)) = s.handle(Event::Frame(Err(FrameError::Truncated)), now) else {
        panic!("a truncated Start must fail");
    };
    assert_eq!(f.code, Code::Truncated);

    let (mut s, _) = RelaySession::new(offer(&c));
    let Action::End(End::Fail(f)) = s.handle(Event::Committed(Ok(committed())), now) else {
        panic!("a commit before anything was received must fail");
    };
    assert_eq!(f.code, Code::Internal);
}

/// Compressed chunks only where the handshake agreed on them: a Start that
/// names an encoding on a plain connection ends before any byte is read.
#[test]
fn a_start_names_an_encoding_only_where_the_handshake_agreed() {
    let zstd = Some(Encoding::Zstd);
    // (agreed, the Start's encoding, what the session asks next)
    let table = [
        (false, None, Ok(None)),
        (true, None, Ok(None)),
        (true, zstd, Ok(zstd)),
        (false, zstd, Err(Code::BadEncoding)),
    ];
    let now = Instant::now();
    for (agreed, encoding, want) in table {
        let c = Case {
            eager: false,
            resume: 0,
            storage: Storage::Writable,
            start: StartFrame::AtZero,
            hashes: Hashes::Match,
            manifest: false,
        };
        let (mut s, _) = RelaySession::new(Accepted {
            compression_agreed: agreed,
            ..offer(&c)
        });
        s.handle(
            Event::Prepared(Ok(Prepared::Writable {
                tag: "t".into(),
                offset: 0,
                checkpoint: "cp".into(),
            })),
            now,
        );
        s.handle(Event::PlanSent(Ok(())), now);
        let start = Start {
            offset: 0,
            encoding,
        };
        let got = match s.handle(Event::Frame(Ok(Message::Start(start))), now) {
            Action::Receive {
                from_resume_point: true,
                encoding,
            } => Ok(encoding),
            Action::End(End::Fail(f)) => Err(f.code),
            other => panic!("{agreed} {encoding:?}: {other:?}"),
        };
        assert_eq!(got, want, "agreed {agreed}, {encoding:?}");
    }
}
