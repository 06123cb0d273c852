//! Runs one client process under a time cap and accounts for it.
//!
//! Why wait4 and not `Child::wait`: wait4 hands back the child's CPU time
//! (user + system, its threads and the children it waited for) when it is
//! reaped. Peak RSS comes from polling VmHWM instead: `ru_maxrss` also
//! counts the forked copy of this (large) process before exec.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

/// How a capped run ended and what it cost.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    /// Exit code; None when a signal ended it.
    pub exit_code: Option<i32>,
    /// Killed by us at the cap.
    pub capped: bool,
    /// Spawn to exit.
    pub wall: Duration,
    /// utime + stime.
    pub cpu_s: f64,
    /// VmHWM (KiB) at the last poll before exit: the program's own peak
    /// (exec gives it a fresh memory map).
    pub max_rss_kib: u64,
    /// Spawn to the first poll at which the caller's probe said done (AzCopy:
    /// its log says the job ended, before its process notices).
    pub done_at: Option<Duration>,
}

/// Spawn `cmd` and wait for it at most `cap`; past that, SIGKILL it (by pid).
///
/// The exit is stamped by a thread blocked in `waitid(WNOWAIT)` the moment it
/// happens: a loop that looked every 20 ms added 0-20 ms to every run's wall
/// time (its period), which at 12 s is up to 0.16 % of a cold upload's
/// goodput. WNOWAIT leaves the child unreaped, so its pid cannot be reused
/// while this thread still reads its /proc files; `wait4` then reaps it.
pub fn run_capped(cmd: Command, cap: Duration) -> anyhow::Result<Finished> {
    run_capped_probing(cmd, cap, &mut || false)
}

/// `run_capped`, asking `probe` at every poll (every 20 ms, and once more at
/// the exit) until it says done; `Finished::done_at` is when it first did. A
/// command given a piped stdin keeps it open, silent, until it exits.
pub fn run_capped_probing(
    mut cmd: Command,
    cap: Duration,
    probe: &mut dyn FnMut() -> bool,
) -> anyhow::Result<Finished> {
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
    let pid = child.id() as libc::pid_t;
    // Closed only when this function returns, after the child exited.
    let _stdin = child.stdin.take();
    // We reap it ourselves with wait4; dropping Child neither waits nor kills.
    drop(child);
    let (exited_tx, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited_tx.send(wait_exited(pid).map(|()| t0.elapsed()));
    });
    let mut capped = false;
    let mut hwm_kib = 0;
    let mut done_at = None;
    let wall = loop {
        // Monotonic while the program runs; the last reading is the one after exec.
        if let Ok(kib) = peak_rss_kib(pid as u32) {
            hwm_kib = kib;
        }
        if done_at.is_none() && probe() {
            done_at = Some(t0.elapsed());
        }
        match exited.recv_timeout(Duration::from_millis(20)) {
            Ok(wall) => break wall?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => anyhow::bail!("waiting for {pid}: {e}"),
        }
        if !capped && t0.elapsed() >= cap {
            // SAFETY: kill on our own unreaped child's pid (it cannot be reused yet).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            capped = true;
        }
    };
    if done_at.is_none() && probe() {
        done_at = Some(wall);
    }
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; wait4 only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our own exited child, not yet reaped; pointers are valid.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok(Finished {
                exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                capped,
                wall,
                cpu_s: timeval_s(ru.ru_utime) + timeval_s(ru.ru_stime),
                max_rss_kib: hwm_kib,
                done_at,
            });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4");
        }
    }
}

/// Blocks until `pid` (our child) has exited, leaving it unreaped.
fn wait_exited(pid: libc::pid_t) -> anyhow::Result<()> {
    loop {
        // SAFETY: siginfo is plain data; waitid only writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our own child; WNOWAIT leaves it to be reaped later.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("waitid");
        }
    }
}

fn timeval_s(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// CPU seconds (utime + stime) a running process has used so far.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    // The command name may contain spaces; fields resume after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, utime field 14, stime field 15.
    let tick = |i: usize| -> anyhow::Result<f64> {
        let v = fields.get(i).context("short /proc stat")?;
        Ok(v.parse::<u64>().context("bad /proc stat field")? as f64)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((tick(11)? + tick(12)?) / hz)
}

/// Peak resident set (VmHWM) of a running process, in KiB.
pub fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc status")
}

/// Reset VmHWM to the current RSS, so the next reading is this run's peak.
pub fn reset_peak_rss(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .with_context(|| format!("reset peak RSS of {pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_a_short_child_and_caps_a_long_one() {
        let mut c = Command::new("sh");
        c.args(["-c", "exit 3"]);
        // The cap is a bound against hangs here.
        let f = run_capped(c, Duration::from_secs(120)).expect("runs");
        assert_eq!(f.exit_code, Some(3));
        assert!(!f.capped);

        let mut c = Command::new("sleep");
        c.arg("30");
        let f = run_capped(c, Duration::from_millis(200)).expect("runs");
        assert!(f.capped);
        assert_eq!(f.exit_code, None);
        // Killed, not waited for: `sleep 30` cannot have ended on its own sooner.
        assert!(f.wall < Duration::from_secs(30), "{:?}", f.wall);
    }

    #[test]
    fn the_probe_times_its_done_and_a_piped_stdin_stays_open() {
        let dir = std::env::temp_dir().join(format!("wanbench-probe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let flag = dir.join("done");
        // bash's `read -t 1` fails at once at EOF (status 1) and after the
        // timeout on an open, silent stdin (status > 128).
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(format!(
                "touch {}; read -t 1 line; rc=$?; [ $rc -gt 128 ] || exit 7",
                flag.display()
            ))
            .stdin(std::process::Stdio::piped());
        let mut asked = 0;
        let f = run_capped_probing(c, Duration::from_secs(120), &mut || {
            asked += 1;
            flag.exists()
        })
        .expect("runs");
        assert_eq!(f.exit_code, Some(0), "stdin was not open and silent: {f:?}");
        assert!(asked > 0);
        let done = f.done_at.expect("the probe saw the file");
        assert!(done <= f.wall, "{f:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn peak_rss_is_the_programs_own() {
        // This process holds 256 MiB; the child's reading must not include it.
        let _ballast = vec![1u8; 256 << 20];
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 0.3"]);
        let f = run_capped(c, Duration::from_secs(120)).expect("runs");
        assert!(
            f.max_rss_kib > 0 && f.max_rss_kib < 64 << 10,
            "{}",
            f.max_rss_kib
        );
    }

    #[test]
    fn reads_own_proc_counters() {
        let me = std::process::id();
        assert!(cpu_seconds(me).expect("stat") >= 0.0);
        assert!(peak_rss_kib(me).expect("status") > 0);
    }
}
