//! What a person or a tool sees while an upload runs: each file's result line the
//! moment it finishes; on a terminal, per-file bars under a total bar; without
//! one, a status line every `--status-interval` seconds (files done/total, bytes,
//! rate, ETA), as AzCopy prints; with `--json-lines`, one JSON event per line.
//!
//! Every byte count shown is the same quantity: a file's bar counts the bytes
//! of it that storage holds, as the relay reports them in `Progress` frames
//! (the resumed prefix included; direct mode: the blocks Azure accepted), never
//! bytes merely queued in QUIC; and the total is the sum of finished files
//! (their whole size, whatever became of them) and the bars of the files in
//! flight, so the total never disagrees with the bars under it. A file of one
//! block is staged by its commit: its bar stays at 0 until its result line.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use relay_proto::size::format_size;
use serde_json::json;

use crate::ui::file_list::{FileList, IN_MEMORY};
use crate::ui::live_list::LiveList;
use crate::ui::report::{FileReport, Status, Summary, Totals};
use crate::ui::weather::{Weather, WeatherSink, human};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    /// One summary at the end (`--json`): per-file reports are kept for it.
    Json,
    /// One event per line (`--json-lines`).
    JsonLines,
}

/// Files and bytes the walk found so far; `complete` once it has finished.
#[derive(Debug, Clone, Copy, Default)]
pub struct Found {
    pub files: u64,
    pub bytes: u64,
    pub complete: bool,
}

struct State {
    totals: Totals,
    kept: FileList<FileReport>,
    /// Sizes of finished files (uploaded, skipped or failed).
    done_bytes: u64,
    found: Found,
    active: LiveList<ProgressBar>,
}

pub struct Reporter {
    output: Output,
    bars: bool,
    multi: MultiProgress,
    total: ProgressBar,
    /// A file bar's style, parsed once: per file, parsing the template is a
    /// cost small files would notice.
    file_style: ProgressStyle,
    t0: Instant,
    state: Mutex<State>,
}

/// A snapshot for a status line.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub files_done: usize,
    pub found: Found,
    pub bytes_done: u64,
    /// The part of `bytes_done` that belongs to files still in flight.
    pub in_flight_bytes: u64,
    /// Files started and not finished (after a stop: the ones stopped).
    pub files_in_flight: usize,
    pub seconds: f64,
}

impl Progress {
    fn rate_bytes(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes_done as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn eta_seconds(&self) -> Option<u64> {
        let left = self.found.bytes.saturating_sub(self.bytes_done);
        let rate = self.rate_bytes();
        (self.found.complete && rate > 0.0).then(|| (left as f64 / rate).ceil() as u64)
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

impl Reporter {
    /// Bars only on a terminal (stderr), never with JSON output or `--quiet`.
    /// A `--json` summary keeps `file_list::IN_MEMORY` reports in memory and
    /// the rest in a temporary file.
    pub fn new(output: Output, quiet: bool) -> Self {
        Self::keeping(output, quiet, FileList::bounded(IN_MEMORY))
    }

    /// As `new`, keeping every report in memory: for a caller that holds
    /// its files in memory anyway and reads the reports back (`bench`).
    pub fn with_every_report(output: Output, quiet: bool) -> Self {
        Self::keeping(output, quiet, FileList::unbounded())
    }

    fn keeping(output: Output, quiet: bool, kept: FileList<FileReport>) -> Self {
        let bars = output == Output::Text && !quiet && std::io::stderr().is_terminal();
        let multi = MultiProgress::with_draw_target(if bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        let total = multi.add(ProgressBar::new(0));
        total.set_style(style(
            "total {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
        ));
        Self {
            output,
            bars,
            multi,
            total,
            file_style: style("{prefix:40!} {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec}"),
            t0: Instant::now(),
            state: Mutex::new(State {
                totals: Totals::default(),
                kept,
                done_bytes: 0,
                found: Found::default(),
                active: LiveList::default(),
            }),
        }
    }

    pub fn output(&self) -> Output {
        self.output
    }

    pub fn bars(&self) -> bool {
        self.bars
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while printing must not hide every later result.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_found(&self, found: Found) {
        self.state().found = found;
    }

    /// A bar for a file starting now. Drawn only on a terminal; without one it
    /// is a hidden bar that only counts the file's staged bytes (for status
    /// lines), never styled or added to the drawing.
    pub fn start(&self, blob: &str) -> ProgressBar {
        let bar = if self.bars {
            let bar = self.multi.insert_before(&self.total, ProgressBar::new(0));
            bar.set_style(self.file_style.clone());
            bar.set_prefix(blob.to_string());
            bar
        } else {
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden())
        };
        self.state().active.push(bar.clone(), |b| !b.is_finished());
        bar
    }

    /// A line for the person at the terminal (stderr, above the bars).
    pub fn notice(&self, line: &str) {
        self.multi.suspend(|| eprintln!("{line}"));
    }

    /// A file is done: its line now, then the tally.
    pub fn finish_file(&self, bar: Option<&ProgressBar>, report: FileReport, size: u64) {
        if let Some(bar) = bar {
            bar.finish_and_clear();
            if self.bars {
                self.multi.remove(bar);
            }
        }
        self.print_result(&report);
        let mut st = self.state();
        st.done_bytes += size;
        st.totals.add(&report);
        if self.output == Output::Json {
            st.kept.push(report);
        }
    }

    fn print_result(&self, f: &FileReport) {
        match self.output {
            // Failures still get their line on stderr, as before `--json` existed.
            Output::Json if f.status == Status::Failed => {
                self.multi.suspend(|| eprintln!("{}", text_line(f)));
            }
            Output::Json => {}
            Output::JsonLines => {
                let event = json!({"event": "file", "file": f});
                println!("{event}");
            }
            Output::Text => {
                let line = text_line(f);
                let to_stderr = f.status == Status::Failed;
                self.multi.suspend(|| {
                    if to_stderr {
                        eprintln!("{line}");
                    } else {
                        println!("{line}");
                    }
                });
            }
        }
    }

    pub fn progress(&self) -> Progress {
        let st = self.state();
        let active: Vec<&ProgressBar> = st.active.iter().filter(|b| !b.is_finished()).collect();
        let in_flight: u64 = active.iter().map(|b| b.position()).sum();
        Progress {
            files_in_flight: active.len(),
            files_done: st.totals.files,
            found: st.found,
            bytes_done: st.done_bytes + in_flight,
            in_flight_bytes: in_flight,
            seconds: self.t0.elapsed().as_secs_f64(),
        }
    }

    /// Redraws the total bar (terminal) or prints a status line (otherwise).
    pub fn tick(&self) {
        let p = self.progress();
        if self.bars {
            self.total.set_length(p.found.bytes);
            self.total.set_position(p.bytes_done);
            self.total
                .set_message(format!("{}/{} files", p.files_done, files_total(&p.found)));
            return;
        }
        match self.output {
            Output::Text => eprintln!("{}", status_line(&p)),
            Output::JsonLines => {
                let event = json!({
                    "event": "status",
                    "files_done": p.files_done,
                    "files_total": p.found.files,
                    "walk_complete": p.found.complete,
                    "bytes_done": p.bytes_done,
                    "bytes_total": p.found.bytes,
                    "seconds": p.seconds,
                    "eta_seconds": p.eta_seconds(),
                });
                println!("{event}");
            }
            Output::Json => {}
        }
    }

    /// How often `tick` should run: often on a terminal, else the status interval.
    pub fn tick_every(&self, status_interval: Duration) -> Option<Duration> {
        if self.bars {
            return Some(Duration::from_millis(200));
        }
        (!status_interval.is_zero() && self.output != Output::Json).then_some(status_interval)
    }

    /// The network's comings and goings (`crate::ui::weather::Weather`): a line on
    /// stderr whether or not it is a terminal (a person reading a log later
    /// wants to know why nothing moved), and a `network` event with
    /// `--json-lines`.
    /// Where a relay link tells of the weather: this reporter (`weather`).
    pub fn weather_sink(self: &std::sync::Arc<Self>) -> WeatherSink {
        let r = self.clone();
        std::sync::Arc::new(move |w| r.weather(w))
    }

    pub fn weather(&self, w: &Weather) {
        self.notice(&format!("relay-client: {}", weather_line(w)));
        if self.output == Output::JsonLines {
            let event = match w {
                Weather::Unreachable {
                    relay,
                    waited,
                    until,
                    patience,
                    error,
                } => json!({
                    "event": "network",
                    "state": "unreachable",
                    "relay": relay,
                    "waited_s": waited.as_secs(),
                    "until_unix": unix(*until),
                    "patience_s": patience.as_secs(),
                    "error": error,
                }),
                Weather::Reachable { relay, after } => json!({
                    "event": "network",
                    "state": "reachable",
                    "relay": relay,
                    "waited_s": after.as_secs(),
                }),
                Weather::GaveUp {
                    relay,
                    waited,
                    patience,
                } => json!({
                    "event": "network",
                    "state": "gave_up",
                    "relay": relay,
                    "waited_s": waited.as_secs(),
                    "patience_s": patience.as_secs(),
                }),
            };
            println!("{event}");
        }
    }

    /// Prints above the bars (or plainly) on stderr.
    pub fn note(&self, line: &str) {
        self.multi.suspend(|| eprintln!("{line}"));
    }

    /// Clears the bars; the totals so far and the kept reports.
    pub fn summary(&self, mode: &'static str) -> Summary {
        self.total.finish_and_clear();
        let mut st = self.state();
        for b in st.active.drain() {
            b.finish_and_clear();
        }
        let totals = st.totals.clone().finish(self.t0.elapsed().as_secs_f64());
        Summary::new(mode, std::mem::take(&mut st.kept), totals)
    }
}

/// A sync's summary: what moved, what was left alone unread, what is in
/// the way, and the deletes.
fn sync_line(y: &crate::ui::report::SyncReport, s: &Summary) -> String {
    let t = &s.totals;
    let moved = if y.direction == "download" {
        format!("{} fetched", y.fetched)
    } else {
        format!("{} sent", y.sent)
    };
    let mut line = format!(
        "sync ({}): {moved}, {} unchanged (not read), {} identical, {} adopted",
        y.direction, y.skipped_unchanged, y.identical, y.adopted
    );
    for (n, what) in [
        (y.conflicts, "conflicts"),
        (y.gaps, "gaps (nothing deleted)"),
        (t.failed as u64, "failed"),
        (t.planned as u64, "looked at (dry run: nothing written)"),
    ] {
        if n > 0 {
            line.push_str(&format!(", {n} {what}"));
        }
    }
    if y.planned_deletes > 0 || y.deleted > 0 {
        line.push_str(&format!(
            ", {} deletes planned, {} made",
            y.planned_deletes, y.deleted
        ));
    }
    line.push_str(&format!(
        "; {} read, {} in {:.1} s ({})",
        format_size(y.bytes_read),
        format_size(t.bytes),
        t.seconds,
        s.mode
    ));
    line
}

/// `relay 10.0.0.5:4433 unreachable for 40 s, still trying until 14:52:10; Ctrl-C stops, a rerun resumes`.
pub fn weather_line(w: &Weather) -> String {
    match w {
        Weather::Unreachable {
            relay,
            waited,
            until,
            patience,
            error,
        } => {
            let why = error
                .as_ref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            format!(
                "relay {relay} unreachable for {}{why}, still trying until {} (--patience {}); \
                 Ctrl-C stops, a rerun resumes",
                human(*waited),
                clock_time(*until),
                human(*patience)
            )
        }
        Weather::Reachable { relay, after } => {
            format!(
                "relay {relay} reachable again after {}; resuming",
                human(*after)
            )
        }
        Weather::GaveUp {
            relay,
            waited,
            patience,
        } => format!(
            "relay {relay} unreachable for {} (--patience {}); stopping",
            human(*waited),
            human(*patience)
        ),
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `14:52:10` in local time (UTC, marked so, if the local zone is unknown).
fn clock_time(t: SystemTime) -> String {
    let secs = unix(t) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own; it reads the
    // zone (TZ, /etc/localtime), which this program never changes.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = !unsafe { libc::localtime_r(&secs, &mut tm) }.is_null();
    if ok {
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    } else {
        let day = unix(t) % 86_400;
        format!(
            "{:02}:{:02}:{:02} UTC",
            day / 3600,
            (day % 3600) / 60,
            day % 60
        )
    }
}

fn files_total(found: &Found) -> String {
    if found.complete {
        found.files.to_string()
    } else {
        format!("{}+", found.files)
    }
}

/// `status: 12/40 files, 1.2 GiB/3.0 GiB, 95.3 Mbit/s, eta 2m10s`.
pub fn status_line(p: &Progress) -> String {
    let eta = match p.eta_seconds() {
        Some(s) => format!("{}m{:02}s", s / 60, s % 60),
        None => "?".into(),
    };
    format!(
        "status: {}/{} files, {}/{}, {:.1} Mbit/s, eta {eta}",
        p.files_done,
        files_total(&p.found),
        format_size(p.bytes_done),
        format_size(p.found.bytes),
        p.rate_bytes() * 8.0 / 1e6,
    )
}

/// One line per finished file, as `rg` prints errors: scripts can grep them.
pub fn text_line(f: &FileReport) -> String {
    let reason = f.reason.as_deref().unwrap_or_default();
    match f.status {
        Status::Committed => format!(
            "committed  {}/{}  {} bytes  sha256 {}  etag {}{}",
            f.container,
            f.blob,
            f.bytes,
            f.sha256.as_deref().unwrap_or(""),
            f.etag.as_deref().unwrap_or(""),
            if f.bytes_resumed > 0 {
                format!("  (resumed at {})", f.bytes_resumed)
            } else {
                String::new()
            }
        ),
        Status::Downloaded => format!(
            "downloaded {}/{} -> {}  {} bytes  sha256 {}  check {}{}",
            f.container,
            f.blob,
            f.path,
            f.bytes,
            f.sha256.as_deref().unwrap_or(""),
            f.check.unwrap_or(""),
            if f.bytes_resumed > 0 {
                format!("  (resumed at {})", f.bytes_resumed)
            } else {
                String::new()
            }
        ),
        Status::Skipped if f.blob.is_empty() => format!("skipped    {}  ({reason})", f.path),
        Status::Skipped => match f.compared {
            Some(how) => format!(
                "skipped    {}/{}  ({reason}, compared by {how})",
                f.container, f.blob
            ),
            None => format!("skipped    {}/{}  ({reason})", f.container, f.blob),
        },
        Status::Planned => format!("dry-run    {}/{}  {reason}", f.container, f.blob),
        Status::Deleted if f.blob.is_empty() => format!("deleted    {}", f.path),
        Status::Deleted => format!("deleted    {}/{}", f.container, f.blob),
        Status::Failed => {
            let why = f
                .error
                .as_ref()
                .map(|e| e.message.as_str())
                .unwrap_or("failed");
            format!("relay-client: {}: {why}", f.path)
        }
    }
}

/// The last line of a text run.
pub fn summary_line(s: &Summary) -> String {
    let t = &s.totals;
    if let Some(y) = &s.sync {
        return sync_line(y, s);
    }
    let (done, verb) = if s.download {
        (t.downloaded, "downloaded")
    } else {
        (t.committed, "committed")
    };
    let mut line = format!("{done} of {} files {verb} and verified", t.files);
    if t.skipped > 0 {
        line.push_str(&format!(", {} skipped", t.skipped));
    }
    if t.planned > 0 {
        line.push_str(&format!(
            ", {} looked at (dry run: nothing written)",
            t.planned
        ));
    }
    if t.failed > 0 {
        line.push_str(&format!(", {} failed", t.failed));
    }
    line.push_str(&format!(
        ", {} in {:.1} s ({:.1} Mbit/s, {})",
        format_size(t.bytes),
        t.seconds,
        t.mbit_per_s,
        s.mode
    ));
    line
}
