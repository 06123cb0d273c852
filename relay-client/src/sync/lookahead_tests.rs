use std::cell::Cell;

use relay_proto::sync::entry::{FileStat, Identity, RemoteEntry};
use relay_proto::sync::order::NameOrder;
use relay_proto::sync::plan::{
    CompareFlags, DownloadDecision, DownloadPlan, UploadDecision, UploadPlan,
};
use relay_proto::sync::unchanged::{FetchReason, SendReason};

use super::*;

fn stat(n: i64) -> FileStat {
    FileStat {
        size: 4,
        mtime_ns: n,
        identity: Some(Identity {
            ino: n as u64,
            dev: 1,
            ctime_ns: n,
        }),
    }
}

fn local(name: &str) -> Result<LocalEntry, Gap> {
    Ok(LocalEntry {
        name: name.into(),
        stat: stat(7),
    })
}

fn remote(name: &str, etag: &str) -> Result<RemoteEntry, Gap> {
    Ok(RemoteEntry {
        name: name.into(),
        size: 4,
        last_modified: Some(1),
        etag: etag.into(),
        vouched_sha256: None,
    })
}

fn record(etag: &str) -> IndexRecord {
    IndexRecord {
        etag: etag.into(),
        sha256: "ab".into(),
        stat: stat(7),
    }
}

/// A fetch from an in-memory index: its rows are `(name, etag)`; it answers
/// them in the index's key order (UTF-8 bytes, SQLite's `BINARY`), counting
/// its calls and the names it was given.
fn index(
    rows: &[(&str, &str)],
    calls: &Cell<usize>,
    asked: &Cell<usize>,
) -> impl FnMut(&[&str]) -> Vec<(String, IndexRecord)> {
    let mut rows: Vec<(String, String)> = rows
        .iter()
        .map(|(n, e)| (n.to_string(), e.to_string()))
        .collect();
    rows.sort();
    move |names: &[&str]| {
        calls.set(calls.get() + 1);
        asked.set(asked.get() + names.len());
        rows.iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .map(|(n, e)| (n.clone(), record(e)))
            .collect()
    }
}

/// Names absent from the index answer "no record" (not "not prefetched"),
/// and the plan sends them as not indexed; one fetch per batch.
#[test]
fn names_the_index_lacks_answer_no_record() {
    let (calls, asked) = (Cell::new(0), Cell::new(0));
    let walk = vec![local("a"), local("b"), local("c")];
    let (ahead, records) = read_ahead(walk.into_iter(), 2, index(&[("b", "e")], &calls, &asked));
    let listing = vec![remote("a", "e"), remote("b", "e"), remote("c", "e")];
    let look = |n: &str| records.take(n).expect("prefetched");
    let plan = UploadPlan::new(
        ahead,
        listing.into_iter(),
        NameOrder::Utf16,
        look,
        CompareFlags::default(),
    );
    let got: Vec<_> = plan.map(|d| d.expect("in order")).collect();
    let send = |n: &str| UploadDecision::Send {
        local: local(n).expect("entry"),
        reason: SendReason::NotIndexed,
        listed: remote(n, "e").ok(),
    };
    assert_eq!(
        got,
        [send("a"), UploadDecision::Skip("b".into()), send("c")]
    );
    assert_eq!((calls.get(), asked.get()), (2, 3), "one fetch per batch");
}

/// A batch whose names the index orders otherwise (UTF-8 bytes: `！`
/// U+FF01 after `😀` U+1F600 in UTF-16, before it in UTF-8): each name
/// still gets its own record, found by name, not by position.
#[test]
fn a_batch_the_index_orders_otherwise_pairs_each_name_with_its_record() {
    let (calls, asked) = (Cell::new(0), Cell::new(0));
    // The walk's (and the listing's) order: UTF-16 code units.
    let names = ["p/a", "p/😀", "p/！", "p/z"];
    assert!(NameOrder::Utf16.compare(names[1], names[2]).is_lt());
    assert!(names[2].as_bytes() < names[1].as_bytes());
    let rows: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let walk: Vec<_> = names.iter().map(|n| local(n)).collect();
    let (mut ahead, records) = read_ahead(walk.into_iter(), 8, index(&rows, &calls, &asked));
    for n in names {
        let e = ahead.next().expect("entry").expect("no gap");
        assert_eq!(e.name, n);
        let r = records.take(n).expect("prefetched").expect("a record");
        assert_eq!(r.etag, n, "the record of {n}");
    }
    assert!(ahead.next().is_none());
    assert_eq!(calls.get(), 1);
}

/// An empty walk, and a walk of gaps only: no fetch at all, the gaps passed
/// on in place.
#[test]
fn an_empty_batch_is_not_fetched_and_gaps_pass_through() {
    let (calls, asked) = (Cell::new(0), Cell::new(0));
    let (mut ahead, _) = read_ahead(std::iter::empty(), 4, index(&[], &calls, &asked));
    assert!(ahead.next().is_none());
    let walk = vec![Err(Gap("x: unreadable".into())), local("a")];
    let (ahead, records) = read_ahead(walk.into_iter(), 1, index(&[], &calls, &asked));
    let got: Vec<_> = ahead.collect();
    assert_eq!(got, [Err(Gap("x: unreadable".into())), local("a")]);
    assert_eq!(
        (calls.get(), asked.get()),
        (1, 1),
        "only the batch with a name"
    );
    assert_eq!(records.take("a"), Some(None));
    assert_eq!(records.take("zz"), None, "not prefetched: the caller asks");
}

/// A record for another ETag is the record: the upload sends the file (the
/// blob is no longer the version sent), the download fetches the blob's
/// new version over the file placed from the old one.
#[test]
fn a_record_of_another_etag_sends_and_fetches() {
    let (calls, asked) = (Cell::new(0), Cell::new(0));
    let fetch = index(&[("f", "\"old\"")], &calls, &asked);
    let (ahead, records) = read_ahead(vec![local("f")].into_iter(), 4, fetch);
    let look = |n: &str| records.take(n).expect("prefetched");
    let flags = CompareFlags::default();
    let listing = vec![remote("f", "\"new\"")];
    let mut up = UploadPlan::new(ahead, listing.into_iter(), NameOrder::Utf16, look, flags);
    let reason = SendReason::ChangedRemotely;
    let want = UploadDecision::Send {
        local: local("f").expect("entry"),
        reason,
        listed: remote("f", "\"new\"").ok(),
    };
    assert_eq!(up.next().map(|d| d.expect("in order")), Some(want));

    let fetch = index(&[("f", "\"old\"")], &calls, &asked);
    let (ahead, records) = read_ahead(vec![local("f")].into_iter(), 4, fetch);
    let look = |n: &str| records.take(n).expect("prefetched");
    let listing = vec![remote("f", "\"new\"")];
    let mut down = DownloadPlan::new(listing.into_iter(), ahead, NameOrder::Utf16, look, flags);
    let want = DownloadDecision::Fetch {
        remote: remote("f", "\"new\"").expect("entry"),
        reason: FetchReason::ChangedRemotely,
    };
    assert_eq!(down.next().map(|d| d.expect("in order")), Some(want));
}

/// Names never asked about (new files of an upload: no listing entry, so no
/// lookup) are not kept past the next batch: two batches at most, whatever
/// the walk's length.
#[test]
fn names_never_asked_about_are_dropped_two_batches_on() {
    let (calls, asked) = (Cell::new(0), Cell::new(0));
    let walk = (0..1000).map(|i| local(&format!("f{i:04}")));
    let (ahead, records) = read_ahead(walk, 10, index(&[], &calls, &asked));
    let mut most = 0;
    for e in ahead {
        e.expect("entry");
        most = most.max(records.held());
    }
    assert!(most <= 20, "held {most}");
    assert_eq!(calls.get(), 100);
    // Asking about a late name drops those before it.
    assert_eq!(records.take("f0995"), Some(None));
    assert_eq!(records.held(), 4);
}
