//! wanbench: relay vs. direct upload vs. the Python SDK on the same emulated
//! WAN link (linklab), with Azurite and the relay in the `cloud` namespace
//! and each client run as its own process in `site`; optionally the same
//! for downloads.
//!
//! Layout: `plan` (what to run), `workload` (the files), `cloud` (Azurite,
//! relay, blob checks), `client` (command lines and their JSON), `child`
//! (capped runs, CPU and RSS), `bench` (the loop), `download` (the download
//! rows' seeding and checks), `row` / `summary` / `plot` (results.json,
//! Markdown, SVG).

mod azcopy;
mod bench;
mod card;
mod child;
mod client;
mod download;
mod interrupt;
mod plan;
mod plot;
mod row;
mod summary;
mod sync_report;
mod sync_rerun;
mod sync_tree;
mod tcp_reference;
mod versus;
mod workload;

use wanbench::{cloud, cpu_split, storage_delay, tcp_cc};

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use crate::plan::{Method, Plan, Profile, Workload};
use crate::row::Row;

const LONG_ABOUT: &str = "\
Uploads the same files through the relay (QUIC), directly with relay-client \
--direct (TCP cubic and bbr, sized from the measured path) and with the Python azure-storage-blob \
SDK (max_concurrency=8), across a user-space emulated WAN link (linklab) between \
two network namespaces: client in `site`, Azurite and relay-server in `cloud`. \
Needs root, /dev/net/tun, iproute2, Azurite (npm ci) and release binaries \
(cargo build --release --workspace --bins); scripts/wanbench does all of it.";

const AFTER_HELP: &str = "\
Examples:
  # CI smoke test (2 profiles, small files, 1 repeat; exits 1 unless every row verified):
  wanbench --quick --out /tmp/wanbench-quick
  # Full run (5 profiles, 256 MiB + 200 x 256 KiB, 3 repeats, 120 s cap):
  wanbench --out docs/bench
  # One profile, two methods:
  wanbench --profiles 100/0.01/200 --methods relay,direct-bbr --repeats 1
  # Against AzCopy (its defaults and tuned, TCP CUBIC and BBR; AzCopy from scripts/setup):
  wanbench --methods relay,azcopy-cubic,azcopy-bbr,azcopy-tuned-cubic,azcopy-tuned-bbr
  # Issue 58's sync re-run: 10,000 files synced, 1 % changed, the re-sync
  # beside an upload of only the changed files (200 ms / 1 %, 3 rounds):
  wanbench --sync-rerun --out SYNC
  # Re-render tables and plot from saved results:
  wanbench --render docs/bench/results.json --out docs/bench
  # Downloads of service logs, compressed and not (the download card's logs table):
  wanbench --profiles 200/0.01/200 --methods relay-dl,relay-dl-off,direct-dl-bbr \\
      --workloads large --data logs --repeats 3 --cap-seconds 40 --out LOGS
  wanbench --render docs/bench/download/results.json,LOGS/results.json \\
      --out docs/bench/download --card";

#[derive(Parser, Debug)]
#[command(name = "wanbench", about = "Blob Relay WAN-lab benchmark", long_about = LONG_ABOUT, after_help = AFTER_HELP)]
struct Args {
    /// CI smoke test: 2 profiles, 16 MiB + 20 x 256 KiB, 1 repeat, 60 s cap.
    #[arg(long)]
    quick: bool,
    /// Output directory for results.json, summary.md and goodput.svg
    /// [default: docs/bench; with --quick: $TMPDIR/wanbench-quick; with
    /// --sync-rerun (sync-rerun.json, sync-rerun.md): $TMPDIR/wanbench-sync].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Profiles RTT_MS/LOSS/RATE_MBIT, comma-separated (loss is a fraction).
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
    /// Methods: relay, relay-off (relay with --compress off), relay-cold, relay-cold-plain, relay-cubic, direct-cubic, direct-bbr, direct-bbr-32,
    /// python-sdk, python-sdk-bbr, python-sdk-32, python-sdk-64, rclone,
    /// azcopy-cubic, azcopy-bbr, azcopy-tuned-cubic, azcopy-tuned-bbr; downloads
    /// (the files put in storage through the relay first, untimed): relay-dl,
    /// relay-dl-off (download with --compress off), direct-dl-cubic,
    /// direct-dl-bbr, python-sdk-dl, azcopy-dl-cubic, azcopy-dl-bbr,
    /// azcopy-tuned-dl-cubic, azcopy-tuned-dl-bbr.
    #[arg(long, value_delimiter = ',')]
    methods: Vec<String>,
    /// Workloads: large, small (the sizes below) or COUNTxSIZE, e.g.
    /// 10000x64KiB,1x625MiB. A many-file workload is compared with one file of
    /// the same bytes when both are in the run.
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Run every client in the cloud namespace, next to Azurite and the relay
    /// (loopback: files/s into Azurite; the link is idle).
    #[arg(long)]
    loopback: bool,
    /// Put a storage region in front of Azurite: MS (added per request) or
    /// MS/MBIT (and that upload rate per TCP connection), e.g. 20/480.
    #[arg(long, value_name = "MS[/MBIT]")]
    storage_delay: Option<String>,
    /// What stands for the storage account: azurite (default), or standin,
    /// an in-memory server that answers far faster than Azurite (for CPU
    /// per small file when storage is not the bottleneck; see
    /// relay_tests::standin). The relay and every check use it alike.
    #[arg(long, default_value = "azurite", value_parser = ["azurite", "standin"])]
    storage: String,
    /// Run Azurite alone on this CPU and everything else on the others (real
    /// storage has its own machines; here it would share cores with the relay
    /// and the client). Applies to every row alike.
    #[arg(long, value_name = "CPU")]
    storage_cpu: Option<usize>,
    /// The lab's TUN devices emulate NIC offloads: UDP GSO batches cross
    /// whole and checksums are the emulator's, as on a server NIC (see
    /// linklab's `offload`). Off by default: a plain TUN, where the kernel
    /// segments and checksums every datagram in the processes' own time.
    #[arg(long)]
    nic_offload: bool,
    /// rclone binary for the `rclone` row.
    #[arg(long, default_value = "rclone")]
    rclone: PathBuf,
    /// AzCopy binary for the `azcopy-*` rows [default: the pinned npm
    /// package's, node_modules/@azure-tools/azcopy-linux/dist/bin/azcopy_linux_amd64].
    #[arg(long)]
    azcopy: Option<PathBuf>,
    /// Repeats of every (profile, workload, method).
    #[arg(long)]
    repeats: Option<u32>,
    /// Kill a run after this many seconds and report goodput over the cap.
    #[arg(long)]
    cap_seconds: Option<u64>,
    /// Size of the large file in MiB.
    #[arg(long)]
    large_mib: Option<u64>,
    /// Number of small files.
    #[arg(long)]
    small_count: Option<usize>,
    /// Size of each small file in KiB.
    #[arg(long)]
    small_kib: Option<u64>,
    /// QUIC congestion controller of the `relay` row (client and relay).
    #[arg(long, default_value = "relay")]
    relay_congestion: String,
    /// An extra argument for every relay-client run (relay and direct rows;
    /// repeatable), e.g. `--client-arg=--max-rate --client-arg=50`.
    #[arg(long, allow_hyphen_values = true, value_name = "ARG")]
    client_arg: Vec<String>,
    /// After every direct row of one file, measure as many plain TCP flows of
    /// the same congestion control as it had requests in flight, on the same
    /// link (the path's TCP ceiling, printed beside the row).
    #[arg(long)]
    tcp_reference: bool,
    /// What the generated files hold: random (default), or logs, csv, fastq,
    /// sparse (text-like sets for the compression rows: relay vs relay-off,
    /// relay-dl vs relay-dl-off).
    #[arg(long, value_name = "SET")]
    data: Option<String>,
    /// Exit 1 unless every row verified its blobs and no direct request was
    /// abandoned while its body still moved (implied by --quick).
    #[arg(long)]
    strict: bool,
    /// Directory with relay-client and relay-server (default: next to wanbench).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Python with azure-storage-blob installed (scripts/wanbench makes a venv).
    #[arg(
        long,
        env = "WANBENCH_PYTHON",
        default_value = "/tmp/blob-relay-pyvenv/bin/python"
    )]
    python: PathBuf,
    /// Scratch directory for files and logs (default: a new one under $TMPDIR).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Only re-render results.json, summary.md and goodput.svg from these
    /// results files (comma-separated: their rows together, e.g. the
    /// download matrix and a `--data logs` run of the relay rows).
    #[arg(long, value_delimiter = ',', value_name = "RESULTS_JSON")]
    render: Vec<PathBuf>,
    /// With --render: also rewrite the headline card (upload, or download when
    /// every row is a download row) in docs/BENCHMARKS.md from
    /// that results file (the test suite checks they match).
    #[arg(long, requires = "render")]
    card: bool,
    /// Sync re-run instead of the matrix: a tree synced once through the
    /// relay, then per round --sync-change-pct of its files changed and
    /// `relay-client sync` timed beside `relay-client upload` of only those
    /// files (sync-rerun.json and sync-rerun.md in --out; profile default
    /// 200/0.01/200, --repeats rounds, --cap-seconds per timed run).
    #[arg(long, conflicts_with_all = ["render", "quick", "loopback"])]
    sync_rerun: bool,
    /// --sync-rerun: files in the tree.
    #[arg(long, default_value_t = 10_000, requires = "sync_rerun")]
    sync_files: usize,
    /// --sync-rerun: percent of the files changed in place per round.
    #[arg(long, default_value_t = 1.0, requires = "sync_rerun")]
    sync_change_pct: f64,
    /// --sync-rerun: file sizes, log-uniform in MIN-MAX, e.g. 64KiB-2MiB
    /// [default: 16KiB-1MiB].
    #[arg(long, value_name = "MIN-MAX", requires = "sync_rerun")]
    sync_sizes: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wanbench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    let out = args.out.take().unwrap_or_else(|| {
        if args.quick {
            std::env::temp_dir().join("wanbench-quick")
        } else if args.sync_rerun {
            std::env::temp_dir().join("wanbench-sync")
        } else {
            PathBuf::from("docs/bench")
        }
    });
    if !args.render.is_empty() {
        let mut rows: Vec<Row> = Vec::new();
        for path in &args.render {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            let more: Vec<Row> =
                serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
            rows.extend(more);
        }
        write_outputs(&out, &rows, None)?;
        if args.card {
            write_cards(&rows)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let plan = make_plan(&args)?;
    // Before any thread or child starts: they inherit this process's CPUs.
    let storage_cpus = match args.storage_cpu {
        Some(cpu) => Some(cpu_split::split(cpu)?),
        None => None,
    };
    linklab::check_privileges()?;
    interrupt::install();
    relay_transport::install_crypto_provider();
    let root = repo_root();
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => relay_tests::bin_dir(),
    };
    let cloud_bins = cloud::CloudBins {
        storage: if plan.standin {
            cloud::StorageBin::StandIn(existing(
                bin_dir.join("standin-storage"),
                "build it: cargo build --release --workspace --bins",
            )?)
        } else {
            cloud::StorageBin::Azurite(existing(
                root.join("node_modules/.bin/azurite-blob"),
                "run `npm ci` in the repository root",
            )?)
        },
        relay_server: existing(
            bin_dir.join("relay-server"),
            "build it: cargo build --release --workspace --bins",
        )?,
        storage_cpus,
    };
    if args.sync_rerun {
        return sync_setup(&args, plan, cloud_bins, &bin_dir, out).and_then(sync_rerun::run);
    }
    let site_bins = client::SiteBins {
        relay_client: existing(
            bin_dir.join("relay-client"),
            "build it: cargo build --release --workspace --bins",
        )?,
        python: args.python.clone(),
        upload_py: existing(
            root.join("tests/wanbench/py/upload.py"),
            "missing from the checkout",
        )?,
        download_py: existing(
            root.join("tests/wanbench/py/download.py"),
            "missing from the checkout",
        )?,
        rclone: args.rclone.clone(),
        azcopy: args
            .azcopy
            .clone()
            .unwrap_or_else(|| root.join(relay_tests::azcopy::NPM_PATH)),
    };
    if plan.methods.iter().any(|m| m.azcopy().is_some()) {
        if args.azcopy.is_none() {
            relay_tests::azcopy::find().map_err(anyhow::Error::msg)?;
        }
        let version = azcopy::check(&site_bins.azcopy)?;
        eprintln!(
            "wanbench: AzCopy {version} ({})",
            site_bins.azcopy.display()
        );
    }
    if plan.methods.contains(&Method::Rclone) {
        check_rclone(&site_bins.rclone)?;
    }
    if plan.methods.iter().any(|m| m.is_python()) {
        check_python(&site_bins.python)?;
    }
    let work = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("wanbench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    eprintln!(
        "wanbench: {} runs ({} profiles x {} methods x {} workloads x {} repeats), cap {} s, work dir {}",
        plan.runs(),
        plan.profiles.len(),
        plan.methods.len(),
        plan.workloads.len(),
        plan.repeats,
        plan.cap.as_secs(),
        work.display()
    );
    let ccs: Vec<&str> = plan.methods.iter().filter_map(|m| m.tcp_cc()).collect();
    let _allow = tcp_cc::AllowGuard::ensure(&ccs)?;
    let t0 = Instant::now();
    let files = workload::Files::generate(&work.join("files"), &plan);
    let mut rows: Vec<Row> = Vec::new();
    let partial = out.join("results.partial.json");
    let mut saved: Vec<Row> = Vec::new();
    let mut on_row = |r: &Row| {
        saved.push(r.clone());
        // Best effort: a long run interrupted late still leaves its rows.
        if let Ok(text) = serde_json::to_string_pretty(&saved) {
            let _ = std::fs::write(&partial, text);
        }
    };
    let mut bench = bench::Bench {
        plan: &plan,
        cloud_bins,
        site_bins,
        files: &files,
        work: work.clone(),
        on_row: &mut on_row,
    };
    for profile in &plan.profiles {
        rows.extend(
            bench
                .run_profile(*profile)
                .with_context(|| profile.label())?,
        );
    }
    let elapsed = t0.elapsed();
    write_outputs(&out, &rows, Some((&plan, elapsed)))?;
    let _ = std::fs::remove_file(&partial);
    if args.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    let bad: Vec<&Row> = rows.iter().filter(|r| !r.verified).collect();
    eprintln!(
        "wanbench: {} rows in {:.0} s, {} verified; results in {}",
        rows.len(),
        elapsed.as_secs_f64(),
        rows.len() - bad.len(),
        out.display()
    );
    // The smoke test's assertions: every row verified its blobs, and no direct
    // request was given up while its bytes moved.
    let moving: Vec<&Row> = rows
        .iter()
        .filter(|r| r.abandoned_while_moving.unwrap_or(0) > 0)
        .collect();
    for r in &moving {
        eprintln!(
            "wanbench: ABANDONED WHILE MOVING: {} {} {} #{}: {} request(s)",
            r.profile.label(),
            r.workload,
            r.method,
            r.repeat,
            r.abandoned_while_moving.unwrap_or(0)
        );
    }
    if (args.quick || args.strict) && (!bad.is_empty() || !moving.is_empty()) {
        for r in bad {
            eprintln!(
                "wanbench: NOT VERIFIED: {} {} {} #{}: {}",
                r.profile.label(),
                r.workload,
                r.method,
                r.repeat,
                r.error.as_deref().unwrap_or("?")
            );
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn sync_setup(
    args: &Args,
    plan: Plan,
    cloud_bins: cloud::CloudBins,
    bin_dir: &Path,
    out: PathBuf,
) -> anyhow::Result<sync_rerun::Setup> {
    if args.sync_files == 0 || !(args.sync_change_pct > 0.0 && args.sync_change_pct <= 100.0) {
        bail!("--sync-files must be > 0 and --sync-change-pct in (0, 100]");
    }
    let work = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("wanbench-sync-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    Ok(sync_rerun::Setup {
        plan: sync_rerun::SyncPlan {
            files: args.sync_files,
            change_pct: args.sync_change_pct,
            mix: match &args.sync_sizes {
                Some(s) => sync_tree::SizeMix::parse(s)?,
                None => sync_tree::SizeMix::DEFAULT,
            },
            repeats: plan.repeats,
            cap: plan.cap,
            relay_congestion: plan.relay_congestion,
            client_args: plan.client_args,
            nic_offload: plan.nic_offload,
            storage_delay: plan.storage_delay,
        },
        // The matrix's five profiles are not this mode's default.
        profiles: if args.profiles.is_empty() {
            vec![sync_rerun::DEFAULT_PROFILE]
        } else {
            plan.profiles
        },
        cloud_bins,
        relay_client: existing(
            bin_dir.join("relay-client"),
            "build it: cargo build --release --workspace --bins",
        )?,
        work,
        out,
        own_work: args.work_dir.is_none(),
    })
}

fn make_plan(args: &Args) -> anyhow::Result<Plan> {
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if !args.profiles.is_empty() {
        plan.profiles = args
            .profiles
            .iter()
            .map(|s| Profile::parse(s))
            .collect::<Result<_, _>>()?;
    }
    if !args.methods.is_empty() {
        plan.methods = args
            .methods
            .iter()
            .map(|s| Method::parse(s))
            .collect::<Result<_, _>>()?;
    }
    if let Some(n) = args.repeats {
        plan.repeats = n.max(1);
    }
    if let Some(s) = args.cap_seconds {
        plan.cap = Duration::from_secs(s.max(1));
    }
    if let Some(m) = args.large_mib {
        plan.large_bytes = m.max(1) << 20;
    }
    if let Some(n) = args.small_count {
        plan.small_count = n.max(1);
    }
    if let Some(k) = args.small_kib {
        plan.small_bytes = k.max(1) << 10;
    }
    // After the sizes: `large` and `small` mean the sizes given.
    let names: Vec<String> = if args.workloads.is_empty() {
        vec!["large".into(), "small".into()]
    } else {
        args.workloads.clone()
    };
    let mut workloads = Vec::new();
    for n in &names {
        let w = Workload::parse(n, &plan)?;
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    plan.workloads = workloads;
    plan.loopback = args.loopback;
    if let Some(d) = &args.storage_delay {
        plan.storage_delay = Some(storage_delay::DelaySpec::parse(d)?);
    }
    if !["relay", "cubic", "bbr", "newreno"].contains(&args.relay_congestion.as_str()) {
        bail!("--relay-congestion must be relay, cubic, bbr or newreno");
    }
    plan.relay_congestion = args.relay_congestion.clone();
    plan.storage_cpu = args.storage_cpu;
    plan.standin = args.storage == "standin";
    plan.nic_offload = args.nic_offload;
    plan.client_args = args.client_arg.clone();
    plan.tcp_reference = args.tcp_reference;
    if let Some(name) = &args.data {
        plan.data = relay_tests::datasets::DataSet::ALL
            .into_iter()
            .find(|d| d.name() == name.as_str())
            .with_context(|| {
                format!("unknown --data {name:?} (logs, csv, fastq, sparse, random)")
            })?;
    }
    Ok(plan)
}

/// The workspace root: tests/wanbench/../..
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn existing(p: PathBuf, hint: &str) -> anyhow::Result<PathBuf> {
    if p.exists() {
        Ok(p)
    } else {
        bail!("{}: not found ({hint})", p.display())
    }
}

fn check_rclone(rclone: &Path) -> anyhow::Result<()> {
    let ok = std::process::Command::new(rclone)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        bail!(
            "{}: cannot run rclone (apt-get install rclone, or pass --rclone)",
            rclone.display()
        );
    }
    Ok(())
}

fn check_python(python: &Path) -> anyhow::Result<()> {
    let out = std::process::Command::new(python)
        .args(["-c", "import azure.storage.blob"])
        .output()
        .with_context(|| {
            format!(
                "{}: cannot run (make the venv: scripts/wanbench, or pass --python)",
                python.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "{}: azure-storage-blob is not importable (pip install -r tests/wanbench/requirements.txt)",
            python.display()
        );
    }
    Ok(())
}

/// results.json, summary.md (medians + every run) and goodput.svg.
/// Rewrites the card block of docs/BENCHMARKS.md of the
/// direction `rows` measured (upload or download).
fn write_cards(rows: &[Row]) -> anyhow::Result<()> {
    let kind = card::Kind::of(rows);
    let text = card::card(kind, rows);
    for doc in card::DOCS {
        let path = repo_root().join(doc);
        let old = std::fs::read_to_string(&path).with_context(|| format!("read {doc}"))?;
        let new = card::replace(kind, &old, &text).with_context(|| doc.to_string())?;
        card::check(kind, &new, &text).with_context(|| doc.to_string())?;
        std::fs::write(&path, new).with_context(|| format!("write {doc}"))?;
        eprintln!("wanbench: card rewritten in {doc}");
    }
    Ok(())
}

fn write_outputs(out: &Path, rows: &[Row], run: Option<(&Plan, Duration)>) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rows).context("encode rows")?;
    std::fs::write(out.join("results.json"), json + "\n").context("write results.json")?;
    let groups = summary::groups(rows);
    let mut md = String::from("# wanbench results\n\n");
    if let Some((plan, elapsed)) = run {
        md.push_str(&format!(
            "Repeats {}, cap {} s, workloads {} ({} data), relay QUIC controller {}{}{}{}; bench took {:.0} s.\n\n",
            plan.repeats,
            plan.cap.as_secs(),
            plan.workloads
                .iter()
                .map(|w| w.name())
                .collect::<Vec<_>>()
                .join(", "),
            plan.data.name(),
            plan.relay_congestion,
            if plan.loopback { ", loopback (clients in the cloud namespace)" } else { "" },
            plan.storage_delay
                .map(|d| format!(", {}", d.label()))
                .unwrap_or_default(),
            if plan.client_args.is_empty() {
                String::new()
            } else {
                format!(", relay-client `{}`", plan.client_args.join(" "))
            },
            elapsed.as_secs_f64()
        ));
    }
    md.push_str("## Medians\n\n");
    md.push_str(&summary::summary_table(&groups));
    let pairs = summary::small_vs_one(&groups);
    if !pairs.is_empty() {
        md.push_str("\n## Many files vs one file of the same bytes\n\n");
        md.push_str(&pairs);
    }
    let versus = versus::table(&groups);
    if !versus.is_empty() {
        md.push_str("\n## The relay against AzCopy\n\n");
        md.push_str(&versus);
    }
    let direct = summary::direct_table(rows);
    if !direct.is_empty() {
        md.push_str("\n## Direct upload beside plain TCP\n\n");
        md.push_str(&direct);
    }
    md.push_str(
        "\n† capped: at least one run hit the time cap; its time is the cap and its goodput is \
         estimated from the IP bytes the link delivered (× 1448/1500), since storage only sees \
         whole blocks.\n\n## Every run\n\n",
    );
    md.push_str(&summary::runs_table(rows));
    std::fs::write(out.join("summary.md"), md).context("write summary.md")?;
    plot::write(&groups, &out.join("goodput.svg"))?;
    print!("{}", summary::summary_table(&groups));
    print!("{}", summary::small_vs_one(&groups));
    print!("{}", versus::table(&groups));
    Ok(())
}
