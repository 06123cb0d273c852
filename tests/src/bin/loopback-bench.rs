//! Loopback benchmark (not a timed test): the same file uploaded through the relay
//! (QUIC on 127.0.0.1) and straight to Azurite with the SDK writer (direct mode:
//! same block size, same Put Block concurrency), alternated A B A B in one run.
//! Prints both rates, their ratio, and the relay's peak RSS against its budget.
//!
//! `cargo run --release -p relay-tests --bin loopback-bench -- [--size-mib 2048] [--repeats 2]`

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relay_tests::files::write_random;
use relay_tests::{DEV_KEY, binary};

struct Args {
    size_mib: u64,
    repeats: u32,
    budget_mib: u64,
    in_flight: u32,
    congestion: String,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        size_mib: 2048,
        repeats: 2,
        budget_mib: 512,
        in_flight: 4,
        congestion: "relay".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        if flag == "--congestion" {
            a.congestion = v;
            continue;
        }
        let n: u64 = v
            .parse()
            .map_err(|_| format!("{flag}: not a number: {v}"))?;
        match flag.as_str() {
            "--size-mib" => a.size_mib = n,
            "--repeats" => a.repeats = n as u32,
            "--budget-mib" => a.budget_mib = n,
            "--in-flight" => a.in_flight = n as u32,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("loopback-bench: {e}");
        std::process::exit(1);
    }
}

fn free_port() -> Result<u16, String> {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Peak resident set (VmHWM) of a live process, MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU seconds (user + system) a live process has used so far.
fn cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// CPU seconds used by waited-for children (the client runs), from getrusage.
fn children_cpu_s() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

#[derive(Default, Clone, Copy)]
struct Cpu {
    client: f64,
    relay: f64,
    azurite: f64,
}

fn upload(args: &[String], env: &[(&str, &str)]) -> Result<f64, String> {
    let mut cmd = Command::new(binary("relay-client"));
    cmd.args(args).stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "upload failed: {}",
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    if v["ok"] != true {
        return Err("upload not verified".into());
    }
    v["totals"]["seconds"]
        .as_f64()
        .ok_or_else(|| "no seconds".into())
}

fn run() -> Result<(), String> {
    let a = parse_args()?;
    relay_transport::install_crypto_provider();
    let dir = relay_tests::files::Scratch::new("bench");
    let file = dir.path("bench.bin");
    let size = a.size_mib << 20;
    eprintln!("generating {} MiB test file...", a.size_mib);
    let sha = write_random(&file, size, 42);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|x| x.port())
        .map_err(|e| e.to_string())?;
    let az = relay_tests::azurite::start(port);
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let storage = az.storage();
    rt.block_on(storage.ensure_container("bench"))
        .map_err(|e| e.to_string())?;

    let token = "bench-token-0123456789abcdef";
    std::fs::write(dir.path("tokens"), format!("{token}\n")).map_err(|e| e.to_string())?;
    let fp = dir.path("fp");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut relay = Command::new(binary("relay-server"))
        .args([
            "--listen",
            &addr,
            "--storage-url",
            &az.url(),
            "--account-key",
            DEV_KEY,
        ])
        .args([
            "--tokens",
            &p(&dir.path("tokens")),
            "--id-key-file",
            &p(&dir.path("id.key")),
            "--state-dir",
            &p(&dir.path("state")),
            "--cert-fingerprint-file",
            &p(&fp),
        ])
        .args(["--memory-budget", &format!("{}MiB", a.budget_mib)])
        .args(["--blocks-in-flight", &a.in_flight.to_string()])
        .args(["--congestion", &a.congestion])
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let fingerprint = loop {
        if let Ok(s) = std::fs::read_to_string(&fp)
            && !s.trim().is_empty()
        {
            break s.trim().to_string();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = relay.kill();
            return Err("relay did not start".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };

    let mut relay_s = Vec::new();
    let mut direct_s = Vec::new();
    let (mut relay_cpu, mut direct_cpu) = (Cpu::default(), Cpu::default());
    let snap = |relay_pid: u32| Cpu {
        client: children_cpu_s(),
        relay: cpu_s(relay_pid),
        azurite: cpu_s(az.pid),
    };
    let add = |acc: &mut Cpu, a: Cpu, b: Cpu| {
        acc.client += b.client - a.client;
        acc.relay += b.relay - a.relay;
        acc.azurite += b.azurite - a.azurite;
    };
    let f = p(&file);
    for r in 0..a.repeats {
        let to = format!("bench/relay-{r}");
        let ra: Vec<String> = [
            "upload",
            &f,
            "--relay",
            &addr,
            "--relay-cert-sha256",
            &fingerprint,
            "--to",
            &to,
            "--json",
            "--congestion",
            &a.congestion,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c0 = snap(relay.id());
        let s = upload(&ra, &[("RELAY_TOKEN", token)])?;
        add(&mut relay_cpu, c0, snap(relay.id()));
        eprintln!(
            "repeat {r}: relay  {:.2} s  {:.0} MB/s",
            s,
            size as f64 / s / 1e6
        );
        relay_s.push(s);
        let to = format!("bench/direct-{r}");
        let da: Vec<String> = [
            "upload",
            &f,
            "--direct",
            "--storage-url",
            &az.url(),
            "--to",
            &to,
            "--json",
            "--connections",
            &a.in_flight.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c0 = snap(relay.id());
        let s = upload(&da, &[("RELAY_ACCOUNT_KEY", DEV_KEY)])?;
        add(&mut direct_cpu, c0, snap(relay.id()));
        eprintln!(
            "repeat {r}: direct {:.2} s  {:.0} MB/s",
            s,
            size as f64 / s / 1e6
        );
        direct_s.push(s);
    }
    let rss = peak_rss_mib(relay.id());
    unsafe {
        libc::kill(relay.id() as i32, libc::SIGTERM);
    }
    let _ = relay.wait();

    // Independent check of one committed blob.
    let w = storage
        .writer("bench", "relay-0/bench.bin")
        .map_err(|e| e.to_string())?;
    let (_, got) = rt.block_on(w.content_sha256()).map_err(|e| e.to_string())?;
    if hex::encode(got) != sha {
        return Err("downloaded blob hash differs from the source".into());
    }

    let med = |v: &mut Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let (rs, ds) = (med(&mut relay_s), med(&mut direct_s));
    let mbps = |s: f64| size as f64 / s / 1e6;
    println!(
        "file: {} MiB, block 16 MiB, {} Put Block in flight, {} repeats (median)",
        a.size_mib, a.in_flight, a.repeats
    );
    println!(
        "relay  (QUIC loopback -> relay -> Azurite): {:.0} MB/s",
        mbps(rs)
    );
    println!(
        "direct (SDK writer -> Azurite):             {:.0} MB/s",
        mbps(ds)
    );
    println!("ratio relay/direct: {:.2}", ds / rs);
    let gib = (size as f64 / (1u64 << 30) as f64) * f64::from(a.repeats);
    for (name, c) in [("relay", relay_cpu), ("direct", direct_cpu)] {
        println!(
            "{name:6} CPU s per GiB: client {:.2}, relay {:.2}, Azurite {:.2}",
            c.client / gib,
            c.relay / gib,
            c.azurite / gib
        );
    }
    match rss {
        Some(m) => println!(
            "relay peak RSS: {m:.0} MiB (budget {} MiB + 64 MiB = {} MiB): {}",
            a.budget_mib,
            a.budget_mib + 64,
            if m <= (a.budget_mib + 64) as f64 {
                "within"
            } else {
                "OVER"
            }
        ),
        None => println!("relay peak RSS: unavailable"),
    }
    Ok(())
}

fn p(x: &Path) -> String {
    x.to_string_lossy().into_owned()
}
