//! The bounded load bench (not part of the default test run; a small version is
//! `tests/it/bench/load.rs`). Three scenarios, each a separate relay process:
//!
//! - `many-clients`: N clients at once, each uploading its own directory of 100
//!   files (90 × 16–256 KiB, 10 × 4–20 MiB);
//! - `big-files`: M clients × one large file;
//! - `restart`: `many-clients` with the relay killed (SIGKILL) mid-run and
//!   restarted at once with the same certificate and block-ID key.
//!
//! `cargo build --release --workspace --bins && target/release/loadbench [--clients 64] [--big-clients 16] [--big-mib 256] [--kill-after-s 32] [--scenario all|many-clients|big-files|restart] [--azurite-nice -10] [--json FILE] [-- RELAY FLAGS...]`
//!
//! `--azurite-nice` (default -10; 0 leaves it) raises the priority of Azurite's
//! event-loop thread: it plays a storage service, which does not share the
//! clients' CPUs. Without it, on a 2-core host, the restarted relay's 64 clients
//! waking at once leave Azurite's one thread waiting for a CPU for seconds
//! (docs/LOAD.md). Needs root (CAP_SYS_NICE); otherwise a warning and as started.
//!
//! `LOADBENCH_RELAY_LOG=FILE` keeps the relay's log (its warnings name every
//! retried storage request and its cause).
//!
//! Prints one report per scenario (see `relay_tests::load::Report`) and exits 1 if
//! any blob failed verification, any client failed, or the relay's peak RSS
//! exceeded the memory bound its flags imply.

use std::time::Duration;

use relay_tests::load::{self, Kill, Scenario};

struct Args {
    clients: u32,
    big_clients: u32,
    big_mib: u64,
    kill_after_s: u64,
    scenario: String,
    json: Option<String>,
    relay_flags: Vec<String>,
    azurite_nice: i32,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        clients: 64,
        big_clients: 16,
        big_mib: 256,
        kill_after_s: 32,
        scenario: "all".into(),
        json: None,
        relay_flags: Vec::new(),
        azurite_nice: -10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--" {
            a.relay_flags = it.by_ref().collect();
            break;
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--clients" => a.clients = num(&v)? as u32,
            "--big-clients" => a.big_clients = num(&v)? as u32,
            "--big-mib" => a.big_mib = num(&v)?,
            "--kill-after-s" => a.kill_after_s = num(&v)?,
            "--scenario" => a.scenario = v,
            "--json" => a.json = Some(v),
            "--azurite-nice" => {
                a.azurite_nice = v
                    .parse()
                    .map_err(|_| format!("{flag}: not a number: {v}"))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// Sets the nice value of the process's main thread (Azurite's event loop);
/// returns the value in effect.
fn prioritise(pid: u32, nice: i32) -> i32 {
    if nice == 0 {
        return 0;
    }
    // SAFETY: setpriority has no memory-safety preconditions; the PID is our child's.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, pid, nice) };
    if rc != 0 {
        eprintln!(
            "loadbench: cannot set Azurite's nice value to {nice} ({}); it runs as started",
            std::io::Error::last_os_error()
        );
        return 0;
    }
    nice
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadbench: {e}");
            std::process::exit(2);
        }
    };
    let mut scenarios = Vec::new();
    let want = |name: &str| args.scenario == "all" || args.scenario == name;
    if want("many-clients") {
        scenarios.push(Scenario::many_clients(args.clients, None));
    }
    if want("big-files") {
        scenarios.push(Scenario::big_files(args.big_clients, args.big_mib));
    }
    if want("restart") {
        scenarios.push(Scenario::many_clients(
            args.clients,
            Some(Kill::After(Duration::from_secs(args.kill_after_s))),
        ));
    }
    if scenarios.is_empty() {
        eprintln!("loadbench: unknown scenario {}", args.scenario);
        std::process::exit(2);
    }
    let mut reports = Vec::new();
    let mut ok = true;
    for mut s in scenarios {
        s.relay_flags = args.relay_flags.clone();
        // A fresh in-memory Azurite per scenario (it holds every byte uploaded).
        let az = relay_tests::azurite::start(relay_tests::reserved_port());
        s.azurite_nice = prioritise(az.pid, args.azurite_nice);
        let result = load::run(&az, &s).await;
        // SAFETY: kill has no memory-safety preconditions; the PID is our child's.
        unsafe {
            libc::kill(az.pid as i32, libc::SIGKILL);
        }
        match result {
            Ok(r) => {
                println!("{}", r.render());
                ok &= r.ok();
                reports.push(r);
            }
            Err(e) => {
                eprintln!("loadbench: {}: {e}", s.name);
                ok = false;
            }
        }
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&reports).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("loadbench: cannot write {path}: {e}");
            ok = false;
        }
    }
    std::process::exit(if ok { 0 } else { 1 });
}
