use super::*;
use crate::sync::delete_set::{DeleteCounts, DeleteSet};

const WHOLE: Completion = Completion {
    source: true,
    dest: true,
};

fn rules(max: MaxDelete) -> DeleteRules {
    DeleteRules {
        delete: true,
        max,
        delete_unknown: false,
    }
}

fn remote(i: u64) -> DeleteCandidate {
    DeleteCandidate::Remote {
        name: format!("f{i:04}"),
        etag: format!("\"0x{i}\""),
    }
}

fn local(name: &str, origin: Origin) -> DeleteCandidate {
    DeleteCandidate::Local {
        name: name.into(),
        origin,
        stat: crate::sync::entry::FileStat {
            size: 1,
            mtime_ns: 1,
            identity: None,
        },
    }
}

fn gathered(
    set: DeleteSet<MemorySpill>,
    done: Completion,
    dest: u64,
) -> Result<Vec<DeleteCandidate>, Withheld> {
    let mut deletes = set.finish(done, dest)?;
    let all = deletes.iter().expect("replay");
    Ok(all.map(|c| c.expect("in memory")).collect())
}

#[test]
fn max_delete_reads_a_count_or_a_percentage() {
    assert_eq!("250".parse(), Ok(MaxDelete::Count(250)));
    assert_eq!(" 5% ".parse(), Ok(MaxDelete::Percent(5)));
    assert_eq!("100%".parse(), Ok(MaxDelete::Percent(100)));
    for bad in ["", "-1", "101%", "5.5%", "x", "%"] {
        assert!(bad.parse::<MaxDelete>().is_err(), "{bad:?}");
    }
    assert_eq!(MaxDelete::Percent(10).limit(1_234), 123);
    assert_eq!(MaxDelete::Percent(100).limit(u64::MAX), u64::MAX);
    assert_eq!(MaxDelete::Count(7).limit(0), 7);
    assert_eq!(DEFAULT_MAX_DELETE, MaxDelete::Count(1000));
}

#[test]
fn nothing_is_deleted_unless_asked_and_both_sides_were_read_whole() {
    let r = rules(MaxDelete::Count(10));
    assert_eq!(verdict(&r, WHOLE, 3, 100), Ok(()));
    assert_eq!(verdict(&r, WHOLE, 0, 0), Ok(()));
    let not_asked = DeleteRules { delete: false, ..r };
    assert_eq!(verdict(&not_asked, WHOLE, 1, 100), Err(Withheld::NotAsked));
    let walk_failed = Completion {
        source: false,
        dest: true,
    };
    assert_eq!(
        verdict(&r, walk_failed, 1, 100),
        Err(Withheld::SourceIncomplete)
    );
    let listing_failed = Completion {
        source: true,
        dest: false,
    };
    assert_eq!(
        verdict(&r, listing_failed, 1, 100),
        Err(Withheld::DestIncomplete)
    );
}

#[test]
fn a_batch_over_the_limit_is_refused_whole() {
    let r = rules(MaxDelete::Count(5));
    assert_eq!(verdict(&r, WHOLE, 5, 100), Ok(()));
    assert_eq!(
        verdict(&r, WHOLE, 6, 100),
        Err(Withheld::OverLimit {
            planned: 6,
            limit: 5
        })
    );
    let share = rules(MaxDelete::Percent(10));
    assert_eq!(verdict(&share, WHOLE, 10, 100), Ok(()));
    assert_eq!(
        verdict(&share, WHOLE, 11, 100),
        Err(Withheld::OverLimit {
            planned: 11,
            limit: 10
        })
    );
    let mut set = DeleteSet::new(r, 2, MemorySpill::default());
    for i in 0..6 {
        assert_eq!(set.push(remote(i)), Ok(true));
    }
    assert_eq!(set.counts().planned, 6);
    let e = gathered(set, WHOLE, 100).expect_err("over the limit");
    assert_eq!(
        e.to_string(),
        "6 deletes exceed --max-delete (5): none made"
    );
}

#[test]
fn the_set_spills_full_buffers_and_hands_back_everything_in_order() {
    let mut set = DeleteSet::new(rules(MaxDelete::Count(1000)), 3, MemorySpill::default());
    for i in 0..10 {
        set.push(remote(i)).expect("push");
    }
    let all = gathered(set, WHOLE, 20).expect("allowed");
    assert_eq!(all, (0..10).map(remote).collect::<Vec<_>>());
    let mut set = DeleteSet::new(rules(MaxDelete::Percent(100)), 4, MemorySpill::default());
    for i in 0..9 {
        set.push(remote(i)).expect("push");
    }
    // Eight spilled in two appends; one still in memory.
    let all = gathered(set, WHOLE, 9).expect("allowed");
    assert_eq!(all.len(), 9);
}

#[test]
fn past_a_count_limit_candidates_are_only_counted() {
    let mut set = DeleteSet::new(rules(MaxDelete::Count(4)), 2, MemorySpill::default());
    for i in 0..1000 {
        set.push(remote(i)).expect("push");
    }
    assert_eq!(
        set.counts(),
        DeleteCounts {
            planned: 1000,
            kept: 0
        }
    );
    let e = set.finish(WHOLE, 2000).err();
    assert_eq!(
        e,
        Some(Withheld::OverLimit {
            planned: 1000,
            limit: 4
        })
    );
}

#[test]
fn local_files_this_machine_did_not_place_need_delete_unknown() {
    let r = rules(MaxDelete::Count(10));
    let placed = local("a", Origin::Placed);
    let changed = local("b", Origin::ChangedSincePlaced);
    let unknown = local("c", Origin::Unknown);
    assert!(r.admits(&placed) && !r.admits(&changed) && !r.admits(&unknown));
    assert!(r.admits(&remote(1)));
    let mut set = DeleteSet::new(r, 8, MemorySpill::default());
    for c in [placed.clone(), changed.clone(), unknown.clone()] {
        set.push(c).expect("push");
    }
    assert_eq!(
        set.counts(),
        DeleteCounts {
            planned: 1,
            kept: 2
        }
    );
    assert_eq!(gathered(set, WHOLE, 3), Ok(vec![placed.clone()]));
    let all = DeleteRules {
        delete_unknown: true,
        ..r
    };
    let mut set = DeleteSet::new(all, 8, MemorySpill::default());
    for c in [placed, changed, unknown] {
        assert_eq!(set.push(c), Ok(true));
    }
    assert_eq!(gathered(set, WHOLE, 3).map(|v| v.len()), Ok(3));
}

#[test]
fn a_remote_delete_carries_the_etag_it_was_listed_with() {
    let c = remote(7);
    assert_eq!(c.name(), "f0007");
    assert!(matches!(c, DeleteCandidate::Remote { ref etag, .. } if etag == "\"0x7\""));
}

#[test]
fn deletes_are_withheld_when_the_walk_had_a_gap() {
    let mut set = DeleteSet::new(rules(MaxDelete::Count(10)), 8, MemorySpill::default());
    set.push(remote(1)).expect("push");
    let walk_failed = Completion {
        source: false,
        dest: true,
    };
    assert_eq!(
        gathered(set, walk_failed, 5),
        Err(Withheld::SourceIncomplete)
    );
}
