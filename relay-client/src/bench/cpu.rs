//! CPU seconds (user + system) of this process and of the children it has
//! waited for, from getrusage(2): what each run costs the machine it runs on.
//! The bench runs one thing at a time, so a difference taken around a run is
//! that run's (the relay and direct runs run inside this process, AzCopy as
//! a child that is waited for before the second reading).

/// CPU seconds this process has used so far, all its threads.
pub fn self_s() -> f64 {
    usage(libc::RUSAGE_SELF)
}

/// CPU seconds of the children this process has waited for.
pub fn children_s() -> f64 {
    usage(libc::RUSAGE_CHILDREN)
}

fn usage(who: libc::c_int) -> f64 {
    // SAFETY: rusage is plain data; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a pointer to a live rusage.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// CPU seconds per GiB moved, or None when nothing moved.
pub fn per_gib(cpu_s: f64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| cpu_s / (bytes as f64 / f64::from(1u32 << 30)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_process_and_a_waited_child() {
        let before = self_s();
        // Spin until this thread has used measurable CPU (no wall-clock bound).
        let mut x = 0u64;
        while self_s() - before < 0.02 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let kids = children_s();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])
            .status()
            .expect("sh runs");
        assert!(status.success());
        assert!(children_s() > kids, "a waited-for child's CPU is counted");
    }

    #[test]
    fn cpu_per_gib() {
        assert_eq!(per_gib(2.0, 1 << 30), Some(2.0));
        assert_eq!(per_gib(1.0, 256 << 20), Some(4.0));
        assert_eq!(per_gib(1.0, 0), None);
    }
}
