//! AzCopy beside the relay: the tool users would otherwise run, run on the
//! same data and link, verified alike. `command` says how it is run (pure),
//! `job` reads what it said (pure); this file finds it and runs one job:
//! timed to the end its log reports, its CPU counted, its output stripped of
//! the SAS. wanbench runs it through the same two modules.
//!
//! AzCopy reads its standard input for commands while it runs and, when that
//! input is at its end (`/dev/null`, a closed pipe), reads again at once
//! forever: a copy of a 1 KB file then costs a whole core for its 2 s
//! (0.93 s user + 0.89 s system, against 0.07 + 0.06 with an open pipe;
//! 10.32.2, `/usr/bin/time`). So each job gets a pipe that stays open and
//! silent until it exits, as a terminal would be.

pub mod command;
pub mod job;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

pub use command::{SasFrom, Tuning, Way};
pub use job::{JobSummary, LogFacts};

/// How often a running job's log is read for its end.
const LOG_POLL: Duration = Duration::from_millis(20);

/// `azcopy` on PATH, if any.
pub fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("azcopy"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `azcopy --version`'s version (e.g. `10.32.2`), or why it does not run.
pub async fn version(azcopy: &Path) -> Result<String, String> {
    let out = tokio::process::Command::new(azcopy)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{}: {e}", azcopy.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().strip_prefix("azcopy version ") {
        Some(v) if out.status.success() => Ok(v.trim().to_string()),
        _ => Err(format!(
            "{}: not AzCopy, or it does not run ({}): {}",
            azcopy.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// A job's log folder, read as it grows (`AZCOPY_LOG_LOCATION` = DIR/logs).
pub struct LogDir {
    dir: PathBuf,
    file: Option<std::fs::File>,
    watch: job::LogWatch,
}

impl LogDir {
    /// The log folder of a job whose scratch folder is `scratch`.
    pub fn new(scratch: &Path) -> Self {
        Self {
            dir: scratch.join("logs"),
            file: None,
            watch: job::LogWatch::default(),
        }
    }

    /// Reads what the job log gained; true once it logged the job's end.
    pub fn poll(&mut self) -> bool {
        use std::io::Read as _;
        if self.file.is_none() {
            self.file = job_log(&self.dir).and_then(|p| std::fs::File::open(p).ok());
        }
        if let Some(f) = self.file.as_mut() {
            let mut buf = [0u8; 16 << 10];
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                self.watch.feed(&buf[..n]);
            }
        }
        self.watch.facts().done
    }

    pub fn facts(&self) -> &LogFacts {
        self.watch.facts()
    }
}

/// The job's log (`JOBID.log`; AzCopy writes its scan to `JOBID-scanning.log`).
fn job_log(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(".log") && !name.ends_with("-scanning.log")
        })
}

/// One AzCopy job to run.
pub struct Job<'a> {
    pub azcopy: &'a Path,
    pub source: String,
    pub dest: String,
    pub way: Way,
    /// The source is a folder.
    pub recursive: bool,
    pub tuning: Tuning,
    /// Its log and plan folders; removed afterwards (its plan names the SAS's URL).
    pub scratch: PathBuf,
    /// The SAS in `source` or `dest`, removed from anything reported.
    pub sas: &'a str,
    /// Files the job must move.
    pub files: usize,
}

/// How a job went.
#[derive(Debug, Clone)]
pub struct Ran {
    /// Start to the job's end in its log (the process time when the log
    /// never said so).
    pub seconds: f64,
    /// Start to exit.
    pub process_seconds: f64,
    /// The process's CPU (user + system).
    pub cpu_s: f64,
    pub facts: LogFacts,
    /// Why it did not move every file, or None (SAS removed).
    pub error: Option<String>,
}

/// Runs `job` to its end (no time limit: the bench never interrupts a run).
pub async fn run(job: Job<'_>) -> Ran {
    let _ = std::fs::remove_dir_all(&job.scratch);
    let mut log = LogDir::new(&job.scratch);
    let argv = command::copy_argv(&job.source, &job.dest, job.way, job.recursive, job.tuning);
    let mut cmd = tokio::process::Command::new(job.azcopy);
    cmd.args(&argv)
        .envs(command::env(&job.scratch, job.tuning))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let cpu0 = crate::bench::cpu::children_s();
    let t0 = Instant::now();
    let (done_at, exited, out, err) = match cmd.spawn() {
        Ok(mut child) => {
            // Held open until it exits (see the module's note).
            let _stdin = child.stdin.take();
            let out = tokio::spawn(last_lines(child.stdout.take()));
            let err = tokio::spawn(last_lines(child.stderr.take()));
            let (done_at, exited) = wait_watching(&mut child, &mut log, t0).await;
            let out = out.await.unwrap_or_default();
            let err = err.await.unwrap_or_default();
            (done_at, exited, out, err)
        }
        Err(e) => (None, Err(e.to_string()), String::new(), String::new()),
    };
    let process_seconds = t0.elapsed().as_secs_f64();
    let cpu_s = crate::bench::cpu::children_s() - cpu0;
    let facts = log.facts().clone();
    let _ = std::fs::remove_dir_all(&job.scratch);
    let error = match (exited, job::summary(&out)) {
        (Err(e), _) => Some(e),
        (Ok(status), Ok(s)) => s
            .incomplete(job.files)
            .or_else(|| (!status.success()).then(|| format!("AzCopy {status}"))),
        (Ok(status), Err(e)) => Some(format!("{e} ({status}; {})", err.trim())),
    };
    Ran {
        seconds: done_at.map_or(process_seconds, |d| d.as_secs_f64()),
        process_seconds,
        cpu_s,
        facts,
        error: error.map(|e| job::redact(&e, job.sas)),
    }
}

/// Waits for the child, reading its log meanwhile; (when the log said the
/// job ended, the exit status).
async fn wait_watching(
    child: &mut tokio::process::Child,
    log: &mut LogDir,
    t0: Instant,
) -> (Option<Duration>, Result<std::process::ExitStatus, String>) {
    let mut done_at = None;
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            () = tokio::time::sleep(LOG_POLL) => {
                if done_at.is_none() && log.poll() {
                    done_at = Some(t0.elapsed());
                }
            }
        }
    };
    if done_at.is_none() && log.poll() {
        done_at = Some(t0.elapsed());
    }
    (done_at, status.map_err(|e| e.to_string()))
}

/// The lines of a job's output that say how it ended (its summary and
/// errors; not the progress line it prints every 2 s), in bounded memory.
async fn last_lines(pipe: Option<impl AsyncRead + Unpin>) -> String {
    const KEEP: usize = 16;
    let Some(pipe) = pipe else {
        return String::new();
    };
    let mut lines = BufReader::new(pipe).lines();
    let mut kept: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.contains("\"Progress\"") {
            continue;
        }
        if kept.len() == KEEP {
            kept.pop_front();
        }
        kept.push_back(line);
    }
    kept.into_iter().collect::<Vec<_>>().join("\n")
}
