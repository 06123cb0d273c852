//! Sync benchmark (not a timed test): a tree of small files synced through a
//! local relay into Azurite once, then again unchanged, beside a bare listing
//! of the same prefix; the same with `--direct` (straight to storage); and,
//! where AzCopy is installed, `azcopy sync` of the same tree both times.
//! `--storage standin` puts the stand-in storage (`relay_tests::standin`, in
//! memory, its listing a range scan) in Azurite's place: Azurite slows to
//! some 18 files a second past 35,000 blobs, so a million cannot be measured
//! on it. AzCopy runs only against Azurite (it needs more of the API than the
//! stand-in speaks). Every run is a child process measured from outside:
//! wall time, CPU, peak RSS (`wait4`), and the bytes it read (`/proc/PID/io`
//! `rchar`, read while the child is a zombie, so nothing after it is lost).
//! The relay's storage requests (its metrics) say what each run cost storage.
//!
//! `cargo run --release -p relay-tests --bin syncbench -- --files 100000 [--files 1000000] [--no-azcopy] [--storage azurite|standin] [--keep]`
//!
//! Loopback only: the storage and the relay are this process's (Azurite in
//! memory, or the stand-in as a child process).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relay_proto::protocol::Secret;
use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{EntraSource, StorageAccess};
use relay_tests::azcopy;
use relay_tests::azurite::shared_azurite;
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use relay_tests::{DEV_ACCOUNT, DEV_KEY, binary};

struct Args {
    files: Vec<u64>,
    azcopy: bool,
    keep: bool,
    standin: bool,
    /// `--text-report`: sync without `--json` (whose summary lists every
    /// file), to tell the report's memory from the sync's.
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        files: Vec::new(),
        azcopy: true,
        keep: false,
        json: true,
        standin: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--files" => {
                let v = it.next().ok_or("--files needs a number")?;
                a.files
                    .push(v.parse().map_err(|_| format!("--files: {v}"))?);
            }
            "--no-azcopy" => a.azcopy = false,
            "--keep" => a.keep = true,
            "--text-report" => a.json = false,
            "--storage" => match it.next().as_deref() {
                Some("azurite") => a.standin = false,
                Some("standin") => a.standin = true,
                other => return Err(format!("--storage azurite|standin, not {other:?}")),
            },
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.files.is_empty() {
        a.files.push(100_000);
    }
    Ok(a)
}

/// One child process, measured from outside.
struct Measured {
    wall: Duration,
    cpu: Duration,
    max_rss_kib: u64,
    rchar: u64,
    exit: i32,
}

/// Runs `cmd` (stdout and stderr to `log`), and measures it.
// The child is reaped by `wait4` (for its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn measure(mut cmd: Command, log: &Path) -> Measured {
    let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let start = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    // Wait for the exit without reaping: the zombie's /proc/PID/io holds the
    // totals of every thread it had.
    // SAFETY: a zeroed siginfo_t is valid for waitid to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; info is a valid out-pointer.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        )
    };
    assert_eq!(r, 0, "waitid: {}", std::io::Error::last_os_error());
    let wall = start.elapsed();
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let rchar = io
        .lines()
        .find_map(|l| l.strip_prefix("rchar: ")?.trim().parse().ok())
        .unwrap_or(0);
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our unreaped child; both out-pointers are valid.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Measured {
        wall,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss as u64,
        rchar,
        exit: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        },
    }
}

/// `n` files of 0–4 KiB, 1,000 to a folder, the same bytes on every run.
fn make_tree(root: &Path, n: u64) -> u64 {
    let mut total = 0;
    for i in 0..n {
        let dir = root.join(format!("d{:04}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        }
        let size = (i.wrapping_mul(2_654_435_761) % 4097) as usize;
        let body: Vec<u8> = (0..size)
            .map(|k| (i as usize).wrapping_mul(31).wrapping_add(k * 7) as u8)
            .collect();
        std::fs::write(dir.join(format!("f{i:07}.bin")), &body).unwrap_or_else(|e| panic!("{e}"));
        total += size as u64;
    }
    total
}

/// The storage a size runs against: Azurite (shared, in this process's
/// care) or a stand-in child process of this bench, stopped at the end.
struct Target {
    url: String,
    standin: Option<std::process::Child>,
}

impl Target {
    fn start(standin: bool) -> Target {
        if !standin {
            return Target {
                url: shared_azurite().url(),
                standin: None,
            };
        }
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = probe.local_addr().unwrap_or_else(|e| panic!("{e}"));
        drop(probe);
        let child = Command::new(binary("standin-storage"))
            .args(["--listen", &addr.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("standin-storage: {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "the stand-in did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Target {
            url: format!("http://{addr}/{DEV_ACCOUNT}"),
            standin: Some(child),
        }
    }

    fn storage(&self) -> Storage {
        let access = StorageAccess::resolve(
            &self.url,
            Some(&Secret(DEV_KEY.into())),
            EntraSource::default(),
        )
        .unwrap_or_else(|e| panic!("storage access: {e}"));
        Storage::new(access, &WriterOptions::default()).unwrap_or_else(|e| panic!("storage: {e}"))
    }

    fn stop(mut self) {
        if let Some(child) = self.standin.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Bench {
    relay: RelayHandle,
    container: String,
    scratch: PathBuf,
    storage_url: String,
    json: bool,
}

impl Bench {
    fn connection(&self) -> Vec<String> {
        vec![
            "--relay".into(),
            self.relay.addr.to_string(),
            "--relay-cert-sha256".into(),
            self.relay.fingerprint.clone(),
            "--token".into(),
            LIMITED_TOKEN.into(),
        ]
    }

    fn direct(&self) -> Vec<String> {
        vec![
            "--direct".into(),
            "--storage-url".into(),
            self.storage_url.clone(),
            "--account-key".into(),
            DEV_KEY.into(),
        ]
    }

    fn client(&self, args: &[String], direct: bool) -> Command {
        let mut cmd = Command::new(binary("relay-client"));
        cmd.args(args);
        if direct {
            cmd.args(self.direct());
        } else {
            cmd.args(self.connection());
        }
        for v in ["RELAY_TOKEN", "RELAY_CONFIG", "RELAY_PROFILE"] {
            cmd.env_remove(v);
        }
        cmd
    }

    fn requests(&self) -> u64 {
        self.relay
            .metric("blob_relay_storage_requests_total")
            .unwrap_or(0)
    }

    /// A client run and the storage requests the relay made for it.
    fn run(&self, name: &str, args: &[String]) -> (Measured, u64) {
        let before = self.requests();
        let m = measure(
            self.client(args, false),
            &self.scratch.join(format!("{name}.log")),
        );
        (m, self.requests() - before)
    }

    /// The files (not folders) below `data` that a run of `args` opened (`strace -f -e
    /// trace=open,openat`), or `None` when strace could not run it.
    fn files_opened(&self, args: &[String], data: &Path) -> Option<usize> {
        let trace = self.scratch.join("strace.txt");
        let client = self.client(args, false);
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-e", "trace=open,openat", "-o"])
            .arg(&trace)
            .arg(client.get_program())
            .args(client.get_args());
        for v in ["RELAY_TOKEN", "RELAY_CONFIG", "RELAY_PROFILE"] {
            cmd.env_remove(v);
        }
        let m = measure(cmd, &self.scratch.join("sync-strace.log"));
        let text = std::fs::read_to_string(&trace).ok()?;
        let below = format!("\"{}/", data.display());
        // The walk opens each folder (O_DIRECTORY); a file's content needs
        // an open without it.
        let file = |l: &&str| l.contains(&below) && !l.contains("O_DIRECTORY");
        (m.exit == 0).then(|| text.lines().filter(file).count())
    }

    /// A `--direct` run: storage's requests are not the relay's to count.
    fn run_direct(&self, name: &str, args: &[String]) -> Measured {
        measure(
            self.client(args, true),
            &self.scratch.join(format!("{name}.log")),
        )
    }

    /// `sync SRC DEST` with the index of `tag`'s runs, and `--json` unless
    /// the bench was asked for the text report.
    fn sync_args(&self, tag: &str, src: &str, dest: &str) -> Vec<String> {
        let index = self.scratch.join(format!("index-{tag}.sqlite"));
        let mut v: Vec<String> = vec![
            "sync".into(),
            src.into(),
            dest.into(),
            "--index".into(),
            index.display().to_string(),
        ];
        if self.json {
            v.push("--json".into());
        }
        v
    }

    /// Sync `src` to `dest` twice with the index `index`, then list `dest`:
    /// (first, unchanged, listing).
    fn three(
        &self,
        tag: &str,
        src: &str,
        dest: &str,
        direct: bool,
    ) -> [(Measured, Option<u64>); 3] {
        let sync = self.sync_args(tag, src, dest);
        let ls: Vec<String> = vec!["ls".into(), dest.into(), "--json".into()];
        let one = |name: &str, args: &[String]| {
            let name = format!("{tag}-{name}");
            if direct {
                (self.run_direct(&name, args), None)
            } else {
                let (m, r) = self.run(&name, args);
                (m, Some(r))
            }
        };
        [
            one("sync-first", &sync),
            one("sync-again", &sync),
            one("ls", &ls),
        ]
    }

    fn azcopy_sync(&self, bin: &Path, name: &str, data: &Path) -> Measured {
        let sas = relay_storage::sas::container_sas(
            DEV_ACCOUNT,
            DEV_KEY,
            &self.container,
            "racwdl",
            time::OffsetDateTime::now_utc(),
            time::Duration::hours(4),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let url = format!("{}/{}/az?{sas}", shared_azurite().url(), self.container);
        let mut cmd = Command::new(bin);
        cmd.args([
            "sync",
            &format!("{}/", data.display()),
            &url,
            "--recursive=true",
            "--from-to",
            "LocalBlob",
        ])
        .env("AZCOPY_LOG_LOCATION", self.scratch.join("az-logs"))
        .env("AZCOPY_JOB_PLAN_LOCATION", self.scratch.join("az-plans"));
        measure(cmd, &self.scratch.join(format!("{name}.log")))
    }
}

fn row(name: &str, m: &Measured, requests: Option<u64>) {
    let req = requests.map_or("-".into(), |r| r.to_string());
    println!(
        "| {name} | {:.1} | {:.1} | {:.0} | {:.1} | {req} | {} |",
        m.wall.as_secs_f64(),
        m.cpu.as_secs_f64(),
        m.max_rss_kib as f64 / 1024.0,
        m.rchar as f64 / (1 << 20) as f64,
        m.exit
    );
}

async fn one_size(args: &Args, n: u64) {
    let scratch = std::env::temp_dir().join(format!("syncbench-{n}-{}", std::process::id()));
    let data = scratch.join("data");
    let started = Instant::now();
    let bytes = make_tree(&data, n);
    eprintln!(
        "== {n} files, {bytes} bytes, made in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let target = Target::start(args.standin);
    let storage = target.storage();
    let container = relay_tests::unique_container("syncbench");
    storage
        .ensure_container(&container)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The limited token may read and write the container: a sync lists it.
    let relay = RelayHandle::start(
        storage,
        RelayOptions {
            limited_to: format!("{container}:rw"),
            ..RelayOptions::default()
        },
    );
    let b = Bench {
        relay,
        container,
        scratch: scratch.clone(),
        storage_url: target.url.clone(),
        json: args.json,
    };
    let src = format!("{}/", data.display());
    let [first, again, list] = b.three("relay", &src, &format!("{}/p", b.container), false);
    let [dfirst, dagain, dlist] = b.three("direct", &src, &format!("{}/d", b.container), true);
    // What rchar counts is every read, the index's and the binary's own
    // included: a third, unchanged run under strace says whether any file
    // of the tree was opened at all (not timed).
    let opened = b.files_opened(
        &b.sync_args("relay", &src, &format!("{}/p", b.container)),
        &data,
    );

    report(
        args,
        &b,
        &data,
        n,
        bytes,
        [first, again, list, dfirst, dagain, dlist],
    );
    match opened {
        Some(n) => println!("unchanged relay re-run under strace: {n} files of the tree opened"),
        None => println!("unchanged relay re-run under strace: not run (strace missing?)"),
    }
    b.relay.stop().await;
    target.stop();
    if !args.keep {
        let _ = std::fs::remove_dir_all(&scratch);
    } else {
        eprintln!("kept {}", scratch.display());
    }
}

/// The table of one size's runs, the AzCopy rows (Azurite only) and the ratios.
fn report(
    args: &Args,
    b: &Bench,
    data: &Path,
    n: u64,
    bytes: u64,
    runs: [(Measured, Option<u64>); 6],
) {
    let [first, again, list, dfirst, dagain, dlist] = runs;
    let storage_name = if args.standin {
        "the stand-in storage (relay_tests::standin, in memory)"
    } else {
        "Azurite (in memory)"
    };
    println!(
        "\n### {n} files of 0–4 KiB ({bytes} bytes), one folder per 1,000, into {storage_name}\n"
    );
    println!(
        "| run | wall s | CPU s | peak RSS MiB | read MiB (rchar) | storage requests | exit |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    row("relay sync, first", &first.0, first.1);
    row("relay sync, unchanged", &again.0, again.1);
    row("relay ls (bare listing)", &list.0, list.1);
    row("direct sync, first", &dfirst.0, None);
    row("direct sync, unchanged", &dagain.0, None);
    row("direct ls (bare listing)", &dlist.0, None);
    let mut az = None;
    if args.standin {
        println!(
            "\nAzCopy not run: it runs only against Azurite (it needs more of the API than the stand-in speaks)."
        );
    } else if args.azcopy {
        match azcopy::find() {
            Ok(bin) => {
                let a1 = b.azcopy_sync(&bin, "azcopy-first", data);
                let a2 = b.azcopy_sync(&bin, "azcopy-again", data);
                row("azcopy sync, first", &a1, None);
                row("azcopy sync, unchanged", &a2, None);
                az = Some(a2);
            }
            Err(e) => println!("\nAzCopy not run: {e}"),
        }
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    let again_req = again.1.unwrap_or(0);
    let list_req = list.1.unwrap_or(0);
    println!(
        "\nunchanged re-run / bare listing (wall): relay {:.2}, direct {:.2}; re-run read {} (relay) and {} (direct) bytes of {bytes}; \
         relay re-run storage requests {again_req} (listing alone: {list_req})",
        ratio(again.0.wall, list.0.wall),
        ratio(dagain.0.wall, dlist.0.wall),
        again.0.rchar,
        dagain.0.rchar,
    );
    if let Some(a2) = az {
        println!(
            "unchanged re-run, relay / azcopy: wall {:.2}, peak RSS {:.2}",
            ratio(again.0.wall, a2.wall),
            again.0.max_rss_kib as f64 / a2.max_rss_kib.max(1) as f64
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("syncbench: {e}");
        std::process::exit(2)
    });
    eprintln!("relay-client: {}", binary("relay-client").display());
    for n in args.files.clone() {
        one_size(&args, n).await;
    }
}
