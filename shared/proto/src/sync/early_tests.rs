use super::*;
use crate::sync::entry::FileStat;

fn stat(size: u64, mtime_ns: i64) -> FileStat {
    FileStat {
        size,
        mtime_ns,
        identity: None,
    }
}

fn record(s: FileStat) -> IndexRecord {
    IndexRecord {
        etag: "\"placed\"".into(),
        sha256: "ab".into(),
        stat: s,
    }
}

fn local(s: FileStat) -> LocalEntry {
    LocalEntry {
        name: "f".into(),
        stat: s,
    }
}

#[test]
fn only_a_file_changed_since_it_was_placed_goes_early() {
    let placed = record(stat(4, 1));
    let changed = local(stat(4, 2));
    let got = early_basis(&changed, Some(&placed), false).map(|r| r.etag.as_str());
    assert_eq!(got, Some("\"placed\""));
    assert_eq!(
        early_basis(&local(stat(5, 1)), Some(&placed), false),
        Some(&placed)
    );
    // Untouched: the merge skips it. Unknown to the index, or --checksum:
    // only the listing can say.
    assert_eq!(early_basis(&local(stat(4, 1)), Some(&placed), false), None);
    assert_eq!(early_basis(&changed, None, false), None);
    assert_eq!(early_basis(&changed, Some(&placed), true), None);
}

#[test]
fn a_name_not_sent_early_is_the_merges() {
    let mut e = EarlySends::<u32, u8>::default();
    assert_eq!(e.reached("f", 1), Reached::Merge(1));
    assert_eq!(e.ended("f", End::Declined(2)), None);
    assert!(e.is_empty());
}

/// What one name comes to in one interleaving of the merge reaching it and
/// the early send ending: how many sends besides the early one, with which
/// view, and whether anything was left behind.
fn settle(merge_first: bool, end: End<u8>) -> (Vec<(u32, u8)>, usize) {
    let mut e = EarlySends::default();
    e.started("f");
    let mut sends = Vec::new();
    let reach = |e: &mut EarlySends<u32, u8>| match e.reached("f", 7) {
        Reached::Merge(v) => panic!("sent early, yet the merge would send {v} again"),
        Reached::Early => None,
        Reached::Fallback(v, learned) => Some((v, learned)),
    };
    if merge_first {
        sends.extend(reach(&mut e));
        sends.extend(e.ended("f", end));
    } else {
        sends.extend(e.ended("f", end));
        sends.extend(reach(&mut e));
    }
    (sends, e.len())
}

#[test]
fn whichever_comes_first_a_declined_send_falls_back_once_and_a_done_one_never() {
    for merge_first in [true, false] {
        assert_eq!(settle(merge_first, End::Done), (vec![], 0), "{merge_first}");
        let declined = settle(merge_first, End::Declined(3));
        assert_eq!(declined, (vec![(7, 3)], 0), "{merge_first}");
    }
}

#[test]
fn names_are_settled_independently_and_nothing_is_left() {
    let mut e = EarlySends::<u32, u32>::default();
    for n in 0..100u32 {
        e.started(&n.to_string());
    }
    let mut fallbacks = 0;
    for n in 0..100u32 {
        let name = n.to_string();
        let declined = n % 3 == 0;
        let end = || {
            if declined {
                End::Declined(n + 1)
            } else {
                End::Done
            }
        };
        // Even names: the merge first; odd: the send's end first.
        let sent = if n % 2 == 0 {
            let r = e.reached(&name, n);
            assert_eq!(r, Reached::Early);
            e.ended(&name, end())
        } else {
            let ended = e.ended(&name, end());
            assert_eq!(ended, None);
            match e.reached(&name, n) {
                Reached::Fallback(v, learned) => Some((v, learned)),
                Reached::Early => None,
                Reached::Merge(_) => panic!("{name} sent twice"),
            }
        };
        assert_eq!(sent.is_some(), declined, "{name}");
        assert_eq!(sent.unwrap_or((n, n + 1)), (n, n + 1));
        fallbacks += usize::from(sent.is_some());
    }
    assert_eq!(fallbacks, 34);
    assert!(e.is_empty());
}
