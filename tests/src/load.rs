//! The bounded load bench (`loadbench`, and a small version in the test suite):
//! many real `relay-client` processes at once through one real `relay-server`
//! process into Azurite, optionally with the relay killed (`kill -9`) mid-run and
//! restarted on the same address, certificate and block-ID key. It reports what
//! an operator would ask after such a run: clients, files, bytes, wall time,
//! MB/s, the relay's peak RSS against the memory bound its flags imply, its CPU
//! time, the clients' exit codes, storage retries by cause, and an independent
//! verification of every blob (downloaded and hashed against the local file).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;

use crate::azurite::Azurite;
use crate::files::{Scratch, write_random};
use crate::{DEV_KEY, binary, http, reserved_port, run_client};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const TOKEN: &str = "load-bench-token-0123456789abcdef";

/// One scenario's shape.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub clients: u32,
    /// Files per client: `small_files` in `small_bytes`, then `large_files` in `large_bytes`.
    pub small_files: u32,
    pub small_bytes: (u64, u64),
    pub large_files: u32,
    pub large_bytes: (u64, u64),
    /// When to kill the relay (SIGKILL) and restart it at once, if at all.
    pub kill: Option<Kill>,
    pub memory_budget: String,
    /// Extra relay flags (e.g. `--stream-window 8MiB`).
    pub relay_flags: Vec<String>,
    /// The nice value of Azurite's event-loop thread (0: as started). Azurite
    /// stands in for a storage service that does not share the clients' CPUs;
    /// on a 2-core host 64 clients waking at once starve its one thread
    /// (docs/LOAD.md, "The restart burst").
    pub azurite_nice: i32,
}

impl Scenario {
    /// The first scenario at a given scale (1.0: 64 clients × 100 files,
    /// 90 × 16–256 KiB and 10 × 4–20 MiB each, ≈ 8.8 GB).
    pub fn many_clients(scale_clients: u32, kill: Option<Kill>) -> Self {
        Self {
            name: if kill.is_some() {
                "many-clients-restart".into()
            } else {
                "many-clients".into()
            },
            clients: scale_clients,
            small_files: 90,
            small_bytes: (16 * KIB, 256 * KIB),
            large_files: 10,
            large_bytes: (4 * MIB, 20 * MIB),
            kill,
            memory_budget: "256MiB".into(),
            relay_flags: Vec::new(),
            azurite_nice: 0,
        }
    }

    /// The second scenario: `clients` × one `mib` MiB file.
    pub fn big_files(clients: u32, mib: u64) -> Self {
        Self {
            name: "big-files".into(),
            clients,
            small_files: 0,
            small_bytes: (0, 0),
            large_files: 1,
            large_bytes: (mib * MIB, mib * MIB),
            kill: None,
            memory_budget: "256MiB".into(),
            relay_flags: Vec::new(),
            azurite_nice: 0,
        }
    }
}

/// When the restart scenario kills the relay.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum Kill {
    /// This long after the clients started.
    After(Duration),
    /// Once the relay has committed this many files (so the kill is known to
    /// land mid-run, whatever the machine's speed: what tests use).
    AfterCommitted(u64),
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    pub files: u64,
    pub bytes: u64,
    pub wall_s: f64,
    pub mb_per_s: f64,
    pub relay_peak_rss_bytes: u64,
    pub memory_bound_bytes: u64,
    pub memory_bound: String,
    pub relay_cpu_s: f64,
    /// Exit status → clients.
    pub client_exits: BTreeMap<String, u32>,
    /// Retried storage requests by cause (HTTP status, `transport`: no response,
    /// `timeout`: no complete answer within the request's deadline).
    pub storage_retries: BTreeMap<String, u64>,
    pub storage_requests: u64,
    pub verified: u64,
    /// Uncommitted blocks left on committed blobs (a retried Put Block whose
    /// abandoned first request landed after the commit), and on how many blobs.
    pub stray_blocks: u64,
    pub blobs_with_stray_blocks: u64,
    /// Files the relay had committed when it was killed (restart scenario).
    pub killed_after_commits: Option<u64>,
    /// Blobs that were missing or did not hash to their file, and client failures.
    pub problems: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
            && self.verified == self.files
            && self.relay_peak_rss_bytes <= self.memory_bound_bytes
    }

    /// One human-readable line per figure.
    pub fn render(&self) -> String {
        let retries: Vec<String> = self
            .storage_retries
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        let exits: Vec<String> = self
            .client_exits
            .iter()
            .map(|(k, n)| format!("{k} × {n}"))
            .collect();
        format!(
            "scenario {}: {} clients, {} files, {:.2} GB in {:.1} s = {:.1} MB/s\n  \
             relay peak RSS {} MiB of a {} MiB bound ({}), relay CPU {:.1} s\n  \
             client exits: {}; storage requests {}, retried: {}\n  \
             verified by download: {}/{} blobs; stray uncommitted blocks: {} on {} blobs{}\n  \
             azurite event loop nice {}{}",
            self.scenario.name,
            self.scenario.clients,
            self.files,
            self.bytes as f64 / 1e9,
            self.wall_s,
            self.mb_per_s,
            self.relay_peak_rss_bytes / MIB,
            self.memory_bound_bytes / MIB,
            self.memory_bound,
            self.relay_cpu_s,
            exits.join(", "),
            self.storage_requests,
            if retries.is_empty() {
                "none".to_string()
            } else {
                retries.join(", ")
            },
            self.verified,
            self.files,
            self.stray_blocks,
            self.blobs_with_stray_blocks,
            match self.killed_after_commits {
                Some(n) => format!("; relay killed and restarted after {n} commits"),
                None => String::new(),
            },
            self.scenario.azurite_nice,
            if self.problems.is_empty() {
                String::new()
            } else {
                format!("\n  problems:\n    {}", self.problems.join("\n    "))
            }
        )
    }
}

/// One local file and what it must become.
struct Expected {
    blob: String,
    size: u64,
    sha256: String,
}

/// Writes every client's directory (seeded, so runs are repeatable).
fn make_files(s: &Scenario, root: &Scratch) -> Vec<Vec<Expected>> {
    let mut seed = 0xB10B_u64;
    let mut next = |(lo, hi): (u64, u64)| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if hi <= lo {
            lo
        } else {
            lo + (seed >> 11) % (hi - lo + 1)
        }
    };
    (0..s.clients)
        .map(|c| {
            let mut files = Vec::new();
            let kinds = std::iter::repeat_n(s.small_bytes, s.small_files as usize)
                .chain(std::iter::repeat_n(s.large_bytes, s.large_files as usize));
            for (i, range) in kinds.enumerate() {
                let size = next(range);
                let name = format!("f{i:03}.bin");
                let path = root.path(&format!("c{c:03}/{name}"));
                let sha256 = write_random(&path, size, (u64::from(c) << 20) + i as u64);
                files.push(Expected {
                    blob: format!("c{c:03}/{name}"),
                    size,
                    sha256,
                });
            }
            files
        })
        .collect()
}

/// The relay process and the flags it was started with (for the restart).
struct RelayProcess {
    child: Child,
    flags: Vec<String>,
}

impl RelayProcess {
    fn spawn(flags: &[String]) -> Result<Self, String> {
        // LOADBENCH_RELAY_LOG=FILE keeps the relay's log (appended across restarts).
        let stderr = match std::env::var_os("LOADBENCH_RELAY_LOG") {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map(Stdio::from)
                .map_err(|e| format!("cannot open {}: {e}", path.to_string_lossy()))?,
            None => Stdio::null(),
        };
        let child = Command::new(binary("relay-server"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start relay-server: {e}"))?;
        Ok(Self {
            child,
            flags: flags.to_vec(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `(VmHWM bytes, user+system CPU seconds)` of a live process.
pub fn process_usage(pid: u32) -> (u64, f64) {
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib * 1024)
        .unwrap_or(0);
    // Fields 14 and 15 of /proc/PID/stat, after the parenthesised command name.
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (hwm, ticks as f64 / hz)
}

/// Storage retries by cause and storage requests, from the relay's `/metrics`.
fn storage_counters(health: &str) -> (BTreeMap<String, u64>, u64) {
    let Some((_, text)) = http::get(health, "/metrics") else {
        return (BTreeMap::new(), 0);
    };
    let mut retries = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("blob_relay_azure_retries_total{status=\"")
            && let Some((label, value)) = rest.split_once("\"} ")
        {
            retries.insert(label.to_string(), value.trim().parse::<u64>().unwrap_or(0));
        }
    }
    let requests = http::sample(&text, "blob_relay_storage_requests_total").unwrap_or(0.0) as u64;
    (retries, requests)
}

/// What the relay process(es) of one run used, summed over restarts.
#[derive(Default)]
struct Usage {
    peak_rss: u64,
    cpu_s: f64,
    retries: BTreeMap<String, u64>,
    requests: u64,
}

impl Usage {
    /// Adds what the live relay `pid` (health listener `health`) has used so far.
    fn sample(&mut self, health: &str, pid: u32) {
        let (retries, requests) = storage_counters(health);
        for (k, v) in retries {
            *self.retries.entry(k).or_insert(0) += v;
        }
        self.requests += requests;
        let (hwm, secs) = process_usage(pid);
        self.peak_rss = self.peak_rss.max(hwm);
        self.cpu_s += secs;
    }
}

/// Waits until the relay wrote its fingerprint file (it is listening then).
pub async fn wait_started(fp_file: &Path) -> Result<String, String> {
    let t0 = Instant::now();
    loop {
        let fp = std::fs::read_to_string(fp_file).unwrap_or_default();
        if !fp.trim().is_empty() {
            return Ok(fp.trim().to_string());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err("relay-server did not start within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Files the relay has committed so far, from its `/metrics`.
fn committed(health: &str) -> Option<u64> {
    http::get(health, "/metrics")
        .and_then(|(_, text)| http::sample(&text, "blob_relay_transfers_committed_total"))
        .map(|v| v as u64)
}

async fn wait_for_kill(kill: Kill, health: &str, t0: Instant) {
    match kill {
        Kill::After(after) => tokio::time::sleep(after.saturating_sub(t0.elapsed())).await,
        Kill::AfterCommitted(n) => loop {
            if committed(health).unwrap_or(0) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        },
    }
}

/// `relay-client upload PATH --json` through a relay process at `listen`.
pub fn upload_args(
    path: &Path,
    listen: &str,
    fingerprint: &str,
    to: &str,
    token: &str,
) -> Vec<String> {
    let path = path.display().to_string();
    [
        "upload",
        &path,
        "--json",
        "--relay",
        listen,
        "--relay-cert-sha256",
        fingerprint,
        "--to",
        to,
        "--token",
        token,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

/// Self-signed certificate and key files, so a restarted relay keeps its identity.
fn identity_files(dir: &Scratch) -> Result<(PathBuf, PathBuf), String> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .map_err(|e| format!("certificate: {e}"))?;
    let (c, k) = (dir.path("cert.pem"), dir.path("key.pem"));
    std::fs::write(&c, cert.cert.pem()).map_err(|e| e.to_string())?;
    std::fs::write(&k, cert.signing_key.serialize_pem()).map_err(|e| e.to_string())?;
    Ok((c, k))
}

/// Runs one scenario end to end against `az` and reports it (problems are
/// reported, not panicked on). The bench gives each scenario a fresh Azurite:
/// an in-memory one holds every byte uploaded to it.
pub async fn run(az: &Azurite, s: &Scenario) -> Result<Report, String> {
    let storage = az.storage();
    let container = crate::unique_container(&format!("load-{}", s.name));
    storage
        .ensure_container(&container)
        .await
        .map_err(|e| e.to_string())?;
    let work = Scratch::new(&format!("load-{}", s.name));
    let data = Scratch::new(&format!("load-data-{}", s.name));
    std::fs::write(work.path("tokens"), format!("{TOKEN}\n")).map_err(|e| e.to_string())?;
    let (cert, key) = identity_files(&work)?;
    let listen = format!("127.0.0.1:{}", reserved_port());
    let health = format!("127.0.0.1:{}", reserved_port());
    let fp_file = work.path("fingerprint");
    let mut flags: Vec<String> = [
        "--listen",
        &listen,
        "--storage-url",
        &az.url(),
        "--account-key",
        DEV_KEY,
        "--tokens",
        &work.path("tokens").display().to_string(),
        "--state-dir",
        &work.path("state").display().to_string(),
        "--id-key-file",
        &work.path("id.key").display().to_string(),
        "--tls-cert",
        &cert.display().to_string(),
        "--tls-key",
        &key.display().to_string(),
        "--cert-fingerprint-file",
        &fp_file.display().to_string(),
        "--health-listen",
        &health,
        "--memory-budget",
        &s.memory_budget,
        "--memory-limit",
        "64GiB",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    flags.extend(s.relay_flags.iter().cloned());
    let args = relay_server::operations::config::Args::try_parse_from(
        std::iter::once("relay-server".to_string()).chain(flags.iter().cloned()),
    )
    .map_err(|e| e.to_string())?;
    let bound = relay_server::Config::from_args(&args)
        .map_err(|e| e.to_string())?
        .memory_bound();

    let expected = make_files(s, &data);
    let mut relay = RelayProcess::spawn(&flags)?;
    let fingerprint = wait_started(&fp_file).await?;

    let t0 = Instant::now();
    let mut clients = Vec::new();
    for c in 0..s.clients {
        // A directory upload keeps the directory's name: blobs are cNNN/fMMM.bin.
        let args = upload_args(
            &data.path(&format!("c{c:03}")),
            &listen,
            &fingerprint,
            &container,
            TOKEN,
        );
        clients.push(tokio::spawn(async move {
            run_client(&args, &[], Duration::from_secs(3600)).await
        }));
    }

    let mut usage = Usage::default();
    let mut killed_after_commits = None;
    if let Some(kill) = s.kill {
        wait_for_kill(kill, &health, t0).await;
        killed_after_commits = committed(&health);
        usage.sample(&health, relay.pid());
        relay.kill();
        std::fs::remove_file(&fp_file).ok();
        let flags = relay.flags.clone();
        relay = RelayProcess::spawn(&flags)?;
        wait_started(&fp_file).await?;
    }

    let mut client_exits = BTreeMap::new();
    let mut problems = Vec::new();
    for (c, client) in clients.into_iter().enumerate() {
        let out = client.await.map_err(|e| e.to_string())?;
        let code = out
            .status
            .code()
            .map_or("signal".to_string(), |c| c.to_string());
        *client_exits.entry(code).or_insert(0) += 1;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            problems.push(format!("client {c}: exit {:?}: {last}", out.status.code()));
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    usage.sample(&health, relay.pid());
    drop(relay);

    let (mut files, mut bytes, mut verified) = (0, 0, 0);
    let (mut stray_blocks, mut blobs_with_stray_blocks) = (0, 0);
    for e in expected.iter().flatten() {
        files += 1;
        bytes += e.size;
        let blob = storage
            .writer(&container, &e.blob)
            .map_err(|e| e.to_string())?;
        match blob.content_sha256().await {
            Ok((size, sha)) if size == e.size && hex::encode(sha) == e.sha256 => verified += 1,
            Ok((size, sha)) => problems.push(format!(
                "{}: blob is {size} bytes, sha256 {}, not the file's",
                e.blob,
                hex::encode(sha)
            )),
            Err(err) => problems.push(format!("{}: {err}", e.blob)),
        }
        match blob.uncommitted_blocks().await {
            Ok(left) if !left.is_empty() => {
                stray_blocks += left.len() as u64;
                blobs_with_stray_blocks += 1;
            }
            Ok(_) => {}
            Err(err) => problems.push(format!("{}: block list: {err}", e.blob)),
        }
    }
    Ok(Report {
        scenario: s.clone(),
        files,
        bytes,
        wall_s: wall,
        mb_per_s: bytes as f64 / 1e6 / wall.max(1e-9),
        relay_peak_rss_bytes: usage.peak_rss,
        memory_bound_bytes: bound.total(),
        memory_bound: bound.to_string(),
        relay_cpu_s: usage.cpu_s,
        client_exits,
        storage_retries: usage.retries,
        storage_requests: usage.requests,
        verified,
        stray_blocks,
        blobs_with_stray_blocks,
        killed_after_commits,
        problems,
    })
}
