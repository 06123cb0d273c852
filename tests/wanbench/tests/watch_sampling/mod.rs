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
    /// User + system CPU seconds so far: the watcher's, the relay's, Azurite's.
    pub cpu_s: f64,
    pub relay_cpu_s: f64,
    pub azurite_cpu_s: f64,
    pub load1: f64,
}

pub fn sample(pids: Pids, t0: Instant) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pids.watcher)).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let (hwm, cpu_s) = relay_tests::load::process_usage(pids.watcher);
    let relay_cpu_s = relay_tests::load::process_usage(pids.relay).1;
    let azurite_cpu_s = relay_tests::load::process_usage(pids.azurite).1;
    let load1 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    Some(Sample {
        t_s: t0.elapsed().as_secs_f64(),
        rss_kib,
        hwm_kib: hwm / 1024,
        cpu_s,
        relay_cpu_s,
        azurite_cpu_s,
        load1,
    })
}

/// CPU cores used between two samples: the watcher's, the relay's, Azurite's.
pub fn cores(a: &Sample, b: &Sample) -> f64 {
    (b.cpu_s - a.cpu_s) / (b.t_s - a.t_s).max(1e-3)
}

pub fn relay_cores(a: &Sample, b: &Sample) -> f64 {
    (b.relay_cpu_s - a.relay_cpu_s) / (b.t_s - a.t_s).max(1e-3)
}

pub fn azurite_cores(a: &Sample, b: &Sample) -> f64 {
    (b.azurite_cpu_s - a.azurite_cpu_s) / (b.t_s - a.t_s).max(1e-3)
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
            let cpu = out.last().map_or(0.0, |p| cores(p, &s));
            let relay = out.last().map_or(0.0, |p| relay_cores(p, &s));
            let azurite = out.last().map_or(0.0, |p| azurite_cores(p, &s));
            let committed = seen.lock().map_or(0, |s| s.committed);
            println!(
                "sample t={:.0}s rss={} KiB hwm={} KiB cpu={:.1}% relay={:.1}% azurite={:.1}% load1={:.2} committed={committed}",
                s.t_s,
                s.rss_kib,
                s.hwm_kib,
                cpu * 100.0,
                relay * 100.0,
                azurite * 100.0,
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
    pub watcher_cpu: f64,
    pub relay_cpu: f64,
    pub azurite_cpu: f64,
    pub rss_kib: u64,
}
