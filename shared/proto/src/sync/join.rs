//! The streaming merge: two inputs sorted in one [`NameOrder`], paired by
//! name, holding one entry of each side and the last name of each (for the
//! order check) whatever the number of entries.
//!
//! An input yields entries, or a [`Gap`] where part of it could not be read
//! (an unreadable folder, a listing lost for good); it ends (`None`) only
//! when it is complete. The merge passes gaps on and remembers them: a
//! name missing from an input with a gap may only be unread, so no delete
//! may follow from it ([`Completion`]). An input out of order stops the
//! merge with an [`OrderError`]: pairing would go wrong silently, and a
//! name that looks absent on the other side looks like a delete. The merge
//! sees disorder only when it reads it, so steps handed on before it may be
//! wrong already: a delete is never acted on before the merge has ended
//! with both inputs complete, and a "new" name is still placed without
//! overwriting what a later look finds there.

use std::cmp::Ordering;

use super::entry::Named;
use super::order::{NameOrder, OrderCheck, OrderError, Side};

/// Part of one input that could not be read, as the input says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap(pub String);

/// One step of the merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined<S, D> {
    /// A name only the source has.
    Source(S),
    /// A name only the destination has.
    Dest(D),
    Both(S, D),
    Gap(Side, Gap),
}

/// Whether each input was read whole: ended, with no gap, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    pub source: bool,
    pub dest: bool,
}

/// What the merge has seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub source_entries: u64,
    pub dest_entries: u64,
    pub source_gaps: u64,
    pub dest_gaps: u64,
}

/// One input and where it got to.
struct Input<I, T> {
    items: I,
    check: OrderCheck,
    next: Option<T>,
    ended: bool,
    entries: u64,
    gaps: u64,
}

impl<I: Iterator<Item = Result<T, Gap>>, T: Named> Input<I, T> {
    fn new(items: I, side: Side, order: NameOrder) -> Self {
        Self {
            items,
            check: OrderCheck::new(side, order),
            next: None,
            ended: false,
            entries: 0,
            gaps: 0,
        }
    }

    /// Fills `next` if it is empty and the input has more; a gap is handed
    /// back at once.
    fn fill(&mut self) -> Result<Option<Gap>, OrderError> {
        if self.next.is_some() || self.ended {
            return Ok(None);
        }
        match self.items.next() {
            None => self.ended = true,
            Some(Err(gap)) => {
                self.gaps += 1;
                return Ok(Some(gap));
            }
            Some(Ok(entry)) => {
                self.check.accept(entry.name())?;
                self.entries += 1;
                self.next = Some(entry);
            }
        }
        Ok(None)
    }

    fn complete(&self) -> bool {
        self.ended && self.gaps == 0
    }
}

/// The merge of a source and a destination input.
pub struct Join<SI, S, DI, D> {
    order: NameOrder,
    source: Input<SI, S>,
    dest: Input<DI, D>,
    /// An input broke the order: nothing more is yielded.
    broken: bool,
}

impl<SI, S, DI, D> Join<SI, S, DI, D>
where
    SI: Iterator<Item = Result<S, Gap>>,
    DI: Iterator<Item = Result<D, Gap>>,
    S: Named,
    D: Named,
{
    pub fn new(source: SI, dest: DI, order: NameOrder) -> Self {
        Self {
            order,
            source: Input::new(source, Side::Source, order),
            dest: Input::new(dest, Side::Dest, order),
            broken: false,
        }
    }

    /// Whether each input has been read whole (meaningful once the merge
    /// has ended; an order error leaves both incomplete).
    pub fn completion(&self) -> Completion {
        Completion {
            source: !self.broken && self.source.complete(),
            dest: !self.broken && self.dest.complete(),
        }
    }

    pub fn tally(&self) -> Tally {
        Tally {
            source_entries: self.source.entries,
            dest_entries: self.dest.entries,
            source_gaps: self.source.gaps,
            dest_gaps: self.dest.gaps,
        }
    }

    fn step(&mut self) -> Result<Option<Joined<S, D>>, OrderError> {
        if let Some(gap) = self.source.fill()? {
            return Ok(Some(Joined::Gap(Side::Source, gap)));
        }
        if let Some(gap) = self.dest.fill()? {
            return Ok(Some(Joined::Gap(Side::Dest, gap)));
        }
        let order = match (&self.source.next, &self.dest.next) {
            (None, None) => return Ok(None),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(s), Some(d)) => self.order.compare(s.name(), d.name()),
        };
        let joined = match order {
            Ordering::Less => self.source.next.take().map(Joined::Source),
            Ordering::Greater => self.dest.next.take().map(Joined::Dest),
            Ordering::Equal => self
                .source
                .next
                .take()
                .zip(self.dest.next.take())
                .map(|(s, d)| Joined::Both(s, d)),
        };
        Ok(joined)
    }
}

impl<SI, S, DI, D> Iterator for Join<SI, S, DI, D>
where
    SI: Iterator<Item = Result<S, Gap>>,
    DI: Iterator<Item = Result<D, Gap>>,
    S: Named,
    D: Named,
{
    type Item = Result<Joined<S, D>, OrderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.broken {
            return None;
        }
        match self.step() {
            Ok(joined) => joined.map(Ok),
            Err(e) => {
                self.broken = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct N(&'static str);

    impl Named for N {
        fn name(&self) -> &str {
            self.0
        }
    }

    type Step = Joined<N, N>;

    fn entries(names: &[&'static str]) -> Vec<Result<N, Gap>> {
        names.iter().map(|n| Ok(N(n))).collect()
    }

    fn join(
        source: Vec<Result<N, Gap>>,
        dest: Vec<Result<N, Gap>>,
        order: NameOrder,
    ) -> (Vec<Result<Step, OrderError>>, Completion) {
        let mut j = Join::new(source.into_iter(), dest.into_iter(), order);
        let steps: Vec<_> = j.by_ref().collect();
        (steps, j.completion())
    }

    #[test]
    fn names_are_paired_across_the_slash_and_dot_edge() {
        let source = entries(&["a-b", "a.b", "a/b", "a0", "b"]);
        let dest = entries(&["a.b", "a/a", "a/b", "a0/c"]);
        let (steps, done) = join(source, dest, NameOrder::Utf8);
        let steps: Vec<Step> = steps.into_iter().map(|s| s.expect("in order")).collect();
        assert_eq!(
            steps,
            [
                Joined::Source(N("a-b")),
                Joined::Both(N("a.b"), N("a.b")),
                Joined::Dest(N("a/a")),
                Joined::Both(N("a/b"), N("a/b")),
                Joined::Source(N("a0")),
                Joined::Dest(N("a0/c")),
                Joined::Source(N("b")),
            ]
        );
        assert_eq!(
            done,
            Completion {
                source: true,
                dest: true
            }
        );
    }

    #[test]
    fn an_input_out_of_order_stops_the_merge_and_nothing_is_complete() {
        // A per-directory sort by plain name puts `a/x` before `a.b`.
        let source = entries(&["a/x", "a.b"]);
        let dest = entries(&["a.b", "a/x"]);
        let (steps, done) = join(source, dest, NameOrder::Utf8);
        let last = steps.last().expect("steps");
        let e = last.clone().expect_err("refused");
        assert_eq!((e.side, e.after.as_str()), (Side::Source, "a.b"));
        assert!(steps[..steps.len() - 1].iter().all(Result::is_ok));
        assert_eq!(done, Completion::default());
        // Before the break showed, `a.b` looked like the destination's own:
        // a merge finds disorder only when it reads it, which is why deletes
        // wait for the end and for `completion`.
        assert_eq!(steps[0], Ok(Joined::Dest(N("a.b"))));
    }

    #[test]
    fn a_listing_in_the_services_utf16_order_pairs_only_in_that_order() {
        let listed = entries(&["p/\u{1F600}", "p/\u{FF01}"]);
        let walked = entries(&["p/\u{1F600}", "p/\u{FF01}"]);
        let (steps, _) = join(walked.clone(), listed.clone(), NameOrder::Utf16);
        assert!(steps.iter().all(|s| matches!(s, Ok(Joined::Both(..)))));
        let (steps, done) = join(walked, listed, NameOrder::Utf8);
        assert!(steps.iter().any(Result::is_err));
        assert!(!done.dest && !done.source);
    }

    #[test]
    fn a_gap_is_passed_on_and_leaves_its_side_incomplete() {
        let mut source = entries(&["a", "c"]);
        source.insert(1, Err(Gap("b: permission denied".into())));
        let (steps, done) = join(source, entries(&["a", "b/x", "c"]), NameOrder::Utf8);
        assert!(steps.contains(&Ok(Joined::Gap(
            Side::Source,
            Gap("b: permission denied".into())
        ))));
        assert!(steps.contains(&Ok(Joined::Dest(N("b/x")))));
        assert_eq!(
            done,
            Completion {
                source: false,
                dest: true
            }
        );
    }

    #[test]
    fn the_tally_counts_what_each_side_yielded() {
        let mut j = Join::new(
            entries(&["a", "b"]).into_iter(),
            entries(&["b", "c", "d"]).into_iter(),
            NameOrder::Utf16,
        );
        assert_eq!(j.by_ref().count(), 4);
        let t = j.tally();
        assert_eq!((t.source_entries, t.dest_entries), (2, 3));
    }
}
