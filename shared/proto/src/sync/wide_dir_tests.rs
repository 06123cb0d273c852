//! The external sort of a wide directory gives exactly the in-memory order
//! (random names around the UTF-16/UTF-8 edges, folders as `name/`), holds
//! one entry per run while it merges, and a run that cannot be spilled or
//! read back is a gap, never a silent loss.

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

use super::super::join::Gap;
use super::super::order::NameOrder;
use super::super::walk_order::tests::MemTree;
use super::super::walk_order::{Child, SortedWalk, Tree};
use super::*;

const ORDERS: [NameOrder; 2] = [NameOrder::Utf8, NameOrder::Utf16];

/// Characters on either side of `/` (0x2F) and of each other in both
/// orders: `-`, `.`, `0`, case, Latin-1, CJK, U+FF01 (fullwidth, after
/// the surrogates in UTF-16) and an emoji (a surrogate pair).
const CHARS: [char; 12] = [
    '-',
    '.',
    '0',
    'a',
    'A',
    'b',
    ' ',
    '\u{e9}',
    '\u{4E2D}',
    '\u{FF01}',
    '\u{1F600}',
    'Z',
];

fn random_name(rng: &mut StdRng) -> String {
    let len = rng.random_range(1..=4);
    (0..len)
        .filter_map(|_| CHARS.choose(rng).copied())
        .collect()
}

/// A tree whose spills are counted and may fail: to write (`fail_spill`)
/// or to read back after `break_after` entries of a run.
struct Spilling {
    inner: MemTree,
    spilled: usize,
    fail_spill: bool,
    break_after: Option<usize>,
}

impl Spilling {
    fn new(inner: MemTree) -> Self {
        Self {
            inner,
            spilled: 0,
            fail_spill: false,
            break_after: None,
        }
    }
}

impl Tree for Spilling {
    type File = u64;
    type Entries = std::vec::IntoIter<Child<u64>>;

    fn read_dir(&mut self, path: &str) -> Result<Self::Entries, String> {
        self.inner.read_dir(path)
    }

    fn spill(&mut self, run: Vec<Child<u64>>) -> Result<Run<u64>, String> {
        if self.fail_spill {
            return Err("no space left on device".into());
        }
        self.spilled += 1;
        let cut = self.break_after.unwrap_or(usize::MAX);
        let read = run.into_iter().map(Ok).take(cut);
        let broken = (cut != usize::MAX).then(|| Err("run unreadable".to_string()));
        Ok(Box::new(read.chain(broken)))
    }
}

fn walk(tree: impl Tree<File = u64>, order: NameOrder, width: usize) -> Vec<String> {
    SortedWalk::new(tree, order)
        .with_width(width)
        .map(|w| {
            w.map(|w| w.name)
                .unwrap_or_else(|Gap(why)| format!("gap: {why}"))
        })
        .collect()
}

#[test]
fn a_flat_folder_sorted_in_runs_comes_out_in_the_in_memory_order() {
    let mut rng = StdRng::seed_from_u64(58);
    for round in 0..40 {
        let mut names: Vec<String> = (0..600).map(|_| random_name(&mut rng)).collect();
        names.sort();
        names.dedup();
        // A third of the names are folders holding one file: `name/` sorts
        // among the files of the same stem exactly as in memory.
        let files: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i % 3 == 0 {
                    format!("{n}/x")
                } else {
                    n.clone()
                }
            })
            .collect();
        let mut shuffled = files.clone();
        shuffled.shuffle(&mut rng);
        let refs: Vec<&str> = shuffled.iter().map(String::as_str).collect();
        for order in ORDERS {
            let width = rng.random_range(1..=50);
            let in_memory = walk(MemTree::of(&refs), order, usize::MAX);
            let mut tree = Spilling::new(MemTree::of(&refs));
            let mut external = SortedWalk::new(&mut tree, order).with_width(width);
            let mut got = Vec::new();
            let mut most = 0;
            while let Some(w) = external.next() {
                most = most.max(external.held());
                got.push(w.expect("readable").name);
            }
            assert_eq!(got, in_memory, "round {round}, {order:?}, width {width}");
            if names.len() > width {
                let runs = names.len().div_ceil(width);
                assert_eq!(tree.spilled, runs);
                // One head per run at the root, one file in a folder below.
                assert!(most <= runs + 1, "held {most} with {runs} runs");
            } else {
                assert_eq!(tree.spilled, 0);
            }
        }
    }
}

#[test]
fn random_trees_walk_the_same_at_any_width() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let mut files: Vec<String> = (0..40)
            .map(|_| {
                let depth = rng.random_range(1..=3);
                (0..depth)
                    .map(|_| random_name(&mut rng))
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        files.sort();
        files.dedup();
        // No file may also be a folder of another.
        let all = files.clone();
        files.retain(|f| !all.iter().any(|g| g.starts_with(&format!("{f}/"))));
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        for order in ORDERS {
            let mut want = files.clone();
            want.sort_by(|a, b| order.compare(a, b));
            for width in [1, 2, 3, 5, SORT_IN_MEMORY] {
                let got = walk(Spilling::new(MemTree::of(&refs)), order, width);
                assert_eq!(got, want, "{order:?}, width {width}");
            }
        }
    }
}

#[test]
fn a_run_that_cannot_be_spilled_is_a_gap_for_its_folder_and_the_walk_goes_on() {
    let tree = MemTree::of(&["wide/a", "wide/b", "wide/c", "wide/d", "x"]);
    let mut spilling = Spilling::new(tree);
    spilling.fail_spill = true;
    let got = walk(spilling, NameOrder::Utf16, 2);
    assert_eq!(got, ["gap: wide: no space left on device", "x"]);
}

#[test]
fn a_run_that_breaks_on_reading_back_is_a_gap_and_the_other_runs_go_on() {
    let tree = MemTree::of(&["w/a", "w/b", "w/c", "w/d", "w/e", "w/f", "x"]);
    let mut spilling = Spilling::new(tree);
    spilling.break_after = Some(1);
    let got = walk(spilling, NameOrder::Utf16, 2);
    // Runs {a,b} {c,d} {e,f} (sorted per chunk of the reversed listing:
    // {e,f} {c,d} {a,b}); each hands out its first entry then breaks.
    assert_eq!(
        got.iter()
            .filter(|g| g.starts_with("gap: w: run unreadable"))
            .count(),
        3
    );
    let names: Vec<&String> = got.iter().filter(|g| !g.starts_with("gap")).collect();
    assert_eq!(names, ["w/a", "w/c", "w/e", "x"]);
}
