//! The races themselves: a writer against one reader in every interleaving,
//! and two readers of one partial file in seeded random orders.

use std::collections::BTreeSet;

use super::*;
use crate::race_tests::next_choices;

/// What one run left.
struct Outcome {
    branching: Vec<usize>,
    /// Each reader's end, in reader order.
    ends: Vec<End>,
    disk: Disk,
    recorded: Recorded,
    /// The version there before the writer wrote.
    first_etag: String,
    /// Every request let through, in order: (participant, operation).
    log: Vec<(usize, &'static str)>,
}

/// One run: the blob at version 1 (and, when `earlier` is `Some(n)`, a
/// partial file of its first `n` bytes left by an earlier run), `readers`
/// readers downloading it (reader 0 stopped after one range when
/// `kill_first`) while a writer does `write`; `pick` chooses among the
/// requests ready at each turn.
async fn run_once(
    write: Write,
    readers: usize,
    kill_first: bool,
    earlier: Option<usize>,
    pick: impl FnMut(usize, usize) -> usize,
) -> Outcome {
    let account = MemoryAccount::new();
    let recorded = Recorded::default();
    put(&account.blob(CONTAINER, NAME), version(1), &recorded).await;
    let first = account.source(CONTAINER).properties(NAME).await;
    let first_etag = first.expect("version 1").etag;
    let disk = Arc::new(Mutex::new(Disk {
        partial: earlier.map(|n| PartialFile {
            etag: first_etag.clone(),
            size: SIZE as u64,
            bytes: version(1)[..n].to_vec(),
        }),
        ..Disk::default()
    }));
    let turnstile = Turnstile::new(readers + 1);
    let mut tasks = Vec::new();
    for id in 0..readers {
        let source = account.source_in_turn(CONTAINER, turnstile.clone(), id);
        let (t, disk) = (turnstile.clone(), disk.clone());
        tasks.push(tokio::spawn(async move {
            let reader = Reader {
                source: &source,
                turnstile: &t,
                id,
                disk: &disk,
                killed_after_a_range: kill_first && id == 0,
            };
            let end = reader.run().await;
            t.finish(id);
            end
        }));
    }
    let writer = account.blob_in_turn(CONTAINER, NAME, turnstile.clone(), readers);
    let (t, rec) = (turnstile.clone(), recorded.clone());
    let writing = tokio::spawn(async move {
        match write {
            Write::Nothing => {}
            Write::ReplaceOnce => put(&writer, version(2), &rec).await,
            Write::ReplaceTwice => {
                put(&writer, version(2), &rec).await;
                put(&writer, version(3), &rec).await;
            }
            Write::Delete => assert!(writer.delete().await),
        }
        t.finish(readers);
    });
    let branching = schedule(&turnstile, pick).await;
    writing.await.expect("writer task");
    let mut ends = Vec::new();
    for task in tasks {
        ends.push(task.await.expect("reader task"));
    }
    let disk = std::mem::take(&mut *lock(&disk));
    Outcome {
        branching,
        ends,
        disk,
        recorded,
        first_etag,
        log: turnstile.log(),
    }
}

/// Runs every interleaving of one reader with a writer doing `write`,
/// checks each run's placed file, and returns every run's outcome.
async fn every_interleaving(write: Write, earlier: Option<usize>) -> Vec<Outcome> {
    let mut choices: Vec<usize> = Vec::new();
    let mut runs = Vec::new();
    loop {
        let picked = choices.clone();
        let o = run_once(write, 1, false, earlier, |_, k| {
            picked.get(k).copied().unwrap_or(0)
        })
        .await;
        check_disk(&o.disk, &o.recorded, &format!("choices {choices:?}"));
        let next = next_choices(choices.clone(), &o.branching);
        runs.push(o);
        match next {
            Some(next) => choices = next,
            None => return runs,
        }
    }
}

/// The version a run placed: 1, 2 or 3.
fn placed_version(o: &Outcome) -> Option<u8> {
    let placed = o.disk.placed.as_ref()?;
    (1..=3).find(|n| placed.bytes == version(*n))
}

#[tokio::test]
async fn a_blob_replaced_between_two_ranges_is_read_again_never_mixed() {
    for earlier in [None, Some(RANGE as usize)] {
        let runs = every_interleaving(Write::ReplaceTwice, earlier).await;
        assert!(runs.len() >= 30, "only {} interleavings", runs.len());
        let mut versions = BTreeSet::new();
        for o in &runs {
            // Two replacements are fewer than the restarts a file may take:
            // every run places a whole version.
            assert_eq!(o.ends, [End::Placed], "earlier partial {earlier:?}");
            let placed = o.disk.placed.as_ref().expect("placed");
            assert!(o.disk.partial.is_none(), "the partial file was placed");
            versions.insert(placed_version(o).expect("one version's bytes"));
            if placed_version(o) == Some(1) {
                assert!(same_etag(&placed.etag, &o.first_etag));
            }
        }
        // The reader met each version: read before, between and after.
        assert_eq!(versions, BTreeSet::from([1, 2, 3]), "earlier {earlier:?}");
    }
}

#[tokio::test]
async fn a_blob_deleted_between_list_and_fetch_is_not_found() {
    for earlier in [None, Some(RANGE as usize)] {
        let runs = every_interleaving(Write::Delete, earlier).await;
        let mut ends = BTreeSet::new();
        for o in &runs {
            match &o.ends[..] {
                [End::Failed("not_found")] => {
                    assert!(o.disk.placed.is_none());
                    assert!(o.disk.partial.is_none(), "a gone blob's partial is kept");
                }
                [End::Placed] => assert_eq!(placed_version(o), Some(1)),
                [End::NotListed] => assert!(o.disk.placed.is_none()),
                other => panic!("a deleted blob's download ended {other:?}"),
            }
            ends.insert(format!("{:?}", o.ends));
        }
        assert_eq!(ends.len(), 3, "not every end was met: {ends:?}");
        // The delete right after the List, before the reader's first Fetch.
        let between = [(0, "List Blobs"), (1, "Delete Blob")];
        let right_after_list = runs
            .iter()
            .find(|o| o.log.starts_with(&between))
            .expect("a run with the delete right after the List");
        assert_eq!(right_after_list.ends, [End::Failed("not_found")]);
    }
}

/// xorshift64: a repeatable stream of picks for one round's seed.
fn picks(seed: u64) -> impl FnMut(usize, usize) -> usize {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |n, _| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    }
}

#[tokio::test]
async fn two_readers_of_one_partial_take_it_in_turn_and_never_mix_versions() {
    let mut resumed_a_partial = 0;
    let mut placed_versions = BTreeSet::new();
    for round in 0..64u64 {
        // Reader 0 stopped mid-file in every other round, and the blob
        // replaced in half of each kind.
        let kill_first = round % 2 == 1;
        let write = if round % 4 < 2 {
            Write::ReplaceOnce
        } else {
            Write::Nothing
        };
        let o = run_once(write, 2, kill_first, None, picks(round)).await;
        let run = format!("round {round}");
        check_disk(&o.disk, &o.recorded, &run);
        for (id, end) in o.ends.iter().enumerate() {
            let stopped = kill_first && id == 0 && *end == End::Stopped;
            assert!(
                stopped || matches!(end, End::Placed | End::Skipped),
                "reader {id} ended {end:?} ({run})"
            );
        }
        // Reader 1 always ends with a whole file in place; only a stopped
        // reader leaves a partial file (of one version: `check_disk`).
        let placed = placed_version(&o);
        assert!(placed.is_some(), "nothing placed ({run})");
        placed_versions.extend(placed);
        assert!(kill_first || o.disk.partial.is_none(), "{run}");
        resumed_a_partial += o.disk.resumes;
    }
    assert!(
        resumed_a_partial > 0,
        "no reader resumed another's partial file"
    );
    assert!(placed_versions.len() >= 2, "{placed_versions:?}");
}
