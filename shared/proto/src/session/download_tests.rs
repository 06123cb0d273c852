//! Every combination of local file × what this machine's index knows ×
//! --overwrite × partial file × check × blob version, run against a simulated
//! relay and checked against the rules written out once more (`expect`).

use super::download::*;
use crate::protocol::{Check, Code, Failure, Source};

const SIZE: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Here {
    Absent,
    /// The blob's bytes, placed by this machine from this version (indexed).
    Identical,
    /// The blob's bytes, but nothing on this machine says so (not indexed).
    IdenticalUnknown,
    SameSizeDiffers,
    OtherSize,
    NewerIdentical,
    NewerDiffers,
    Folder,
    Symlink,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    None,
    ThisVersion,
    OldVersion,
    /// Of this version by its sidecar, but its bytes were changed on disk.
    Corrupt,
}

struct World {
    check: Check,
    /// The blob's ETag moved after the listing.
    moved: bool,
}

fn truth() -> Hashes {
    Hashes {
        sha256: "aa".repeat(32),
        md5: "bb".repeat(16),
    }
}

fn wrong() -> Hashes {
    Hashes {
        sha256: "cc".repeat(32),
        md5: "dd".repeat(16),
    }
}

fn source(w: &World, offset: u64) -> Source {
    Source {
        etag: if w.moved { "v2".into() } else { "v1".into() },
        size: SIZE,
        offset,
        check: w.check,
        sha256: (w.check == Check::Sealed).then(|| truth().sha256.to_uppercase()),
        content_md5: (w.check == Check::ContentMd5).then(|| truth().md5),
        content_type: None,
        last_modified: Some(100),
        encoding: None,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    Placed {
        resumed: u64,
    },
    Skipped(String, Compared),
    /// The code, and whether the partial file is discarded.
    Failed(&'static str, bool),
}

/// Runs a session against the simulated relay; the end and how many byte
/// streams (not comparisons) were opened.
fn run(here: Here, part: Part, ow: OverwriteMode, w: &World) -> (End, u32) {
    let blob = Blob {
        size: SIZE,
        etag: "v1".into(),
        last_modified: Some(100),
    };
    let local = match here {
        Here::Absent => Local::Absent,
        Here::Identical | Here::IdenticalUnknown | Here::SameSizeDiffers => Local::File {
            size: SIZE,
            mtime: 50,
            indexed: here == Here::Identical,
        },
        Here::OtherSize => Local::File {
            size: 7,
            mtime: 50,
            indexed: false,
        },
        Here::NewerIdentical | Here::NewerDiffers => Local::File {
            size: SIZE,
            mtime: 200,
            indexed: here == Here::NewerIdentical,
        },
        Here::Folder => Local::Folder,
        Here::Symlink => Local::Symlink,
    };
    let local_hashes = match here {
        Here::Identical | Here::IdenticalUnknown | Here::NewerIdentical => truth(),
        _ => wrong(),
    };
    let partial = match part {
        Part::None => None,
        Part::ThisVersion | Part::Corrupt => Some(Partial {
            len: 400,
            etag: "v1".into(),
            size: SIZE,
        }),
        Part::OldVersion => Some(Partial {
            len: 400,
            etag: "v0".into(),
            size: SIZE,
        }),
    };
    let mut corrupt = part == Part::Corrupt;
    let (mut s, mut a) = Session::new(blob, local, partial, ow);
    let mut streams = 0;
    for _ in 0..32 {
        let ev = match a {
            Action::HashLocal { md5 } => {
                assert_eq!(md5, w.check == Check::ContentMd5);
                assert_ne!(w.check, Check::Ranges, "hashed for nothing");
                Event::LocalHashed(local_hashes.clone())
            }
            Action::Fetch {
                offset,
                etag,
                compare_only,
            } => {
                let current = if w.moved { "v2" } else { "v1" };
                let from = if etag.as_deref() == Some(current) {
                    offset
                } else {
                    0
                };
                if !compare_only {
                    streams += 1;
                }
                Event::Source(source(w, from))
            }
            Action::Receive { from, fresh } => {
                assert_eq!(fresh, from == 0);
                let h = if fresh || !corrupt { truth() } else { wrong() };
                if fresh {
                    corrupt = false;
                }
                Event::Received {
                    len: SIZE,
                    hashes: h,
                }
            }
            Action::Place { resumed, .. } => return (End::Placed { resumed }, streams),
            Action::Skip { reason, compared } => return (End::Skipped(reason, compared), streams),
            Action::Fail(f) => return (End::Failed(f.code, f.discard), streams),
        };
        a = s.handle(ev);
    }
    panic!("no end");
}

/// The rules, stated directly: the end, and how many byte streams it took.
fn expect(here: Here, part: Part, ow: OverwriteMode, w: &World) -> (End, u32) {
    use OverwriteMode::*;
    let by_hash = w.check != Check::Ranges;
    let compared = match w.check {
        Check::Sealed => Compared::Sha256,
        Check::ContentMd5 => Compared::Md5,
        Check::Ranges => Compared::Index,
    };
    // The partial of this version is asked for; only a blob checked whole
    // may keep its prefix (a resume of a `ranges` blob starts over at 0,
    // on a second stream).
    let asked = matches!(part, Part::ThisVersion | Part::Corrupt) && !w.moved;
    let download = match (asked, by_hash, part) {
        (true, true, Part::Corrupt) => (End::Failed("verify", true), 1),
        (true, true, _) => (End::Placed { resumed: 400 }, 1),
        (true, false, _) => (End::Placed { resumed: 0 }, 2),
        (false, ..) => (End::Placed { resumed: 0 }, 1),
    };
    let identical = match here {
        Here::Identical | Here::NewerIdentical => by_hash || !w.moved,
        Here::IdenticalUnknown => by_hash,
        _ => false,
    };
    let none = |e: End| (e, 0);
    match (here, ow) {
        (Here::Folder, _) => none(End::Failed("in_the_way", false)),
        (Here::Symlink, _) => none(End::Failed("symlink", false)),
        (Here::Absent, _) | (_, Always) => download,
        (Here::NewerIdentical | Here::NewerDiffers, IfNewer) => none(End::Skipped(
            "the local file is newer than the blob".into(),
            Compared::Mtime,
        )),
        _ if identical => none(End::Skipped("identical".into(), compared)),
        (_, Never) => none(End::Failed("exists", false)),
        (_, IfDifferent | IfNewer) => download,
    }
}

#[test]
fn every_combination_follows_the_rules() {
    let heres = [
        Here::Absent,
        Here::Identical,
        Here::IdenticalUnknown,
        Here::SameSizeDiffers,
        Here::OtherSize,
        Here::NewerIdentical,
        Here::NewerDiffers,
        Here::Folder,
        Here::Symlink,
    ];
    let parts = [
        Part::None,
        Part::ThisVersion,
        Part::OldVersion,
        Part::Corrupt,
    ];
    let modes = [
        OverwriteMode::Never,
        OverwriteMode::Always,
        OverwriteMode::IfDifferent,
        OverwriteMode::IfNewer,
    ];
    let mut rows = 0;
    for here in heres {
        for part in parts {
            for ow in modes {
                for check in [Check::Sealed, Check::ContentMd5, Check::Ranges] {
                    for moved in [false, true] {
                        let w = World { check, moved };
                        let got = run(here, part, ow, &w);
                        let want = expect(here, part, ow, &w);
                        assert_eq!(
                            got, want,
                            "{here:?} {part:?} {ow:?} {check:?} moved={moved}"
                        );
                        rows += 1;
                    }
                }
            }
        }
    }
    assert_eq!(rows, 9 * 4 * 4 * 3 * 2);
}

fn blob() -> Blob {
    Blob {
        size: SIZE,
        etag: "v1".into(),
        last_modified: None,
    }
}

#[test]
fn a_listing_etag_without_quotes_names_the_same_version() {
    // Storage's listing writes 0x8D.., its headers (the Source, the sidecar) "0x8D..".
    let listed = Blob {
        size: SIZE,
        etag: "0x8DC0FFEE".into(),
        last_modified: None,
    };
    let partial = Some(Partial {
        len: 400,
        etag: "\"0x8DC0FFEE\"".into(),
        size: SIZE,
    });
    let (_, a) = Session::new(listed.clone(), Local::Absent, partial, OverwriteMode::Never);
    assert_eq!(
        a,
        Action::Fetch {
            offset: 400,
            etag: Some("\"0x8DC0FFEE\"".into()),
            compare_only: false
        }
    );
    let local = Local::File {
        size: SIZE,
        mtime: 0,
        indexed: true,
    };
    let (_, a) = Session::new(listed, local, None, OverwriteMode::Never);
    assert_eq!(
        a,
        Action::Fetch {
            offset: SIZE,
            etag: Some("\"0x8DC0FFEE\"".into()),
            compare_only: true
        }
    );
}

#[test]
fn a_blob_that_keeps_changing_fails_after_the_restarts() {
    let (mut s, a) = Session::new(blob(), Local::Absent, None, OverwriteMode::Never);
    assert!(matches!(a, Action::Fetch { offset: 0, .. }));
    let changed = || {
        Event::Refused(Failure {
            code: Code::Changed,
            message: "etag moved".into(),
            existing: None,
            requests: None,
            outcome_unknown: false,
        })
    };
    for _ in 0..MAX_RESTARTS {
        assert!(matches!(
            s.handle(changed()),
            Action::Fetch {
                offset: 0,
                etag: None,
                ..
            }
        ));
    }
    match s.handle(changed()) {
        Action::Fail(f) => assert_eq!((f.code, f.discard), ("changed", true)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_source_that_does_not_answer_the_fetch_is_a_protocol_error() {
    let w = World {
        check: Check::Sealed,
        moved: false,
    };
    let partial = Some(Partial {
        len: 400,
        etag: "v1".into(),
        size: SIZE,
    });
    let (mut s, a) = Session::new(blob(), Local::Absent, partial, OverwriteMode::Never);
    assert_eq!(
        a,
        Action::Fetch {
            offset: 400,
            etag: Some("v1".into()),
            compare_only: false
        }
    );
    // Neither the asked offset nor 0.
    match s.handle(Event::Source(source(&w, 300))) {
        Action::Fail(f) => assert_eq!(f.code, "protocol"),
        other => panic!("{other:?}"),
    }
    // A Sealed check without the SHA-256.
    let (mut s, _) = Session::new(blob(), Local::Absent, None, OverwriteMode::Never);
    let mut src = source(&w, 0);
    src.sha256 = None;
    assert!(matches!(
        s.handle(Event::Source(src)),
        Action::Fail(Failed {
            code: "protocol",
            ..
        })
    ));
}

#[test]
fn short_bytes_are_retryable_and_not_placed() {
    let w = World {
        check: Check::Ranges,
        moved: false,
    };
    let (mut s, _) = Session::new(blob(), Local::Absent, None, OverwriteMode::Never);
    assert_eq!(
        s.handle(Event::Source(source(&w, 0))),
        Action::Receive {
            from: 0,
            fresh: true
        }
    );
    match s.handle(Event::Received {
        len: SIZE - 1,
        hashes: truth(),
    }) {
        Action::Fail(f) => assert!(f.code == "truncated" && f.retryable),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_download_that_does_not_verify_is_discarded_and_tried_again() {
    let w = World {
        check: Check::ContentMd5,
        moved: false,
    };
    let (mut s, _) = Session::new(blob(), Local::Absent, None, OverwriteMode::Never);
    s.handle(Event::Source(source(&w, 0)));
    match s.handle(Event::Received {
        len: SIZE,
        hashes: wrong(),
    }) {
        Action::Fail(f) => {
            assert_eq!(f.code, "verify");
            assert!(f.message.contains("MD5"));
            // Within --attempts, from 0: the partial file is thrown away.
            assert!(f.retryable && f.discard);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn not_found_and_forbidden_are_final() {
    for (code, label, retry, discard) in [
        (Code::NotFound, "not_found", false, true),
        (Code::Forbidden, "forbidden", false, false),
        (Code::Storage, "storage", true, false),
    ] {
        let (mut s, _) = Session::new(blob(), Local::Absent, None, OverwriteMode::Never);
        match s.handle(Event::Refused(Failure {
            code,
            message: "m".into(),
            existing: None,
            requests: None,
            outcome_unknown: false,
        })) {
            Action::Fail(f) => {
                assert_eq!((f.code, f.retryable, f.discard), (label, retry, discard))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_kept_prefix_nothing_checks_whole_is_fetched_again_from_0() {
    let w = World {
        check: Check::Ranges,
        moved: false,
    };
    let partial = Some(Partial {
        len: SIZE,
        etag: "v1".into(),
        size: SIZE,
    });
    let (mut s, a) = Session::new(blob(), Local::Absent, partial, OverwriteMode::Never);
    assert!(matches!(a, Action::Fetch { offset: SIZE, .. }), "{a:?}");
    // The whole blob "on disk", and the Source says nothing checks it whole.
    assert_eq!(
        s.handle(Event::Source(source(&w, SIZE))),
        Action::Fetch {
            offset: 0,
            etag: None,
            compare_only: false
        }
    );
    assert_eq!(
        s.handle(Event::Source(source(&w, 0))),
        Action::Receive {
            from: 0,
            fresh: true
        }
    );
}

#[test]
fn a_blob_nothing_can_compare_is_compared_by_the_index_or_refused() {
    let w = World {
        check: Check::Ranges,
        moved: false,
    };
    for (indexed, want) in [(true, "skip"), (false, "exists")] {
        let local = Local::File {
            size: SIZE,
            mtime: 0,
            indexed,
        };
        let (mut s, _) = Session::new(blob(), local, None, OverwriteMode::Never);
        match (s.handle(Event::Source(source(&w, SIZE))), want) {
            (Action::Skip { compared, .. }, "skip") => assert_eq!(compared, Compared::Index),
            (Action::Fail(f), "exists") => {
                assert_eq!(f.code, "exists");
                assert!(f.message.contains("cannot be compared"), "{}", f.message);
                assert!(!f.discard);
            }
            (other, _) => panic!("indexed={indexed}: {other:?}"),
        }
    }
    // The index knew another version: the blob changed since, refused.
    let moved = World {
        check: Check::Ranges,
        moved: true,
    };
    let local = Local::File {
        size: SIZE,
        mtime: 0,
        indexed: true,
    };
    let (mut s, _) = Session::new(blob(), local, None, OverwriteMode::Never);
    assert!(matches!(
        s.handle(Event::Source(source(&moved, SIZE))),
        Action::Fail(Failed { code: "exists", .. })
    ));
}
