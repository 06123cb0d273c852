//! The pure plan (`relay_proto::sync::plan`) run on a blocking thread: it
//! pulls the local walk and the listing one entry at a time, so neither side
//! is ever collected, and hands each decision that needs the network to the
//! runner through a bounded channel (the runner takes them as slots free
//! up: memory is the channel and `--parallel`, not the number of files).
//! Decisions that need no network (skips, gaps, conflicts, an adopted ETag)
//! are settled here; delete candidates go into the `DeleteSet`, decided
//! only after the merge has ended.

use std::sync::Arc;

use relay_proto::sync::delete::{DeleteCandidate, SpillStore};
use relay_proto::sync::delete_set::DeleteSet;
use relay_proto::sync::join::{Completion, Gap, Tally};
use relay_proto::sync::order::{OrderError, Side};
use tokio::sync::mpsc;

use super::counts::{Counts, bump};
use crate::transfer::file::{blank, failed};
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::Reporter;
use crate::ui::report::{FileError, Status};

/// Decisions the planner hands the runner at most this far ahead.
pub const PLAN_AHEAD: usize = 256;

/// What a decision comes to on the planner thread.
pub enum Step<W> {
    /// Settled here (counted, reported, recorded).
    Done,
    Delete(DeleteCandidate),
    /// For the runner.
    Work(W),
}

/// How the merge ended, for the delete verdict.
pub struct Planned<S> {
    pub completion: Completion,
    pub tally: Tally,
    pub deletes: DeleteSet<S>,
    /// Whether every decision reached the runner (false: it stopped first).
    pub whole: bool,
}

/// What the planner thread reports with.
#[derive(Clone)]
pub struct Shown {
    pub reporter: Arc<Reporter>,
    pub counts: Arc<Counts>,
    /// Where the destination (or source) is, for report lines.
    pub container: String,
    /// The listed prefix (`p/`, or empty): a blob's name is it and the name.
    pub below: String,
    /// `--dry-run`: every delete candidate gets its line.
    pub dry_run: bool,
    /// `--delete` given.
    pub deleting: bool,
}

impl Shown {
    /// One more line to come in the status line's totals, and (unless
    /// `--dry-run`, which moves nothing) the `bytes` it is to move: a file
    /// handed on to be sent, fetched or compared, or a line the merge makes
    /// itself. The totals grow while the merge runs (`12/40+ files`).
    pub fn expect(&self, bytes: u64) {
        let bytes = if self.dry_run { 0 } else { bytes };
        self.counts.found(
            |f| {
                f.files += 1;
                f.bytes += bytes;
            },
            |f| self.reporter.set_found(f),
        );
    }

    /// Work expected with `bytes` that ended without moving them (a
    /// conflict found when it ran: its line moves nothing), or without a
    /// line at all (`line: false`: a compared file found identical).
    pub fn unexpect(&self, line: bool, bytes: u64) {
        let bytes = if self.dry_run { 0 } else { bytes };
        self.counts.found(
            |f| {
                f.files -= u64::from(!line).min(f.files);
                f.bytes -= bytes.min(f.bytes);
            },
            |f| self.reporter.set_found(f),
        );
    }

    /// The merge has ended: the totals are whole.
    fn merged(&self) {
        self.counts
            .found(|f| f.complete = true, |f| self.reporter.set_found(f));
    }

    /// A part of one side that could not be read: one failed line, counted.
    pub fn gap(&self, side: Side, gap: &Gap) {
        self.expect(0);
        bump(&self.counts.gaps);
        let which = match side {
            Side::Source => "source",
            Side::Dest => "destination",
        };
        let e = FileError::new(
            ErrorCode::Incomplete,
            format!(
                "{which} not read whole: {}; nothing is deleted this run",
                gap.0
            ),
            false,
        );
        self.reporter
            .finish_file(None, failed(&gap.0, &self.container, "", e), 0);
    }

    fn order(&self, e: &OrderError) {
        self.gap(Side::Source, &Gap(e.to_string()));
    }

    /// `--dry-run`: a delete candidate's line.
    fn candidate(&self, c: &DeleteCandidate, admitted: bool) {
        if !self.dry_run {
            return;
        }
        let reason = match (admitted, self.deleting) {
            (false, _) => {
                "would keep (not placed by this machine, or changed since; --delete-unknown)"
            }
            (true, true) => "would delete (not on the source)",
            (true, false) => "not on the source (--delete would remove it)",
        };
        let blob = match c {
            DeleteCandidate::Remote { name, .. } => format!("{}{name}", self.below),
            DeleteCandidate::Local { .. } => String::new(),
        };
        let mut r = blank(c.name(), &self.container, &blob, Status::Planned);
        r.reason = Some(reason.into());
        self.expect(0);
        self.reporter.finish_file(None, r, 0);
    }
}

/// Runs `plan` to its end on this (blocking) thread: each decision through
/// `settle`, work into `tx`; stops early when nobody takes work any more.
pub fn run<D, W, S, P>(
    mut plan: P,
    progress: impl Fn(&P) -> (Completion, Tally),
    mut settle: impl FnMut(D) -> Step<W>,
    mut deletes: DeleteSet<S>,
    shown: &Shown,
    tx: &mpsc::Sender<W>,
) -> Planned<S>
where
    P: Iterator<Item = Result<D, OrderError>>,
    S: SpillStore,
{
    let (mut whole, mut spill_failed) = (true, false);
    for next in plan.by_ref() {
        let decision = match next {
            Ok(d) => d,
            Err(e) => {
                shown.order(&e);
                continue;
            }
        };
        match settle(decision) {
            Step::Done => {}
            Step::Delete(c) => match deletes.push(c.clone()) {
                Ok(admitted) => shown.candidate(&c, admitted),
                Err(e) => {
                    // No place for the candidate: the batch is not known whole.
                    spill_failed = true;
                    shown.gap(Side::Dest, &Gap(format!("delete candidates: {e}")));
                }
            },
            Step::Work(w) => {
                if tx.blocking_send(w).is_err() {
                    whole = false;
                    break;
                }
            }
        }
    }
    shown.merged();
    let (mut completion, tally) = progress(&plan);
    if spill_failed {
        completion.dest = false;
    }
    if !whole {
        completion = Completion::default();
    }
    Planned {
        completion,
        tally,
        deletes,
        whole,
    }
}

#[cfg(test)]
mod tests {
    use relay_proto::sync::delete::{DeleteRules, MaxDelete, MemorySpill};

    use super::*;
    use crate::ui::progress::Output;

    fn shown(dry_run: bool) -> Shown {
        Shown {
            reporter: Arc::new(Reporter::new(Output::Json, true)),
            counts: Arc::new(Counts::default()),
            container: "c".into(),
            below: "p/".into(),
            dry_run,
            deleting: true,
        }
    }

    const RULES: DeleteRules = DeleteRules {
        delete: true,
        max: MaxDelete::Count(10),
        delete_unknown: false,
    };

    fn whole(_: &std::vec::IntoIter<Result<u32, OrderError>>) -> (Completion, Tally) {
        let c = Completion {
            source: true,
            dest: true,
        };
        (c, Tally::default())
    }

    /// 0: settled here, 1: a delete candidate, anything else: work.
    fn settle(n: u32) -> Step<u32> {
        match n {
            0 => Step::Done,
            1 => Step::Delete(DeleteCandidate::Remote {
                name: format!("d{n}"),
                etag: "e".into(),
            }),
            n => Step::Work(n),
        }
    }

    #[test]
    fn work_goes_to_the_runner_candidates_to_the_set_and_dry_run_lists_them() {
        let plan: Vec<Result<u32, OrderError>> = [0, 2, 1, 3, 0].into_iter().map(Ok).collect();
        let (tx, mut rx) = mpsc::channel(8);
        let sh = shown(true);
        let set = DeleteSet::new(RULES, 4, MemorySpill::default());
        let p = run(plan.into_iter(), whole, settle, set, &sh, &tx);
        drop(tx);
        let mut got = Vec::new();
        while let Ok(w) = rx.try_recv() {
            got.push(w);
        }
        assert_eq!(got, [2, 3]);
        assert!(p.whole && p.completion.source && p.completion.dest);
        assert_eq!(p.deletes.counts().planned, 1);
        let s = sh.reporter.summary("relay");
        assert_eq!(s.files.len(), 1, "the candidate's dry-run line");
        assert_eq!(s.files.in_memory()[0].blob, "p/d1");
    }

    #[test]
    fn a_runner_that_stopped_ends_the_plan_and_leaves_both_sides_unread() {
        let plan: Vec<Result<u32, OrderError>> = (2..100).map(Ok).collect();
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let set = DeleteSet::new(RULES, 4, MemorySpill::default());
        let p = run(plan.into_iter(), whole, settle, set, &shown(false), &tx);
        assert!(!p.whole);
        assert_eq!(p.completion, Completion::default());
    }

    /// The status line's totals grow with each line the merge makes or
    /// hands on (bytes only for work that moves them, none in a dry run),
    /// shrink by what work ended without moving, and are complete when the
    /// merge has ended.
    #[test]
    fn the_status_totals_count_what_the_merge_hands_on() {
        let sh = shown(false);
        sh.expect(100);
        sh.expect(50);
        sh.gap(Side::Source, &Gap("x: unreadable".into()));
        let f = sh.reporter.progress().found;
        assert_eq!((f.files, f.bytes, f.complete), (3, 150, false));
        // A conflict found when it ran: its line, no bytes; an identical
        // compare: neither.
        sh.unexpect(true, 50);
        sh.unexpect(false, 100);
        let plan: Vec<Result<u32, OrderError>> = vec![];
        let set = DeleteSet::new(RULES, 4, MemorySpill::default());
        let (tx, _rx) = mpsc::channel(1);
        run(plan.into_iter(), whole, settle, set, &sh, &tx);
        let f = sh.reporter.progress().found;
        assert_eq!((f.files, f.bytes, f.complete), (2, 0, true));
        let dry = shown(true);
        dry.expect(100);
        let f = dry.reporter.progress().found;
        assert_eq!((f.files, f.bytes), (1, 0));
    }

    /// A spill store that cannot take anything.
    struct Full;

    impl SpillStore for Full {
        type Error = std::io::Error;
        type Replay<'a> = std::iter::Empty<Result<DeleteCandidate, std::io::Error>>;
        fn append(&mut self, _: &[DeleteCandidate]) -> Result<(), Self::Error> {
            Err(std::io::Error::other("disk full"))
        }
        fn replay(&mut self) -> Result<Self::Replay<'_>, Self::Error> {
            Ok(std::iter::empty())
        }
    }

    #[test]
    fn a_candidate_that_cannot_be_kept_makes_the_destination_incomplete() {
        let plan: Vec<Result<u32, OrderError>> = vec![Ok(1)];
        let (tx, _rx) = mpsc::channel(1);
        let sh = shown(false);
        let set = DeleteSet::new(RULES, 1, Full);
        let p = run(plan.into_iter(), whole, settle, set, &sh, &tx);
        assert!(p.completion.source && !p.completion.dest);
        assert_eq!(sh.counts.gaps.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
