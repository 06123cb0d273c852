//! `--storage-cpu N`: Azurite on CPU N alone, everything else (this process,
//! the lab's emulator, relay, clients) on the other CPUs. Real storage runs on
//! its own machines; on a 2-core lab machine Azurite otherwise competes with
//! the relay and the client for the same cores, so whatever the relay path
//! spends is taken from storage's throughput. Applied to every row of a run
//! alike (many files and one file, relay and direct).

use anyhow::{Context, bail};

/// CPUs this process may run on now.
fn allowed_cpus() -> anyhow::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread (and so what it starts later) to `cpus`.
pub fn pin_to(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: as above; CPU_SET only writes inside the set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves this process off `storage_cpu` (call before any thread or child
/// starts) and returns the CPU set for Azurite.
pub fn split(storage_cpu: usize) -> anyhow::Result<Vec<usize>> {
    let all = allowed_cpus()?;
    if !all.contains(&storage_cpu) {
        bail!("--storage-cpu {storage_cpu}: not one of this process's CPUs {all:?}");
    }
    let rest: Vec<usize> = all.iter().copied().filter(|&c| c != storage_cpu).collect();
    if rest.is_empty() {
        bail!("--storage-cpu {storage_cpu}: no CPU would be left for the rest");
    }
    pin_to(&rest).context("sched_setaffinity")?;
    Ok(vec![storage_cpu])
}
