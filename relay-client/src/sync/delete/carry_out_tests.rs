//! `carry_out` end to end on real files: the verdict's guards (nothing
//! deleted), `--dry-run`, `--delete-unknown`, and a refusal from the remote
//! side as one error.
use super::local::tests::Fixture;
use super::remote::tests::{Double, blob};
use super::*;
use relay_proto::sync::delete::{DeleteRules, MaxDelete, Origin};

fn rules(max: MaxDelete, delete_unknown: bool) -> DeleteRules {
    DeleteRules {
        delete: true,
        max,
        delete_unknown,
    }
}

const WHOLE: Completion = Completion {
    source: true,
    dest: true,
};

fn tally(dest_entries: u64) -> Tally {
    Tally {
        dest_entries,
        ..Tally::default()
    }
}

/// Three placed files and one unknown under DEST, pushed into a set that
/// spills (capacity 1) into SQLite beside the index.
fn gathered(f: &Fixture, rules: DeleteRules) -> DeleteSet<SqliteSpill> {
    let spill = SqliteSpill::create_in(&f.s.0).expect("spill");
    let mut set = DeleteSet::new(rules, 1, spill);
    for name in ["a.txt", "b/c.txt", "b/d.txt"] {
        f.place(name, name);
        let c = DeleteCandidate::Local {
            name: name.into(),
            origin: Origin::Placed,
            stat: f.walked(name),
        };
        set.push(c).expect("push");
    }
    f.unknown("theirs.txt", "someone's");
    let c = DeleteCandidate::Local {
        name: "theirs.txt".into(),
        origin: Origin::Unknown,
        stat: f.walked("theirs.txt"),
    };
    set.push(c).expect("push");
    set
}

/// The set carried out whole below DEST (both sides read whole, 4 entries
/// on the destination, not a dry run): the summary and every event.
async fn carried(f: &Fixture, set: DeleteSet<SqliteSpill>) -> (DeleteSummary, Vec<DeleteEvent>) {
    let d = LocalDeleter::open(&f.dest, &f.index).expect("dest");
    let mut events = Vec::new();
    let summary = carry_out(
        set,
        WHOLE,
        tally(4),
        Executor::Local(&d),
        false,
        &mut events,
    )
    .await
    .expect("carried out");
    (summary, events)
}

fn all_there(f: &Fixture) -> bool {
    ["a.txt", "b/c.txt", "b/d.txt", "theirs.txt"]
        .iter()
        .all(|n| f.dest.join(n).is_file())
}

#[tokio::test]
async fn placed_files_are_deleted_and_unknown_ones_kept() {
    let f = Fixture::new("carry-placed");
    let before = f.outside_hash();
    let set = gathered(&f, rules(MaxDelete::Count(10), false));
    let (summary, events) = carried(&f, set).await;
    let want = DeleteSummary {
        deleted: 3,
        kept_unknown: 1,
        ..DeleteSummary::default()
    };
    assert_eq!(summary, want);
    let names: Vec<_> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "b/c.txt", "b/d.txt"]);
    assert!(f.dest.join("theirs.txt").is_file());
    assert!(!f.dest.join("a.txt").exists() && !f.dest.join("b/c.txt").exists());
    assert_eq!(f.outside_hash(), before);
}

#[tokio::test]
async fn with_delete_unknown_unknown_files_go_too() {
    let f = Fixture::new("carry-unknown");
    let set = gathered(&f, rules(MaxDelete::Count(10), true));
    let (summary, _) = carried(&f, set).await;
    assert_eq!((summary.deleted, summary.kept_unknown), (4, 0));
    assert!(!f.dest.join("theirs.txt").exists());
}

#[tokio::test]
async fn a_file_changed_after_the_merge_is_kept_and_reported() {
    let f = Fixture::new("carry-changed");
    let set = gathered(&f, rules(MaxDelete::Count(10), false));
    std::fs::write(f.dest.join("b/c.txt"), "edited after the walk").expect("edit");
    let (summary, events) = carried(&f, set).await;
    assert_eq!((summary.deleted, summary.kept_changed), (2, 1));
    let kept = events.iter().find(|e| e.name == "b/c.txt").expect("event");
    assert!(matches!(kept.outcome, Outcome::KeptChanged(_)), "{kept:?}");
    assert!(f.dest.join("b/c.txt").is_file());
}

/// `--delete-unknown`: a file this machine did not place, edited after the
/// walk, is kept and reported with the reason, its walk `stat` having gone
/// through the SQLite spill (capacity 1) and back.
#[tokio::test]
async fn with_delete_unknown_a_file_edited_after_the_walk_is_kept() {
    let f = Fixture::new("carry-walked");
    let set = gathered(&f, rules(MaxDelete::Count(10), true));
    std::fs::write(f.dest.join("theirs.txt"), "edited after the walk").expect("edit");
    let (summary, events) = carried(&f, set).await;
    assert_eq!((summary.deleted, summary.kept_changed), (3, 1));
    let kept = events
        .iter()
        .find(|e| e.name == "theirs.txt")
        .expect("event");
    let why = local::CHANGED_SINCE_WALK.to_string();
    assert_eq!(kept.outcome, Outcome::KeptChanged(why));
    assert_eq!(
        std::fs::read_to_string(f.dest.join("theirs.txt")).expect("kept"),
        "edited after the walk"
    );
}

/// Every verdict that withholds the batch: nothing at all is deleted, and
/// the reason (with the count and the limit when over it) is the error.
#[tokio::test]
async fn an_incomplete_side_or_a_batch_over_the_limit_deletes_nothing() {
    let cases = [
        (
            MaxDelete::Count(10),
            Completion {
                source: false,
                dest: true,
            },
            Withheld::SourceIncomplete,
        ),
        (
            MaxDelete::Count(10),
            Completion {
                source: true,
                dest: false,
            },
            Withheld::DestIncomplete,
        ),
        (
            MaxDelete::Count(2),
            WHOLE,
            Withheld::OverLimit {
                planned: 3,
                limit: 2,
            },
        ),
        // 10% of 20 entries is 2.
        (
            MaxDelete::Percent(10),
            WHOLE,
            Withheld::OverLimit {
                planned: 3,
                limit: 2,
            },
        ),
    ];
    for (max, completion, want) in cases {
        let f = Fixture::new("carry-withheld");
        let set = gathered(&f, rules(max, false));
        let d = LocalDeleter::open(&f.dest, &f.index).expect("dest");
        let mut events = Vec::new();
        let got = carry_out(
            set,
            completion,
            tally(20),
            Executor::Local(&d),
            false,
            &mut events,
        )
        .await;
        match got {
            Err(DeleteError::Withheld(w)) => assert_eq!(w, want),
            other => panic!("{want:?}: {other:?}"),
        }
        assert!(events.is_empty());
        assert!(all_there(&f), "{want:?}");
    }
    let over = DeleteError::Withheld(Withheld::OverLimit {
        planned: 3,
        limit: 2,
    });
    let said = over.to_string();
    assert!(said.contains('3') && said.contains('2'), "{said}");
}

#[tokio::test]
async fn without_delete_nothing_is_deleted_and_that_is_no_error() {
    let f = Fixture::new("carry-not-asked");
    let rules = DeleteRules {
        delete: false,
        ..rules(MaxDelete::Count(10), false)
    };
    let set = gathered(&f, rules);
    let d = LocalDeleter::open(&f.dest, &f.index).expect("dest");
    let mut events = Vec::new();
    let summary = carry_out(
        set,
        WHOLE,
        tally(4),
        Executor::Local(&d),
        false,
        &mut events,
    )
    .await
    .expect("no error");
    assert_eq!(summary.deleted, 0);
    assert!(events.is_empty() && all_there(&f));
}

#[tokio::test]
async fn dry_run_lists_every_delete_and_deletes_nothing() {
    let f = Fixture::new("carry-dry");
    let set = gathered(&f, rules(MaxDelete::Count(10), true));
    let d = LocalDeleter::open(&f.dest, &f.index).expect("dest");
    let mut events = Vec::new();
    let summary = carry_out(set, WHOLE, tally(4), Executor::Local(&d), true, &mut events)
        .await
        .expect("listed");
    assert_eq!((summary.would_delete, summary.deleted), (4, 0));
    assert!(events.iter().all(|e| e.outcome == Outcome::WouldDelete));
    assert_eq!(events.len(), 4);
    assert!(all_there(&f));
}

#[tokio::test]
async fn a_refusal_from_the_destination_is_one_error_for_the_batch() {
    let f = Fixture::new("carry-refused");
    let spill = SqliteSpill::create_in(&f.s.0).expect("spill");
    let mut set = DeleteSet::new(rules(MaxDelete::Count(100), false), 4, spill);
    for i in 0..50 {
        set.push(blob(i)).expect("push");
    }
    let mut double = Double::default();
    double.answers.insert(
        "b0000".into(),
        Ok(RemoteOutcome::Refused {
            reason: "no delete grant (tokens file :d)".into(),
        }),
    );
    let double = Arc::new(double);
    let mut events = Vec::new();
    let got = carry_out(
        set,
        WHOLE,
        tally(50),
        Executor::Remote(double.clone()),
        false,
        &mut events,
    )
    .await;
    let Err(DeleteError::Refused { reason, summary }) = got else {
        panic!("{got:?}");
    };
    assert!(reason.contains("grant"));
    assert!(double.calls.lock().expect("calls").len() <= remote::IN_FLIGHT * 2);
    assert_eq!(summary.deleted as usize, events.len());
}

/// The sync command may run `carry_out` on a spawned task: its future is
/// `Send` with the SQLite spill and either executor.
#[test]
fn carry_out_can_run_on_a_spawned_task() {
    fn send<T: Send>(_: &T) {}
    let f = Fixture::new("carry-send");
    let d = LocalDeleter::open(&f.dest, &f.index).expect("dest");
    let mut events = Vec::new();
    let rules = rules(MaxDelete::Count(1), false);
    let local = DeleteSet::new(rules, 1, SqliteSpill::create_in(&f.s.0).expect("spill"));
    send(&carry_out(
        local,
        WHOLE,
        tally(0),
        Executor::Local(&d),
        true,
        &mut events,
    ));
    let remote = DeleteSet::new(rules, 1, SqliteSpill::create_in(&f.s.0).expect("spill"));
    let double = Arc::new(Double::default());
    send(&carry_out(
        remote,
        WHOLE,
        tally(0),
        Executor::Remote(double),
        true,
        &mut events,
    ));
}
