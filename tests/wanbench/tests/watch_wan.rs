//! The watch bench in the WAN lab: `relay-client watch` in the site namespace
//! uploads through a relay in the cloud namespace (Azurite beside it) over
//! 200 ms / 1 % / 200 Mbit/s while this test writes real files into the
//! watched folder: 50 small files a second and one 1 GiB file every few
//! minutes, for ten minutes. It measures each file's latency from its close
//! (taken here, right after the writer's last write and close) to its commit
//! event (the watcher's `--json-lines` line, timestamped here as it is read
//! from a pipe: one clock, this process's), the watcher's RSS and CPU over the
//! run and in a quiet minute at the end, and checks every blob by download.
//!
//! A bench, not a test: ignored, run by hand (docs/bench/watch/README.md).
//! It prints numbers and asserts only correctness: every file written was
//! committed once, after its close, and every blob hashes to its file.
//! Durations and rates come from the environment (`knobs`) so a short run
//! can be tried first. Needs root and /dev/net/tun; prints SKIPPED otherwise.
//!
//! `cargo test --release -p wanbench --test watch_wan -- --ignored --nocapture`

use wanbench::cloud;
#[allow(dead_code)]
mod wan_cloud;
mod watch_check;
mod watch_sampling;

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use linklab::{Lab, LinkProfile};
use relay_tests::files::{Scratch, write_random};
use serde_json::{Value, json};
use wan_cloud::{Cloud, LABS, MIB, Proc, client_command, spawn_site};
use watch_sampling::{Cpu, Idle, Pids, Sample, cores, sample, sampler};

const CONTAINER: &str = "watch-wan";

/// What a run does; every field from an environment variable.
#[derive(Debug, Clone, serde::Serialize)]
struct Knobs {
    /// `WATCH_WAN_SECONDS`: how long files are written.
    seconds: f64,
    /// `WATCH_WAN_SMALL_PER_S`: small files a second.
    small_per_s: f64,
    /// `WATCH_WAN_SMALL_KIB=MIN-MAX`: small sizes, uniform in the range.
    small_kib: (u64, u64),
    /// `WATCH_WAN_BIG_MIB`: the size of each big file.
    big_mib: u64,
    /// `WATCH_WAN_BIG_FIRST_S`, `WATCH_WAN_BIG_EVERY_S`: when big files start.
    big_first_s: f64,
    big_every_s: f64,
    /// `WATCH_WAN_SETTLE`: the watcher's `--settle`.
    settle_s: f64,
    /// `WATCH_WAN_QUIET_S`: the idle minute at the end (nothing written).
    quiet_s: f64,
    /// `WATCH_WAN_SAMPLE_S`: RSS and CPU sampled this often.
    sample_s: f64,
    /// `WATCH_WAN_DRAIN_S`: the bound on waiting for the last commits.
    drain_s: f64,
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn knobs() -> Knobs {
    let small_kib = std::env::var("WATCH_WAN_SMALL_KIB")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once('-')?;
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .unwrap_or((4, 256));
    Knobs {
        seconds: env_f64("WATCH_WAN_SECONDS", 600.0),
        small_per_s: env_f64("WATCH_WAN_SMALL_PER_S", 50.0),
        small_kib,
        big_mib: env_f64("WATCH_WAN_BIG_MIB", 1024.0) as u64,
        big_first_s: env_f64("WATCH_WAN_BIG_FIRST_S", 30.0),
        big_every_s: env_f64("WATCH_WAN_BIG_EVERY_S", 180.0),
        settle_s: env_f64("WATCH_WAN_SETTLE", 5.0),
        quiet_s: env_f64("WATCH_WAN_QUIET_S", 60.0),
        sample_s: env_f64("WATCH_WAN_SAMPLE_S", 5.0),
        drain_s: env_f64("WATCH_WAN_DRAIN_S", 900.0),
    }
}

/// A file the test wrote and closed.
struct Written {
    path: PathBuf,
    sha256: String,
    size: u64,
    closed: Instant,
    big: bool,
}

/// A `file` event of the watcher, as read.
#[derive(Clone)]
struct Event {
    at: Instant,
    status: String,
    blob: String,
    /// The SHA-256 the relay verified before its commit (the Receipt's).
    sha256: String,
    /// The client's phases (`clocks_ms`): waiting for a slot or connection,
    /// then Offer to last byte, then last byte to Receipt.
    wait_ms: u64,
    transfer_ms: u64,
    commit_ms: u64,
}

/// What the watcher printed, by path, plus its other events.
#[derive(Default)]
struct Seen {
    files: HashMap<String, Vec<Event>>,
    /// Committed blobs and their Receipts' SHA-256, in the order read.
    commits: Vec<(String, String)>,
    committed: usize,
    failed: usize,
    network: Vec<Value>,
    last_status: Option<Value>,
}

/// Reads the watcher's stdout on a thread of its own, stamping each line as
/// it arrives (Rust's stdout is line-buffered: a line is written whole at its
/// newline, so the stamp trails the watcher's print by a pipe read).
fn read_events(
    out: std::process::ChildStdout,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let at = Instant::now();
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
            match v["event"].as_str() {
                Some("file") => {
                    let f = &v["file"];
                    let ms = |k: &str| f["clocks_ms"][k].as_u64().unwrap_or(0);
                    let e = Event {
                        at,
                        status: f["status"].as_str().unwrap_or("").to_string(),
                        blob: f["blob"].as_str().unwrap_or("").to_string(),
                        sha256: f["sha256"].as_str().unwrap_or("").to_string(),
                        wait_ms: ms("wait_ms"),
                        transfer_ms: ms("transfer_ms"),
                        commit_ms: ms("commit_ms"),
                    };
                    match e.status.as_str() {
                        "committed" => {
                            s.committed += 1;
                            s.commits.push((e.blob.clone(), e.sha256.clone()));
                        }
                        "failed" => s.failed += 1,
                        _ => {}
                    }
                    let path = f["path"].as_str().unwrap_or("").to_string();
                    s.files.entry(path).or_default().push(e);
                }
                Some("watch_status") => s.last_status = Some(v),
                Some("network") => s.network.push(v),
                _ => {}
            }
        }
    })
}

/// A small file's size: uniform in the range, the same for the same index in
/// every run (splitmix64).
fn small_size(i: u64, (lo, hi): (u64, u64)) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let (lo, hi) = (lo * 1024, hi.max(lo) * 1024);
    lo + z % (hi - lo + 1)
}

/// Writes `file` whole and closes it; its close time is taken after the close.
fn write_closed(path: &Path, size: u64, seed: u64, big: bool) -> Written {
    // write_random returns after its file handle is dropped (closed).
    let sha256 = write_random(path, size, seed);
    Written {
        path: path.to_path_buf(),
        sha256,
        size,
        closed: Instant::now(),
        big,
    }
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn stats(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    json!({
        "n": v.len(),
        "p50": pct(&v, 0.50),
        "p90": pct(&v, 0.90),
        "p99": pct(&v, 0.99),
        "max": v.last().copied().unwrap_or(f64::NAN),
    })
}

/// One file's outcome: close to commit, and its parts.
struct Row<'a> {
    w: &'a Written,
    e: &'a Event,
    latency_s: f64,
    /// The file's own transfer: Offer to Receipt.
    own_s: f64,
    /// The bound: settle + 2 s + own transfer.
    bound_s: f64,
}

impl<'a> Row<'a> {
    fn of(w: &'a Written, e: &'a Event, settle_s: f64) -> Self {
        let own_s = (e.transfer_ms + e.commit_ms) as f64 / 1000.0;
        Row {
            w,
            e,
            latency_s: e.at.saturating_duration_since(w.closed).as_secs_f64(),
            own_s,
            bound_s: settle_s + 2.0 + own_s,
        }
    }
}

#[test]
#[ignore = "bench: over ten minutes of wall time (docs/bench/watch/)"]
fn watch_latency_over_the_wan() {
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let test = "watchwan";
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED {test}: {e:#}");
        return;
    }
    let k = knobs();
    println!("knobs {}", json!(k));
    let lab = Arc::new(
        Lab::start(LinkProfile::new(200.0, 0.01, 200.0)).unwrap_or_else(|e| panic!("lab: {e:#}")),
    );
    let dir = Scratch::new(test);
    let cloud = Cloud::start(&lab, &dir.0, CONTAINER);
    // Canonical, as the watcher reports paths (events are matched by path).
    let watched = std::fs::canonicalize(&dir.0)
        .unwrap_or_else(|e| panic!("{e}"))
        .join("in");
    // Both folders exist before the watch starts, so every file arrives by
    // its own events (create, write, close), not by a new folder's scan.
    for d in ["small", "big"] {
        std::fs::create_dir_all(watched.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut args = cloud.client_args(&lab, &[&watched]);
    args[0] = "watch".into();
    args.extend(
        [
            "--settle",
            &k.settle_s.to_string(),
            "--json-lines",
            "--status-interval",
            "10",
            "--journal",
            &dir.path("journal.sqlite").display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    println!("watcher: relay-client {}", args.join(" "));
    let out = dir.path("watch");
    let mut cmd = client_command(&args, &out);
    cmd.stdout(Stdio::piped());
    let mut watcher: Proc = spawn_site(&lab, cmd);
    let pid = watcher.0.id();
    let pids = Pids {
        watcher: pid,
        relay: cloud
            .relay_pid()
            .unwrap_or_else(|| panic!("the relay is not running")),
        azurite: cloud.azurite_pid(),
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stdout = watcher.0.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let reader = read_events(stdout, seen.clone());
    let err_file = out.with_extension("err");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&err_file)
        .unwrap_or_default()
        .contains("relay-client: watching")
    {
        if let Ok(Some(s)) = watcher.0.try_wait() {
            panic!(
                "watch ended at start ({s}): {}",
                std::fs::read_to_string(&err_file).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "the watch did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let samples = sampler(
        pids,
        t0,
        Duration::from_secs_f64(k.sample_s.max(0.5)),
        stop.clone(),
        seen.clone(),
    );
    // Blobs checked and deleted as the run goes (`watch_check`), unless kept.
    let keep_blobs = std::env::var_os("WATCH_WAN_KEEP_BLOBS").is_some();
    let check_stop = Arc::new(AtomicBool::new(false));
    let checks = (!keep_blobs).then(|| {
        watch_check::checker(
            lab.clone(),
            CONTAINER,
            seen.clone(),
            check_stop.clone(),
            Duration::from_secs(5),
        )
    });

    // Big files on a thread of their own, at their times, at disk speed.
    let big = {
        let (kb, root) = (k.clone(), watched.join("big"));
        std::thread::spawn(move || {
            let mut done = Vec::new();
            let mut at = kb.big_first_s;
            let mut n = 0u64;
            while at < kb.seconds {
                let when = t0 + Duration::from_secs_f64(at);
                std::thread::sleep(when.saturating_duration_since(Instant::now()));
                let started = Instant::now();
                let w = write_closed(
                    &root.join(format!("b{n}.bin")),
                    kb.big_mib * MIB,
                    9000 + n,
                    true,
                );
                println!(
                    "big b{n}.bin: {} MiB written and closed at t={:.1}s in {:.1}s",
                    kb.big_mib,
                    (w.closed - t0).as_secs_f64(),
                    (w.closed - started).as_secs_f64()
                );
                done.push(w);
                n += 1;
                at += kb.big_every_s.max(1.0);
            }
            done
        })
    };
    // Small files here, on schedule; how far behind it the writer fell is
    // reported (a late writer lowers the rate, it does not change latencies).
    let mut written: Vec<Written> = Vec::new();
    let mut behind_max = Duration::ZERO;
    let interval = 1.0 / k.small_per_s.max(0.001);
    for i in 0u64.. {
        let due = i as f64 * interval;
        if due >= k.seconds {
            break;
        }
        let when = t0 + Duration::from_secs_f64(due);
        let now = Instant::now();
        if when > now {
            std::thread::sleep(when - now);
        } else {
            behind_max = behind_max.max(now - when);
        }
        let size = small_size(i, k.small_kib);
        let path = watched.join("small").join(format!("s{i:06}.bin"));
        written.push(write_closed(&path, size, i, false));
        if let Ok(Some(s)) = watcher.0.try_wait() {
            panic!("the watch ended while files were written ({s})");
        }
    }
    let writing_s = t0.elapsed().as_secs_f64();
    let bigs = big.join().unwrap_or_else(|_| panic!("big writer panicked"));
    written.extend(bigs);
    println!(
        "written: {} files ({} big) in {writing_s:.1}s; small writer at most {:.3}s behind schedule",
        written.len(),
        written.iter().filter(|w| w.big).count(),
        behind_max.as_secs_f64()
    );

    // Every file's commit (or failure), bounded.
    let drain_deadline = Instant::now() + Duration::from_secs_f64(k.drain_s);
    loop {
        let (answered, failed) = {
            let s = seen.lock().unwrap_or_else(|p| p.into_inner());
            let answered = written
                .iter()
                .filter(|w| s.files.contains_key(&w.path.display().to_string()))
                .count();
            (answered, s.failed)
        };
        if answered == written.len() {
            break;
        }
        if let Ok(Some(st)) = watcher.0.try_wait() {
            panic!(
                "the watch ended ({st}) with {answered} of {} files answered",
                written.len()
            );
        }
        if Instant::now() >= drain_deadline {
            // Storage that stalled must not lose the run's numbers: the
            // latencies of the files answered so far, by window, first.
            let s = seen.lock().unwrap_or_else(|p| p.into_inner());
            let rows: Vec<Row<'_>> = written
                .iter()
                .filter_map(|w| {
                    let e = s.files.get(&w.path.display().to_string())?.first()?;
                    Some(Row::of(w, e, k.settle_s))
                })
                .collect();
            print_windows(&rows, t0, 30.0);
            panic!(
                "{answered} of {} files answered ({failed} failed) {} s after writing ended",
                written.len(),
                k.drain_s
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let drained_s = t0.elapsed().as_secs_f64();
    println!("all answered at t={drained_s:.1}s");
    // The last checks before the quiet minute, so it is quiet for Azurite too.
    check_stop.store(true, Ordering::Relaxed);
    let checked = checks.map(|h| h.join().unwrap_or_else(|_| panic!("checker panicked")));

    // The quiet minute: nothing written, the watcher idle.
    let q0 = sample(pids, t0).unwrap_or_else(|| panic!("watcher gone"));
    std::thread::sleep(Duration::from_secs_f64(k.quiet_s));
    let q1 = sample(pids, t0).unwrap_or_else(|| panic!("watcher gone"));
    let idle = Idle {
        cpu: cores(&q0, &q1),
        rss_kib: q1.rss_kib,
    };
    stop.store(true, Ordering::Relaxed);
    let samples = samples
        .join()
        .unwrap_or_else(|_| panic!("sampler panicked"));

    // A clean stop (SIGTERM), then the reader sees the pipe's end.
    // SAFETY: signalling our own child, not yet reaped.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let stop_deadline = Instant::now() + Duration::from_secs(90);
    let exit = loop {
        if let Ok(Some(s)) = watcher.0.try_wait() {
            break s.code();
        }
        assert!(
            Instant::now() < stop_deadline,
            "the watch did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = reader.join();
    let stderr = std::fs::read_to_string(&err_file).unwrap_or_default();
    assert_eq!(exit, Some(0), "{stderr}");

    // Correctness: each file committed exactly once, after its close, and
    // its blob is its bytes.
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    let mut rows = Vec::new();
    let mut blobs = Vec::new();
    for w in &written {
        let evs = &seen.files[&w.path.display().to_string()];
        let statuses: Vec<&str> = evs.iter().map(|e| e.status.as_str()).collect();
        assert_eq!(
            statuses,
            ["committed"],
            "{}: {statuses:?}",
            w.path.display()
        );
        let e = &evs[0];
        assert!(
            e.at >= w.closed,
            "{} committed before its close",
            w.path.display()
        );
        rows.push(Row::of(w, e, k.settle_s));
        blobs.push((e.blob.clone(), w.sha256.clone()));
    }
    // The numbers first: a failed check below must not lose the run's.
    print_windows(&rows, t0, 30.0);
    let report = report(&k, &rows, &samples, &idle, writing_s, drained_s, &seen);
    println!("report {report}");
    assert_eq!(seen.failed, 0, "failed files: {stderr}");
    let receipts: Vec<&str> = rows
        .iter()
        .filter(|r| r.e.sha256 != r.w.sha256)
        .map(|r| r.e.blob.as_str())
        .collect();
    assert!(
        receipts.is_empty(),
        "Receipt SHA-256 is not the file's: {receipts:?}"
    );
    let verify_t = Instant::now();
    match checked {
        Some(c) => {
            assert!(
                c.differs.is_empty(),
                "downloaded SHA-256 is not the Receipt's: {:?}",
                c.differs
            );
            wan_cloud::verify_with_second_look(&lab, CONTAINER, &c.unread);
            assert_eq!(c.same + c.unread.len(), blobs.len(), "blobs checked");
            println!(
                "verified: {} blobs by download during the run (then deleted), {} at the end",
                c.same,
                c.unread.len()
            );
        }
        None => wan_cloud::verify_with_second_look(&lab, CONTAINER, &blobs),
    }
    let verify_s = verify_t.elapsed().as_secs_f64();
    println!(
        "verified: {} blobs by download, the end's checks in {verify_s:.1}s",
        blobs.len()
    );
    let _ = &cloud;
}

/// Small files' latency by when they were closed, in windows of `secs`:
/// how the big uploads show over time.
fn print_windows(rows: &[Row<'_>], t0: Instant, secs: f64) {
    let mut by: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for r in rows.iter().filter(|r| !r.w.big) {
        let w = ((r.w.closed - t0).as_secs_f64() / secs) as u64;
        by.entry(w).or_default().push(r.latency_s);
    }
    for (w, mut v) in by {
        v.sort_by(f64::total_cmp);
        println!(
            "window closed {:>4.0}-{:<4.0}s: {:>5} small, latency p50 {:>5.2}s p99 {:>5.2}s max {:>5.2}s",
            w as f64 * secs,
            (w + 1) as f64 * secs,
            v.len(),
            pct(&v, 0.5),
            pct(&v, 0.99),
            v.last().copied().unwrap_or(f64::NAN)
        );
    }
}

/// The numbers: latencies of small files (all, beside a big upload, alone),
/// each big file, the bound's misses and their parts, RSS and CPU.
#[allow(clippy::too_many_arguments)]
fn report(
    k: &Knobs,
    rows: &[Row<'_>],
    samples: &[Sample],
    idle: &Idle,
    writing_s: f64,
    drained_s: f64,
    seen: &Seen,
) -> Value {
    // A big file's upload: from its Offer (commit event less its own time)
    // to its commit event.
    let big_spans: Vec<(Instant, Instant)> = rows
        .iter()
        .filter(|r| r.w.big)
        .map(|r| (r.e.at - Duration::from_secs_f64(r.own_s), r.e.at))
        .collect();
    let beside = |r: &Row<'_>| {
        big_spans
            .iter()
            .any(|(a, b)| r.w.closed < *b && r.e.at > *a)
    };
    let small: Vec<&Row<'_>> = rows.iter().filter(|r| !r.w.big).collect();
    let lat = |rs: &[&Row<'_>]| stats(rs.iter().map(|r| r.latency_s).collect());
    let (near, alone): (Vec<&Row<'_>>, Vec<&Row<'_>>) = small.iter().partition(|r| beside(r));
    let misses: Vec<&&Row<'_>> = small.iter().filter(|r| r.latency_s > r.bound_s).collect();
    let miss_beside = misses.iter().filter(|r| beside(r)).count();
    // Where a small file's time went: before its upload began (settle, the
    // check tick, the event path), waiting for a slot or connection, and its
    // own transfer.
    let before = stats(
        small
            .iter()
            .map(|r| r.latency_s - r.own_s - r.e.wait_ms as f64 / 1000.0)
            .collect(),
    );
    let bigs: Vec<Value> = rows
        .iter()
        .filter(|r| r.w.big)
        .map(|r| {
            json!({
                "file": r.w.path.file_name().map(|n| n.to_string_lossy().to_string()),
                "size": r.w.size,
                "latency_s": r.latency_s,
                "wait_s": r.e.wait_ms as f64 / 1000.0,
                "own_transfer_s": r.own_s,
                "mbit_s": r.w.size as f64 * 8.0 / 1e6 / r.own_s.max(1e-3),
                "bound_s": r.bound_s,
                "within": r.latency_s <= r.bound_s,
            })
        })
        .collect();
    let first = samples.first().copied();
    let end_writing = samples.iter().rfind(|s| s.t_s <= writing_s).copied();
    let last = samples.last().copied();
    let over_run = match (first, samples.iter().rfind(|s| s.t_s <= drained_s)) {
        (Some(a), Some(b)) if b.t_s > a.t_s => cores(&a, b),
        _ => Cpu {
            watcher: f64::NAN,
            relay: f64::NAN,
            azurite: f64::NAN,
        },
    };
    let loads: Vec<f64> = samples.iter().map(|s| s.load1).collect();
    json!({
        "knobs": k,
        "small_latency_s": lat(&small),
        "small_latency_beside_big_s": lat(&near),
        "small_latency_alone_s": lat(&alone),
        "small_before_upload_s": before,
        "small_wait_s": stats(small.iter().map(|r| r.e.wait_ms as f64 / 1000.0).collect()),
        "small_own_transfer_s": stats(small.iter().map(|r| r.own_s).collect()),
        // Offer to last byte sent, then last byte to Receipt (the relay's
        // staging and commit), beside a big upload: which side held them.
        "small_beside_big_send_s": stats(near.iter().map(|r| r.e.transfer_ms as f64 / 1000.0).collect()),
        "small_beside_big_commit_s": stats(near.iter().map(|r| r.e.commit_ms as f64 / 1000.0).collect()),
        "small_alone_send_s": stats(alone.iter().map(|r| r.e.transfer_ms as f64 / 1000.0).collect()),
        "small_alone_commit_s": stats(alone.iter().map(|r| r.e.commit_ms as f64 / 1000.0).collect()),
        "small_over_bound": misses.len(),
        "small_over_bound_beside_big": miss_beside,
        "big": bigs,
        "files": rows.len(),
        "bytes": rows.iter().map(|r| r.w.size).sum::<u64>(),
        "verified": rows.len(),
        "writing_s": writing_s,
        "drained_s": drained_s,
        "rss_kib": {
            "start": first.map(|s| s.rss_kib),
            "end_of_writing": end_writing.map(|s| s.rss_kib),
            "end": last.map(|s| s.rss_kib),
            "max_sampled": samples.iter().map(|s| s.rss_kib).max(),
            "hwm": last.map(|s| s.hwm_kib),
            "idle_end": idle.rss_kib,
        },
        "cpu_cores_over_run": over_run.watcher,
        "cpu_cores_idle": idle.cpu.watcher,
        "relay_cpu_cores_over_run": over_run.relay,
        "relay_cpu_cores_idle": idle.cpu.relay,
        "azurite_cpu_cores_over_run": over_run.azurite,
        "azurite_cpu_cores_idle": idle.cpu.azurite,
        "load1": {"min": loads.iter().copied().fold(f64::INFINITY, f64::min),
                  "max": loads.iter().copied().fold(0.0, f64::max)},
        "network_events": seen.network.len(),
        "last_status": seen.last_status,
    })
}
