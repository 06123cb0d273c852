//! Sampling the processes of the watch bench from /proc: the watcher's RSS
//! and CPU, and the relay's and Azurite's CPU beside it, every few seconds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Seen;

/// The processes sampled: the watcher, and the relay and Azurite beside it
/// (their CPU only), so the run shows which side a slow spell was on.
#[derive(Clone, Copy)]
pub struct Pids {
    pub watcher: u32,
    pub relay: u32,
    pub azurite: u32,
}

/// One look at the watcher (and the relay's and Azurite's CPU) from /proc.
#[derive(Clone, Copy, serde::Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    /// User + system CPU seconds so far.
    pub cpu_s: Cpu,
    pub load1: f64,
}

pub fn sample(pids: Pids, t0: Instant) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pids.watcher)).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let (hwm, watcher) = relay_tests::load::process_usage(pids.watcher);
    let cpu_s = Cpu {
        watcher,
        relay: relay_tests::load::process_usage(pids.relay).1,
        azurite: relay_tests::load::process_usage(pids.azurite).1,
    };
    let load1 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    Some(Sample {
        t_s: t0.elapsed().as_secs_f64(),
        rss_kib,
        hwm_kib: hwm / 1024,
        cpu_s,
        load1,
    })
}

/// CPU of each process sampled: seconds so far in a `Sample`, cores
/// between two samples from `cores`.
#[derive(Clone, Copy, Default, serde::Serialize)]
pub struct Cpu {
    pub watcher: f64,
    pub relay: f64,
    pub azurite: f64,
}

/// CPU cores each process used between two samples.
pub fn cores(a: &Sample, b: &Sample) -> Cpu {
    let dt = (b.t_s - a.t_s).max(1e-3);
    Cpu {
        watcher: (b.cpu_s.watcher - a.cpu_s.watcher) / dt,
        relay: (b.cpu_s.relay - a.cpu_s.relay) / dt,
        azurite: (b.cpu_s.azurite - a.cpu_s.azurite) / dt,
    }
}

/// Samples the watcher every `every` until `stop`, printing each sample.
pub fn sampler(
    pids: Pids,
    t0: Instant,
    every: Duration,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut out: Vec<Sample> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let Some(s) = sample(pids, t0) else { break };
            let c = out.last().map_or(Cpu::default(), |p| cores(p, &s));
            let committed = seen.lock().map_or(0, |s| s.committed);
            println!(
                "sample t={:.0}s rss={} KiB hwm={} KiB cpu={:.1}% relay={:.1}% azurite={:.1}% load1={:.2} committed={committed}",
                s.t_s,
                s.rss_kib,
                s.hwm_kib,
                c.watcher * 100.0,
                c.relay * 100.0,
                c.azurite * 100.0,
                s.load1
            );
            out.push(s);
            let next = Instant::now() + every;
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        out
    })
}

/// The quiet minute at the end: CPU of each process, the watcher's RSS.
pub struct Idle {
    pub cpu: Cpu,
    pub rss_kib: u64,
}
