//! Property tests over generated trees and listings (seeded, so a failure
//! repeats): the walk's order is the merge's, the merge pairs every name
//! exactly once, an unchanged re-run moves nothing, and a broken input or a
//! gap keeps every delete back.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

use super::delete::{DeleteRules, MaxDelete, MemorySpill, Withheld};
use super::delete_set::DeleteSet;
use super::entry::{FileStat, IndexRecord, LocalEntry, RemoteEntry};
use super::join::{Gap, Join, Joined};
use super::order::NameOrder;
use super::plan::{CompareFlags, DownloadDecision, DownloadPlan, UploadDecision, UploadPlan};
use super::walk_order::{SortedWalk, tests::MemTree};

const ORDERS: [NameOrder; 2] = [NameOrder::Utf8, NameOrder::Utf16];

/// Segments chosen to sit on either side of `/` and of each other in
/// both orders: punctuation around 0x2F, case, Latin-1, CJK, a fullwidth
/// form (U+FF01) and an emoji (beyond U+FFFF).
const SEGMENTS: [&str; 14] = [
    "a",
    "A",
    "b",
    "a.b",
    "a-b",
    "a0",
    "a b",
    "Z",
    "\u{e9}",
    "\u{4E2D}",
    "\u{FF01}",
    "\u{1F600}",
    "a.",
    "-",
];

/// Up to `n` distinct file paths, no path also a directory of another.
fn paths(rng: &mut StdRng, n: usize) -> Vec<String> {
    let mut files: BTreeSet<String> = BTreeSet::new();
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    for _ in 0..n {
        let depth = rng.random_range(1..=3);
        let segs: Vec<&str> = (0..depth)
            .filter_map(|_| SEGMENTS.choose(rng).copied())
            .collect();
        let path = segs.join("/");
        let parents: Vec<String> = (1..segs.len()).map(|i| segs[..i].join("/")).collect();
        if dirs.contains(&path) || parents.iter().any(|p| files.contains(p)) {
            continue;
        }
        dirs.extend(parents);
        files.insert(path);
    }
    files.into_iter().collect()
}

fn sorted(order: NameOrder, mut names: Vec<String>) -> Vec<String> {
    names.sort_by(|a, b| order.compare(a, b));
    names
}

#[test]
fn the_walk_yields_every_file_in_the_merges_order() {
    let mut rng = StdRng::seed_from_u64(58);
    for _ in 0..300 {
        let mut files = paths(&mut rng, 40);
        files.shuffle(&mut rng);
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        for order in ORDERS {
            let walked: Vec<String> = SortedWalk::new(MemTree::of(&refs), order)
                .map(|w| w.expect("readable").name)
                .collect();
            assert_eq!(walked, sorted(order, files.clone()), "{order:?}");
        }
    }
}

#[test]
fn the_merge_pairs_every_name_once_in_order() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let pool = paths(&mut rng, 30);
        let pick = |rng: &mut StdRng| -> Vec<String> {
            pool.iter()
                .filter(|_| rng.random_bool(0.6))
                .cloned()
                .collect()
        };
        let (s, d) = (pick(&mut rng), pick(&mut rng));
        for order in ORDERS {
            let named = |v: &[String]| -> Vec<Result<LocalEntry, Gap>> {
                let stat = FileStat {
                    size: 0,
                    mtime_ns: 0,
                    identity: None,
                };
                sorted(order, v.to_vec())
                    .into_iter()
                    .map(|name| Ok(LocalEntry { name, stat }))
                    .collect()
            };
            let (src, dst) = (named(&s), named(&d));
            let mut join = Join::new(src.into_iter(), dst.into_iter(), order);
            let mut seen = Vec::new();
            for step in join.by_ref() {
                let (name, from_s, from_d) = match step.expect("in order") {
                    Joined::Source(e) => (e.name, true, false),
                    Joined::Dest(e) => (e.name, false, true),
                    Joined::Both(a, b) => {
                        assert_eq!(a.name, b.name);
                        (a.name, true, true)
                    }
                    Joined::Gap(..) => unreachable!("no gaps given"),
                };
                assert_eq!(
                    (from_s, from_d),
                    (s.contains(&name), d.contains(&name)),
                    "{name}"
                );
                seen.push(name);
            }
            let union: BTreeSet<String> = s.iter().chain(&d).cloned().collect();
            assert_eq!(seen, sorted(order, union.into_iter().collect()));
            let done = join.completion();
            assert!(done.source && done.dest);
        }
    }
}

/// A tree in both forms: the walk's entries and the listing's, each with
/// the index record of a run that moved it.
struct Mirror {
    local: Vec<LocalEntry>,
    remote: Vec<RemoteEntry>,
}

fn mirror(rng: &mut StdRng, order: NameOrder) -> Mirror {
    let names = sorted(order, paths(rng, 60));
    let local: Vec<LocalEntry> = names
        .iter()
        .map(|name| LocalEntry {
            name: name.clone(),
            stat: FileStat {
                size: rng.random_range(0..4096),
                mtime_ns: rng.random_range(0..1 << 40),
                identity: None,
            },
        })
        .collect();
    let remote = local
        .iter()
        .enumerate()
        .map(|(i, l)| RemoteEntry {
            name: l.name.clone(),
            size: l.stat.size,
            last_modified: Some(1),
            etag: format!("\"0x{i}\""),
            vouched_sha256: None,
        })
        .collect();
    Mirror { local, remote }
}

/// The index of the run that made `m`: every name, its stat and ETag.
fn index_of(m: &Mirror) -> impl Fn(&str) -> Option<IndexRecord> + '_ {
    |name| {
        let i = m.local.iter().position(|l| l.name == name)?;
        Some(IndexRecord {
            etag: m.remote[i].etag.clone(),
            sha256: "00".into(),
            stat: m.local[i].stat,
        })
    }
}

fn ok<T: Clone>(v: &[T]) -> impl Iterator<Item = Result<T, Gap>> + '_ {
    v.iter().cloned().map(Ok)
}

#[test]
fn an_unchanged_rerun_sends_and_fetches_nothing_both_ways() {
    let mut rng = StdRng::seed_from_u64(2026);
    for _ in 0..100 {
        for order in ORDERS {
            let m = mirror(&mut rng, order);
            let flags = CompareFlags::default();
            let up = UploadPlan::new(ok(&m.local), ok(&m.remote), order, index_of(&m), flags);
            for d in up {
                assert!(matches!(d, Ok(UploadDecision::Skip(_))), "{d:?}");
            }
            let down = DownloadPlan::new(ok(&m.remote), ok(&m.local), order, index_of(&m), flags);
            for d in down {
                assert!(matches!(d, Ok(DownloadDecision::Skip(_))), "{d:?}");
            }
        }
    }
}

#[test]
fn an_upload_sends_exactly_what_changed_and_deletes_exactly_what_went() {
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..100 {
        let order = *ORDERS.choose(&mut rng).expect("orders");
        let m = mirror(&mut rng, order);
        let mut walk = m.local.clone();
        let mut touched = BTreeSet::new();
        for l in walk.iter_mut().filter(|_| rng.random_bool(0.1)) {
            l.stat.mtime_ns += 1;
            touched.insert(l.name.clone());
        }
        let removed = pick_names(&mut rng, &m.local);
        walk.retain(|l| !removed.contains(&l.name));
        let flags = CompareFlags::default();
        let plan = UploadPlan::new(ok(&walk), ok(&m.remote), order, index_of(&m), flags);
        let (mut sent, mut deleted) = (BTreeSet::new(), BTreeSet::new());
        for d in plan {
            match d.expect("in order") {
                UploadDecision::Send { local, .. } => sent.insert(local.name),
                UploadDecision::Delete(c) => deleted.insert(c.name().to_string()),
                UploadDecision::Skip(_) => true,
                other => panic!("{other:?}"),
            };
        }
        let expected: BTreeSet<String> = touched.difference(&removed).cloned().collect();
        assert_eq!(sent, expected);
        assert_eq!(deleted, removed);
    }
}

#[test]
fn a_download_fetches_what_changed_there_and_keeps_what_changed_here() {
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..100 {
        let order = *ORDERS.choose(&mut rng).expect("orders");
        let m = mirror(&mut rng, order);
        let (mut listing, mut walk) = (m.remote.clone(), m.local.clone());
        let mut newer = BTreeSet::new();
        for r in listing.iter_mut().filter(|_| rng.random_bool(0.1)) {
            r.etag.push_str("-2");
            newer.insert(r.name.clone());
        }
        let mut edited = BTreeSet::new();
        for l in walk.iter_mut().filter(|_| rng.random_bool(0.1)) {
            l.stat.mtime_ns += 1;
            edited.insert(l.name.clone());
        }
        let gone_there = pick_names(&mut rng, &m.local);
        let gone_here = pick_names(&mut rng, &m.local);
        listing.retain(|r| !gone_there.contains(&r.name));
        walk.retain(|l| !gone_here.contains(&l.name));
        let flags = CompareFlags::default();
        let plan = DownloadPlan::new(ok(&listing), ok(&walk), order, index_of(&m), flags);
        let (mut fetched, mut conflicts, mut deleted) = Default::default();
        for d in plan {
            let into: Option<(&mut BTreeSet<String>, String)> = match d.expect("in order") {
                DownloadDecision::Fetch { remote, .. } => Some((&mut fetched, remote.name)),
                DownloadDecision::Conflict { local, .. } => Some((&mut conflicts, local.name)),
                DownloadDecision::Delete(c) => Some((&mut deleted, c.name().to_string())),
                DownloadDecision::Skip(_) => None,
                other => panic!("{other:?}"),
            };
            if let Some((set, name)) = into {
                set.insert(name);
            }
        }
        let here: BTreeSet<String> = walk.iter().map(|l| l.name.clone()).collect();
        let there: BTreeSet<String> = listing.iter().map(|r| r.name.clone()).collect();
        let both: BTreeSet<String> = here.intersection(&there).cloned().collect();
        let changed_there: BTreeSet<String> = newer.difference(&edited).cloned().collect();
        let expected_fetch: BTreeSet<String> = there
            .difference(&here)
            .chain(both.intersection(&changed_there))
            .cloned()
            .collect();
        assert_eq!(fetched, expected_fetch);
        assert_eq!(conflicts, both.intersection(&edited).cloned().collect());
        assert_eq!(deleted, here.difference(&there).cloned().collect());
    }
}

/// About a tenth of the names of `entries`.
fn pick_names(rng: &mut StdRng, entries: &[LocalEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|_| rng.random_bool(0.1))
        .map(|l| l.name.clone())
        .collect()
}

fn rules() -> DeleteRules {
    DeleteRules {
        delete: true,
        max: MaxDelete::Percent(100),
        delete_unknown: false,
    }
}

#[test]
fn a_gap_in_the_walk_withholds_every_delete() {
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..50 {
        let order = NameOrder::Utf16;
        let m = mirror(&mut rng, order);
        if m.local.len() < 2 {
            continue;
        }
        // The walk could not read part of the tree: those names look gone.
        let cut = rng.random_range(0..m.local.len());
        let mut walk: Vec<Result<LocalEntry, Gap>> = ok(&m.local[..cut]).collect();
        walk.push(Err(Gap("unreadable folder".into())));
        let flags = CompareFlags::default();
        let mut plan = UploadPlan::new(walk.into_iter(), ok(&m.remote), order, index_of(&m), flags);
        let mut set = DeleteSet::new(rules(), 8, MemorySpill::default());
        for d in plan.by_ref() {
            if let UploadDecision::Delete(c) = d.expect("in order") {
                set.push(c).expect("push");
            }
        }
        assert_eq!(set.counts().planned, (m.local.len() - cut) as u64);
        let dest = plan.tally().dest_entries;
        let verdict = set.finish(plan.completion(), dest).err();
        assert_eq!(verdict, Some(Withheld::SourceIncomplete));
    }
}

#[test]
fn a_listing_out_of_order_stops_the_run_and_withholds_every_delete() {
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..100 {
        let order = *ORDERS.choose(&mut rng).expect("orders");
        let m = mirror(&mut rng, order);
        if m.remote.len() < 2 {
            continue;
        }
        let mut listing = m.remote.clone();
        let at = rng.random_range(0..listing.len() - 1);
        listing.swap(at, at + 1);
        let flags = CompareFlags::default();
        let mut plan = UploadPlan::new(ok(&[]), ok(&listing), order, index_of(&m), flags);
        let mut set = DeleteSet::new(rules(), 8, MemorySpill::default());
        let mut refused = false;
        for d in plan.by_ref() {
            match d {
                Ok(UploadDecision::Delete(c)) => drop(set.push(c)),
                Ok(other) => panic!("{other:?}"),
                Err(_) => refused = true,
            }
        }
        assert!(refused);
        let dest = plan.tally().dest_entries;
        let verdict = set.finish(plan.completion(), dest).err();
        assert_eq!(verdict, Some(Withheld::SourceIncomplete));
    }
}
