//! The SQLite spill store: order, every kind of candidate, bounded replay
//! over 100,000 candidates, the file removed when dropped.
use super::*;
use crate::download::safe_fs::tests::Scratch;
use relay_proto::sync::delete::{DeleteRules, MaxDelete};
use relay_proto::sync::delete_set::DeleteSet;
use relay_proto::sync::join::Completion;

fn remote(i: usize) -> DeleteCandidate {
    DeleteCandidate::Remote {
        name: format!("runs/{i:06}.bin"),
        etag: format!("\"0x{i:X}\""),
    }
}

/// A walk's stat, with values at the edges of SQLite's signed integers.
fn walked(size: u64, ino: u64) -> FileStat {
    FileStat {
        size,
        mtime_ns: -5,
        identity: Some(Identity {
            ino,
            dev: u64::MAX - 1,
            ctime_ns: i64::MIN,
        }),
    }
}

#[test]
fn replays_every_kind_in_the_order_appended() {
    let s = Scratch::new("spill-order");
    let mut spill = SqliteSpill::create_in(&s.0).expect("spill").with_page(2);
    let batch = vec![
        remote(2),
        DeleteCandidate::Local {
            name: "b/é.txt".into(),
            origin: Origin::Placed,
            stat: walked(u64::MAX, 1),
        },
        DeleteCandidate::Local {
            name: "a".into(),
            origin: Origin::Unknown,
            stat: FileStat {
                size: 0,
                mtime_ns: 0,
                identity: None,
            },
        },
    ];
    spill.append(&batch).expect("append");
    let more = vec![
        DeleteCandidate::Local {
            name: "c".into(),
            origin: Origin::ChangedSincePlaced,
            stat: walked(7, u64::MAX),
        },
        remote(1),
    ];
    spill.append(&more).expect("append");
    let back: Vec<_> = spill
        .replay()
        .expect("replay")
        .collect::<Result<_, _>>()
        .expect("rows");
    let want: Vec<_> = batch.into_iter().chain(more).collect();
    assert_eq!(back, want);
}

#[test]
fn an_empty_store_replays_nothing_and_its_file_goes_when_dropped() {
    let s = Scratch::new("spill-drop");
    let index = crate::index::Index::open(&s.0.join("index.sqlite")).expect("index");
    let mut spill = SqliteSpill::beside(&index).expect("spill");
    let file = spill.file().to_path_buf();
    assert!(file.starts_with(&s.0) && file.exists());
    assert_eq!(spill.replay().expect("replay").count(), 0);
    drop(spill);
    assert!(!file.exists());
    let left: Vec<_> = std::fs::read_dir(&s.0)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.to_string_lossy().starts_with("sync-deletes-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// 100,000 candidates through a delete set that keeps 64 in memory: the
/// replay holds at most one page at any time and hands every candidate
/// back once, in order, without collecting them.
#[test]
fn a_hundred_thousand_candidates_replay_in_bounded_memory() {
    const N: usize = 100_000;
    const PAGE: usize = 256;
    let s = Scratch::new("spill-100k");
    let spill = SqliteSpill::create_in(&s.0).expect("spill").with_page(PAGE);
    let rules = DeleteRules {
        delete: true,
        // A percentage is only known at the end, so the set spills.
        max: MaxDelete::Percent(100),
        delete_unknown: false,
    };
    let mut set = DeleteSet::new(rules, 64, spill);
    for i in 0..N {
        assert!(set.push(remote(i)).expect("push"));
    }
    let complete = Completion {
        source: true,
        dest: true,
    };
    let mut deletes = set.finish(complete, N as u64).expect("within the limit");
    let mut seen = 0;
    for (i, c) in deletes.iter().expect("iter").enumerate() {
        assert_eq!(c.expect("row"), remote(i));
        seen += 1;
    }
    assert_eq!(seen, N);

    // The store's own replay, watched from outside: never over a page.
    let mut spill = SqliteSpill::create_in(&s.0).expect("spill").with_page(PAGE);
    let batch: Vec<_> = (0..1000).map(remote).collect();
    for _ in 0..(N / 1000) {
        spill.append(&batch).expect("append");
    }
    let mut replay = spill.replay().expect("replay");
    let mut most = 0;
    let mut count = 0;
    while let Some(c) = replay.next() {
        c.expect("row");
        most = most.max(replay.held());
        count += 1;
    }
    assert_eq!(count, N);
    assert!(most < PAGE, "held {most} candidates at once");
}

#[test]
fn a_row_it_did_not_write_ends_the_replay_with_an_error() {
    let s = Scratch::new("spill-bad");
    // A page of one: the good row comes back before the bad one is read.
    let mut spill = SqliteSpill::create_in(&s.0).expect("spill").with_page(1);
    spill.append(&[remote(1)]).expect("append");
    spill
        .conn()
        .execute("INSERT INTO spill (kind, name) VALUES (7, 'x')", [])
        .expect("insert");
    let back: Vec<_> = spill.replay().expect("replay").collect();
    assert_eq!(back.len(), 2);
    assert!(back[0].is_ok());
    assert!(matches!(back[1], Err(SpillError::BadRow { kind: 7, .. })));
}
