//! The client's session against scripted relays: every sequence of stream ends
//! (Receipt right or wrong, refusals, exists with and without overwrite, the
//! lost-Receipt re-run, redirects) and the same-source check on a Plan.

use sha2::{Digest, Sha256};

use super::client::*;
use crate::checkpoint::Checkpoint;
use crate::protocol::{Code, Failure, Plan, Receipt, Timings};

const SIZE: u64 = 100;
const SHA: &str = "ab";

fn receipt(sha256: &str, size: u64) -> Receipt {
    Receipt {
        container: "c".into(),
        blob: "b".into(),
        etag: "e".into(),
        size,
        sha256: sha256.into(),
        block_size: 16 << 20,
        blocks: 1,
        bytes_resumed: 0,
        bytes_received: size,
        retries: 0,
        requests: 2,
        earlier_commit: false,
        content_md5: None,
        timings: Timings::default(),
    }
}

fn refused(code: Code) -> StreamEnd {
    StreamEnd::Refused(Failure {
        code,
        message: "m".into(),
        existing: None,
        requests: None,
        outcome_unknown: false,
    })
}

fn ok() -> StreamEnd {
    StreamEnd::Receipt {
        receipt: receipt(SHA, SIZE),
        sha256: SHA.into(),
    }
}

/// Runs the session against `ends` (one per stream, in order); returns its
/// actions.
fn run(replaces: Replaces, ends: Vec<StreamEnd>) -> Vec<Action> {
    let (mut s, mut action) = ClientSession::new(SIZE, replaces);
    let mut ends = ends.into_iter();
    let mut actions = vec![action.clone()];
    loop {
        let event = match &action {
            Action::Offer { .. } => match ends.next() {
                Some(end) => Event::Stream(end),
                None => panic!("the script ran out: {actions:?}"),
            },
            Action::HashWholeFile => Event::WholeFileHashed(SHA.into()),
            Action::Done(_) | Action::Fail(_) => return actions,
        };
        action = s.handle(event);
        actions.push(action.clone());
    }
}

fn offers(actions: &[Action]) -> Vec<(bool, Option<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Offer { eager, sha256 } => Some((*eager, sha256.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn every_script_ends_as_the_protocol_says() {
    let plain = (false, None);
    let eager = (true, None);
    let proof = (false, Some(SHA.to_string()));
    #[allow(clippy::type_complexity)]
    let table: Vec<(
        &str,
        Replaces,
        Vec<StreamEnd>,
        Vec<(bool, Option<String>)>,
        &str,
    )> = vec![
        (
            "eager, committed",
            Replaces::Nothing,
            vec![ok()],
            vec![eager.clone()],
            "done",
        ),
        (
            "eager, receipt names other bytes",
            Replaces::Nothing,
            vec![StreamEnd::Receipt {
                receipt: receipt("ff", SIZE),
                sha256: SHA.into(),
            }],
            vec![eager.clone()],
            "verify",
        ),
        (
            "eager, receipt of another size",
            Replaces::Nothing,
            vec![StreamEnd::Receipt {
                receipt: receipt(SHA, SIZE + 1),
                sha256: SHA.into(),
            }],
            vec![eager.clone()],
            "verify",
        ),
        (
            "resume: redirected, then plain",
            Replaces::Nothing,
            vec![StreamEnd::Redirected { resume_offset: 64 }, ok()],
            vec![eager.clone(), plain.clone()],
            "done",
        ),
        (
            "redirected twice",
            Replaces::Nothing,
            vec![
                StreamEnd::Redirected { resume_offset: 64 },
                StreamEnd::Redirected { resume_offset: 64 },
            ],
            vec![eager.clone(), plain.clone()],
            "protocol",
        ),
        (
            "rejected",
            Replaces::Nothing,
            vec![refused(Code::Unauthorized)],
            vec![eager.clone()],
            "relay",
        ),
        (
            "hash mismatch at the relay",
            Replaces::Nothing,
            vec![refused(Code::HashMismatch)],
            vec![eager.clone()],
            "relay",
        ),
        (
            "exists, lost Receipt: the re-run proves the file and is done",
            Replaces::Nothing,
            vec![refused(Code::Exists), ok()],
            vec![eager.clone(), proof.clone()],
            "done",
        ),
        (
            "exists with other bytes",
            Replaces::Nothing,
            vec![refused(Code::Exists), refused(Code::Exists)],
            vec![eager.clone(), proof.clone()],
            "relay",
        ),
        (
            "exists, re-run redirected to resume",
            Replaces::Nothing,
            vec![
                refused(Code::Exists),
                StreamEnd::Redirected { resume_offset: 64 },
            ],
            vec![eager.clone(), proof.clone()],
            "protocol",
        ),
        (
            "exists, overwrite asked: final",
            Replaces::AnyVersion,
            vec![refused(Code::Exists)],
            vec![eager.clone()],
            "relay",
        ),
        (
            "replacing one version, lost Receipt: the retry proves the file and is done",
            Replaces::OneVersion,
            vec![refused(Code::Conflict), ok()],
            vec![eager.clone(), proof.clone()],
            "done",
        ),
        (
            "replacing one version that another writer changed",
            Replaces::OneVersion,
            vec![refused(Code::Conflict), refused(Code::Conflict)],
            vec![eager.clone(), proof.clone()],
            "relay",
        ),
        (
            "conflict when not replacing a version: final",
            Replaces::Nothing,
            vec![refused(Code::Conflict)],
            vec![eager.clone()],
            "relay",
        ),
        (
            "redirected, then refused",
            Replaces::Nothing,
            vec![
                StreamEnd::Redirected { resume_offset: 64 },
                refused(Code::Busy),
            ],
            vec![eager, plain],
            "relay",
        ),
    ];
    for (name, replaces, ends, want_offers, want_end) in table {
        let actions = run(replaces, ends);
        assert_eq!(offers(&actions), want_offers, "{name}");
        let got_end = match actions.last() {
            Some(Action::Done(r)) => {
                assert_eq!((r.sha256.as_str(), r.size), (SHA, SIZE), "{name}");
                "done"
            }
            Some(Action::Fail(Failed::Relay(_))) => "relay",
            Some(Action::Fail(Failed::Protocol(_))) => "protocol",
            Some(Action::Fail(Failed::Verify(_))) => "verify",
            other => panic!("{name}: ended on {other:?}"),
        };
        assert_eq!(got_end, want_end, "{name}: {actions:?}");
    }
}

#[test]
fn a_plain_stream_resumes_only_the_same_source() {
    let data = vec![7u8; 256];
    let ours_at = |n: usize| Checkpoint::of(&Sha256::new_with_prefix(&data[..n]));
    let theirs = ours_at(128).expect("a 64-byte multiple").to_hex();
    let plan = |resume_offset: u64, checkpoint: &str| Plan {
        tag: "t".into(),
        block_size: 128,
        resume_offset,
        checkpoint: checkpoint.into(),
        relay_version: None,
    };
    let other = {
        let mut d = data.clone();
        d[3] ^= 1;
        Checkpoint::of(&Sha256::new_with_prefix(&d[..128]))
    };
    let size = data.len() as u64;
    // (plan, our checkpoint at its offset, expected start)
    let table = [
        (plan(128, &theirs), ours_at(128), 128),
        (plan(128, &theirs), other, 0),
        (plan(128, "not hex"), ours_at(128), 0),
        (plan(0, &theirs), ours_at(128), 0),
        (plan(size + 64, &theirs), ours_at(128), 0),
    ];
    for (i, (p, ours, want)) in table.into_iter().enumerate() {
        assert_eq!(start_offset(&p, size, ours), want, "row {i}");
    }
    assert_eq!(prefix_to_check(&plan(128, &theirs), size), Some(128));
    assert_eq!(prefix_to_check(&plan(0, &theirs), size), None);
    assert_eq!(prefix_to_check(&plan(size + 1, &theirs), size), None);
}

/// With a manifest's hash the first Offer is plain and carries it; "exists" is
/// then final (the relay already compared the hash with its sealed record), and
/// a redirect of that plain stream is a protocol error.
#[test]
fn a_known_hash_is_offered_first_and_plainly() {
    let (mut s, first) = ClientSession::with_sha256(SIZE, Replaces::Nothing, Some(SHA.into()));
    assert_eq!(
        first,
        Action::Offer {
            eager: false,
            sha256: Some(SHA.into())
        }
    );
    assert!(matches!(s.handle(Event::Stream(ok())), Action::Done(_)));

    let (mut s, _) = ClientSession::with_sha256(SIZE, Replaces::Nothing, Some(SHA.into()));
    assert!(matches!(
        s.handle(Event::Stream(refused(Code::Exists))),
        Action::Fail(Failed::Relay(_))
    ));

    let (mut s, _) = ClientSession::with_sha256(SIZE, Replaces::Nothing, Some(SHA.into()));
    assert!(matches!(
        s.handle(Event::Stream(StreamEnd::Redirected { resume_offset: 4 })),
        Action::Fail(Failed::Protocol(_))
    ));

    // Without one it is the usual eager start.
    let (_, first) = ClientSession::with_sha256(SIZE, Replaces::Nothing, None);
    assert_eq!(
        first,
        Action::Offer {
            eager: true,
            sha256: None
        }
    );
}
