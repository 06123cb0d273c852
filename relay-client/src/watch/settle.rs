//! When a watched file is complete: a pure state machine (events and `now` in,
//! verdicts out) so every rule is tested with simulated time.
//!
//! A file is ready when it was closed after writing (or moved in whole, or
//! found by a scan, where no close event can come) and its size and
//! modification time stayed the same for the settle period. Events while it
//! is written reset the clock; a write after a close makes it wait for the
//! next close. The set of files waiting is bounded (`max`): beyond it, a file
//! is dropped and `overflowed` is set, and the driver runs a reconcile scan
//! once there is room, so nothing is lost and memory does not follow the
//! number of files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What size and modification time say of a file's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub size: u64,
    /// Nanoseconds since the Unix epoch (negative before it).
    pub mtime_ns: i64,
}

impl Stat {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            size: meta.len(),
            mtime_ns: meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
        }
    }
}

/// What was seen of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Created or written: it may still be open for writing.
    Changed,
    /// Closed after writing.
    Closed,
    /// Renamed into the folder: complete as it is.
    MovedIn,
    /// Found by a scan (start, reconcile, a directory moved in): no close
    /// event will come, so only its size and time decide.
    Found,
    /// Deleted or renamed away.
    Removed,
}

/// The settle check's answer for one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Upload it; it is no longer waiting.
    Ready(Stat),
    /// Not yet: checked again after another settle period.
    Wait,
    /// Gone (or never waiting): forgotten.
    Gone,
}

#[derive(Debug)]
struct Pending {
    /// The last stat taken, to compare with the next.
    stat: Option<Stat>,
    /// The last event or change: the settle period runs from here.
    since: Instant,
    /// First seen (for "oldest waiting").
    first: Instant,
    /// No write since the last close (or moved in, or found by a scan).
    closed: bool,
}

#[derive(Debug)]
pub struct Settle {
    settle: Duration,
    /// The watcher delivers close events (inotify): a file written and not
    /// yet closed waits for its close. Polling has none.
    close_events: bool,
    max: usize,
    pending: HashMap<PathBuf, Pending>,
    overflowed: bool,
}

impl Settle {
    pub fn new(settle: Duration, close_events: bool, max: usize) -> Self {
        Self {
            settle,
            close_events,
            max: max.max(1),
            pending: HashMap::new(),
            overflowed: false,
        }
    }

    /// Records an event; `stat` when the driver took one (not for every
    /// write, which would cost a system call per write).
    pub fn observe(&mut self, path: PathBuf, seen: Seen, stat: Option<Stat>, now: Instant) {
        if seen == Seen::Removed {
            self.pending.remove(&path);
            return;
        }
        if !self.pending.contains_key(&path) && self.pending.len() >= self.max {
            self.overflowed = true;
            return;
        }
        let p = self.pending.entry(path).or_insert(Pending {
            stat: None,
            since: now,
            first: now,
            closed: true,
        });
        p.since = now;
        if stat.is_some() {
            p.stat = stat;
        }
        match seen {
            Seen::Changed if self.close_events => p.closed = false,
            Seen::Changed | Seen::Found => {}
            Seen::Closed | Seen::MovedIn => p.closed = true,
            Seen::Removed => {}
        }
    }

    /// Up to `limit` paths whose settle period is over, to stat and `check`
    /// (the driver asks for as many as it can start: in a burst most files
    /// are due, and the walk stops after `limit` of them).
    pub fn due(&self, now: Instant, limit: usize) -> Vec<PathBuf> {
        self.pending
            .iter()
            .filter(|(_, p)| p.closed && now.saturating_duration_since(p.since) >= self.settle)
            .map(|(path, _)| path.clone())
            .take(limit)
            .collect()
    }

    /// The settle check of a due path with its stat now (`None`: gone).
    pub fn check(&mut self, path: &Path, stat: Option<Stat>, now: Instant) -> Verdict {
        let Some(p) = self.pending.get_mut(path) else {
            return Verdict::Gone;
        };
        let Some(stat) = stat else {
            self.pending.remove(path);
            return Verdict::Gone;
        };
        if !p.closed || now.saturating_duration_since(p.since) < self.settle {
            return Verdict::Wait;
        }
        if p.stat == Some(stat) {
            self.pending.remove(path);
            return Verdict::Ready(stat);
        }
        // Changed without an event we saw (or first look): another period.
        p.stat = Some(stat);
        p.since = now;
        Verdict::Wait
    }

    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    pub fn has_room(&self) -> bool {
        self.pending.len() < self.max
    }

    /// How long the oldest waiting file has waited.
    pub fn oldest(&self, now: Instant) -> Option<Duration> {
        self.pending
            .values()
            .map(|p| now.saturating_duration_since(p.first))
            .max()
    }

    /// Whether a file was dropped for want of room since the last call.
    pub fn take_overflow(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(5);

    fn st(size: u64, t: i64) -> Option<Stat> {
        Some(Stat { size, mtime_ns: t })
    }

    /// Runs the driver's loop once at `now`: checks every due path with `stat`.
    fn ready_at(m: &mut Settle, now: Instant, stat: Option<Stat>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for p in m.due(now, usize::MAX) {
            if let Verdict::Ready(_) = m.check(&p, stat, now) {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn closed_and_unchanged_for_the_period_is_ready() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        m.observe("a".into(), Seen::Changed, None, t0);
        m.observe("a".into(), Seen::Closed, st(10, 1), t0);
        assert!(ready_at(&mut m, t0 + S / 2, st(10, 1)).is_empty());
        assert_eq!(
            ready_at(&mut m, t0 + S, st(10, 1)),
            vec![PathBuf::from("a")]
        );
        assert_eq!(m.waiting(), 0);
    }

    #[test]
    fn an_open_file_written_slowly_waits_for_its_close() {
        // An instrument appending every 7 s (longer than the settle period)
        // for a minute, the file open throughout: never ready until closed.
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        for i in 0..9u64 {
            let now = t0 + Duration::from_secs(7 * i);
            m.observe("run.dat".into(), Seen::Changed, None, now);
            let later = now + Duration::from_secs(6);
            assert!(
                ready_at(&mut m, later, st(i, i as i64)).is_empty(),
                "round {i}"
            );
        }
        let closed = t0 + Duration::from_secs(63);
        m.observe("run.dat".into(), Seen::Closed, st(9, 9), closed);
        assert!(ready_at(&mut m, closed + S - Duration::from_millis(1), st(9, 9)).is_empty());
        assert_eq!(ready_at(&mut m, closed + S, st(9, 9)).len(), 1);
    }

    #[test]
    fn a_file_that_grows_without_events_waits_another_period() {
        // Polling (no close events): each look that finds it grown restarts the clock.
        let t0 = Instant::now();
        let mut m = Settle::new(S, false, 10);
        m.observe("g".into(), Seen::Changed, st(1, 1), t0);
        assert!(ready_at(&mut m, t0 + S, st(2, 2)).is_empty());
        assert!(ready_at(&mut m, t0 + 2 * S, st(3, 3)).is_empty());
        // Same size, newer time: still a change.
        assert!(ready_at(&mut m, t0 + 3 * S, st(3, 4)).is_empty());
        assert_eq!(ready_at(&mut m, t0 + 4 * S, st(3, 4)).len(), 1);
    }

    #[test]
    fn a_write_after_the_close_waits_for_the_next_close() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        m.observe("f".into(), Seen::Closed, st(5, 1), t0);
        m.observe("f".into(), Seen::Changed, None, t0 + S / 2);
        assert!(ready_at(&mut m, t0 + 10 * S, st(6, 2)).is_empty());
        m.observe("f".into(), Seen::Closed, st(6, 2), t0 + 10 * S);
        assert_eq!(ready_at(&mut m, t0 + 11 * S, st(6, 2)).len(), 1);
    }

    #[test]
    fn moved_in_is_whole_and_needs_no_close() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        m.observe("m".into(), Seen::MovedIn, st(7, 7), t0);
        assert_eq!(ready_at(&mut m, t0 + S, st(7, 7)).len(), 1);
    }

    #[test]
    fn found_by_a_scan_settles_on_size_and_time() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        m.observe("s".into(), Seen::Found, st(7, 7), t0);
        assert_eq!(ready_at(&mut m, t0 + S, st(7, 7)).len(), 1);
        // A scan that finds a file being written: events then hold it.
        m.observe("w".into(), Seen::Found, st(1, 1), t0);
        m.observe("w".into(), Seen::Changed, None, t0 + Duration::from_secs(1));
        assert!(ready_at(&mut m, t0 + 3 * S, st(2, 2)).is_empty());
    }

    #[test]
    fn removed_or_gone_is_forgotten() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        m.observe("r".into(), Seen::Closed, st(1, 1), t0);
        m.observe("r".into(), Seen::Removed, None, t0);
        assert_eq!(m.waiting(), 0);
        m.observe("x".into(), Seen::Closed, st(1, 1), t0);
        assert_eq!(m.check(Path::new("x"), None, t0 + S), Verdict::Gone);
        assert_eq!(m.waiting(), 0);
        assert_eq!(m.check(Path::new("never"), st(1, 1), t0), Verdict::Gone);
    }

    #[test]
    fn the_waiting_set_is_bounded_and_says_when_it_dropped_a_file() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 3);
        for i in 0..5 {
            m.observe(format!("f{i}").into(), Seen::Closed, st(1, 1), t0);
        }
        assert_eq!(m.waiting(), 3);
        assert!(!m.has_room());
        assert!(m.take_overflow());
        assert!(!m.take_overflow());
        // A file already waiting is still updated when the set is full.
        m.observe("f0".into(), Seen::Changed, None, t0);
        assert!(!m.take_overflow());
        assert_eq!(m.oldest(t0 + S), Some(S));
    }

    #[test]
    fn temp_files_are_the_drivers_business_but_a_rename_over_is_seen() {
        // `x.part` renamed to `x`: the driver ignores x.part; `x` arrives moved in.
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 10);
        m.observe("x".into(), Seen::MovedIn, st(100, 5), t0);
        assert_eq!(
            ready_at(&mut m, t0 + S, st(100, 5)),
            vec![PathBuf::from("x")]
        );
    }

    #[test]
    fn due_gives_at_most_what_the_driver_can_start() {
        let t0 = Instant::now();
        let mut m = Settle::new(S, true, 100);
        for i in 0..10 {
            m.observe(PathBuf::from(format!("f{i}")), Seen::Closed, st(1, 1), t0);
        }
        assert!(m.due(t0, 10).is_empty(), "not settled yet");
        assert_eq!(m.due(t0 + S, 3).len(), 3);
        assert_eq!(m.due(t0 + S, 0).len(), 0);
        assert_eq!(m.due(t0 + S, 50).len(), 10);
    }
}
