//! `relay-client bench`: the comparative run as a product command (like `azcopy
//! bench`). It generates random files (large and small, sizes and counts from
//! flags) in a temporary directory, or takes a user's own (`--from DIR`: then
//! the relay runs with and without compression, to show what it buys on that
//! data), uploads them through the relay and, when
//! storage credentials are given, straight to storage (direct mode with N
//! connections), alternating which goes first from run to run, verifies every
//! blob against the SHA-256 of what it generated, deletes what it wrote unless
//! `--keep`, and prints a table (or `--json`). Each upload is the real `upload`
//! command, built from the same flags a user would type. `--download` measures
//! the other direction (`download.rs`). When AzCopy is there (`--azcopy`, or
//! on PATH) and a SAS can be had, it runs too, on the same files, verified
//! alike (`with_azcopy.rs`); every row reports the CPU it cost per GiB.

pub mod azcopy;
mod cpu;
mod download;
mod files;
mod table;
mod with_azcopy;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use relay_proto::protocol::Secret;
use relay_storage::account::{ClientBuildError, Storage};
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{CredentialError, EntraSource, EntraSourceError, StorageAccess};

use crate::cli::{BenchArgs, Cli, Command};
use crate::ui::report::{Status, Summary};
use files::{Generated, Shape};
pub use table::{AzcopyNote, Direction, Method, Report, Row};

/// Why the bench could not run at all (a failed upload is a row, not this).
#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("cannot generate files in {}: {source}", dir.display())]
    Generate {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Entra(#[from] EntraSourceError),
    #[error(transparent)]
    StorageAccess(#[from] CredentialError),
    #[error(transparent)]
    HttpClient(#[from] ClientBuildError),
    /// `--download`: the files could not be put in storage to be read back.
    #[error("cannot put the files in storage to download them: {0}")]
    Stage(String),
    /// `--azcopy` was given and cannot run.
    #[error("--azcopy: {0}")]
    Azcopy(String),
}

/// Runs the bench; the exit status is 0 only if every run verified.
pub fn main(args: BenchArgs, rt: &tokio::runtime::Runtime) -> ExitCode {
    match rt.block_on(run(&args)) {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => eprintln!("relay-client: cannot encode the report: {e}"),
                }
            } else {
                print!("{}", table::render_text(&report));
            }
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("relay-client: bench: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &BenchArgs) -> Result<Report, BenchError> {
    let (container, prefix) = args
        .to
        .split_once('/')
        .map_or((args.to.as_str(), ""), |(c, p)| (c, p.trim_matches('/')));
    let stamp = unix_seconds();
    let base = run_prefix(prefix, stamp);
    // What can refuse to start does so before any file is written.
    let storage = args
        .storage_url
        .as_deref()
        .map(|u| storage(u, args))
        .transpose()?;
    let (azcopy, mut azcopy_note) = with_azcopy::prepare(args)
        .await
        .map_err(BenchError::Azcopy)?;
    let own_dir = args.workdir.is_none();
    let dir = args.workdir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("blob-relay-bench-{}-{stamp}", std::process::id()))
    });
    // Generated files live in a folder of their own, so that AzCopy can be
    // given the folder's contents (the work folder also holds the path cache).
    let data = dir.join(files::DATA_DIR);
    let (generated, paths) = make_files(args, &dir, &data)?;
    // The rows, and the blob prefixes the runs wrote (each holds every file).
    let (rows, written) = if args.download {
        let staged = format!("{container}/{base}/{}", files::STAGED);
        let others = download::Others {
            direct: storage.is_some(),
            azcopy: azcopy.as_ref(),
            note: &mut azcopy_note,
            storage: storage.as_ref(),
        };
        let result = download::runs(args, &dir, &paths, &generated, &staged, others).await;
        let written = vec![staged];
        match result {
            Ok(rows) => (rows, written),
            Err(e) => {
                if let (Some(s), false) = (&storage, args.keep) {
                    delete(s, container, &written, &generated).await;
                }
                if own_dir {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                return Err(e);
            }
        }
    } else {
        let uploads = Uploads {
            args,
            dir: &dir,
            data: &data,
            paths: &paths,
            files: &generated,
            storage: storage.as_ref(),
            azcopy: azcopy.as_ref(),
        };
        uploads.run(container, &base, &mut azcopy_note).await
    };
    let rtt_ms = probe_rtt(args).await;
    let deleted = match (&storage, args.keep) {
        (Some(s), false) => delete(s, container, &written, &generated).await,
        _ => 0,
    };
    if own_dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(Report {
        direction: Direction::of(args.download),
        direct_tcp_congestion: storage.as_ref().map(|_| tcp_congestion()),
        ratio_relay_azcopy: azcopy
            .as_ref()
            .and_then(|_| table::ratio(&rows, Method::Azcopy)),
        azcopy: azcopy_note,
        rtt_ms,
        deleted,
        kept: args.keep || storage.is_none(),
        ..Report::of(rows)
    })
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `PREFIX/bench-UNIXTIME` (or `bench-UNIXTIME` without a prefix): where
/// this bench's runs write.
fn run_prefix(prefix: &str, stamp: u64) -> String {
    [prefix, &format!("bench-{stamp}")]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/")
}

/// The files every run moves (generated into `data`, or `--from`'s), what
/// `upload` is given for them, and the work folder `dir` made.
fn make_files(
    args: &BenchArgs,
    dir: &std::path::Path,
    data: &std::path::Path,
) -> Result<(Vec<Generated>, Vec<PathBuf>), BenchError> {
    let shape = Shape {
        large_size: args.large_size,
        large_count: args.large_count,
        small_size: args.small_size,
        small_count: args.small_count,
    };
    let made = match &args.from {
        Some(from) => files::from_dir(from).map(|f| (f, vec![from.clone()])),
        None => files::generate(data, shape).map(|f| {
            let paths = files::upload_paths(data, &f);
            (f, paths)
        }),
    };
    let made = made.map_err(|source| BenchError::Generate {
        dir: args.from.clone().unwrap_or_else(|| dir.to_path_buf()),
        source,
    })?;
    // The bench's own path memory lives in its work directory.
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Generate {
        dir: dir.to_path_buf(),
        source,
    })?;
    Ok(made)
}

/// What the upload runs share.
struct Uploads<'a> {
    args: &'a BenchArgs,
    dir: &'a std::path::Path,
    /// The generated files' folder.
    data: &'a std::path::Path,
    /// What `upload` is given.
    paths: &'a [PathBuf],
    files: &'a [Generated],
    storage: Option<&'a Storage>,
    azcopy: Option<&'a with_azcopy::Azcopy>,
}

impl Uploads<'_> {
    /// Every method, `args.runs` times, in `order`: the rows, and the
    /// CONTAINER/PREFIX each run wrote.
    async fn run(
        &self,
        container: &str,
        base: &str,
        note: &mut Option<AzcopyNote>,
    ) -> (Vec<Row>, Vec<String>) {
        let (args, files) = (self.args, self.files);
        let (mut rows, mut written) = (Vec::new(), Vec::new());
        for run in 1..=args.runs {
            let direct = self.storage.is_some();
            let methods = order(run, direct, args.from.is_some(), self.azcopy.is_some());
            for method in methods {
                let dest = format!("{container}/{base}/run-{run}/{}", method.name());
                let row = match (method, self.azcopy) {
                    (Method::Azcopy, Some(a)) => {
                        let copy = with_azcopy::Copy {
                            way: azcopy::Way::Upload,
                            local: args.from.as_deref().unwrap_or(self.data),
                            local_is_data_dir: args.from.is_none(),
                            remote: &dest,
                            files,
                            run,
                            work: self.dir,
                        };
                        with_azcopy::run_one(a, copy, self.storage, note).await
                    }
                    _ => {
                        let argv = upload_argv(args, self.dir, self.paths, method, &dest);
                        upload_once(argv, files, method, run, dest.clone()).await
                    }
                };
                rows.push(row);
                written.push(dest);
            }
        }
        (rows, written)
    }
}

/// The TCP congestion control the direct runs' connections got: the system's
/// default for new sockets (`setup::system_tcp_congestion`). Direct upload's
/// goodput on a lossy path depends on it far more than on anything of ours
/// (cubic vs bbr: docs/BENCHMARKS.md).
fn tcp_congestion() -> String {
    crate::commands::setup::system_tcp_congestion()
        .unwrap_or_else(|| "the system default (not readable here)".to_string())
}

/// Odd runs start with the relay, even ones end with it (direct upload, then
/// AzCopy, reversed), so no method always meets a cold (or warm) path and
/// storage first. With `--from` the relay also runs without compression,
/// next to the compressed run.
fn order(run: u32, direct: bool, from: bool, azcopy: bool) -> Vec<Method> {
    let mut relay = vec![Method::Relay];
    if from {
        relay.push(Method::RelayOff);
    }
    let mut others = Vec::new();
    if direct {
        others.push(Method::Direct);
    }
    if azcopy {
        others.push(Method::Azcopy);
    }
    if run % 2 == 1 {
        [relay, others].concat()
    } else {
        others.reverse();
        [others, relay].concat()
    }
}

fn storage(url: &str, args: &BenchArgs) -> Result<Storage, BenchError> {
    let entra: EntraSource = args.entra.parse()?;
    let key = args.account_key.clone().map(Secret);
    let access = StorageAccess::resolve(url, key.as_ref(), entra)?;
    Ok(Storage::new(access, &WriterOptions::default())?)
}

/// The `upload` command line for one run: what a user would type.
fn upload_argv(
    args: &BenchArgs,
    dir: &std::path::Path,
    paths: &[PathBuf],
    method: Method,
    dest: &str,
) -> Vec<String> {
    let mut v: Vec<String> = vec!["relay-client".into(), "upload".into()];
    v.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
    v.extend(["--to".into(), dest.into(), "--quiet".into()]);
    // The bench's own path memory: runs after the first start warm, as a
    // user's repeated uploads do; the user's cache is left alone.
    v.extend([
        "--path-cache".into(),
        dir.join("paths.json").to_string_lossy().into_owned(),
    ]);
    if method == Method::RelayOff {
        v.extend(["--compress".into(), "off".into()]);
    }
    v.extend(way_flags(args, method));
    if method == Method::Direct
        && let Some(n) = args.connections
    {
        v.extend(["--connections".into(), n.to_string()]);
    }
    v
}

async fn upload_once(
    argv: Vec<String>,
    files: &[Generated],
    method: Method,
    run: u32,
    dest: String,
) -> Row {
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let cpu0 = cpu::self_s();
    let t0 = Instant::now();
    let outcome = match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Upload(a),
            ..
        }) => {
            // Quiet, with every file's report kept (the bench verifies each one).
            let reporter = std::sync::Arc::new(crate::ui::progress::Reporter::with_every_report(
                crate::ui::progress::Output::Json,
                true,
            ));
            finished(
                crate::commands::upload::run(
                    *a,
                    reporter,
                    crate::run::interrupt::Interrupt::never(),
                )
                .await,
            )
        }
        Ok(_) => Err("not an upload".to_string()),
        Err(e) => Err(e.to_string()),
    };
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_s = cpu::self_s() - cpu0;
    let (verified, error) = match &outcome {
        Ok(summary) => match unverified(summary, files) {
            None => (true, None),
            Some(why) => (false, Some(why)),
        },
        Err(e) => (
            false,
            Some(e.lines().next().unwrap_or_default().to_string()),
        ),
    };
    Row {
        method,
        run,
        files: files.len(),
        bytes,
        seconds,
        goodput_mbit_s: if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds / 1e6
        } else {
            0.0
        },
        cpu_s,
        cpu_s_per_gib: cpu::per_gib(cpu_s, bytes),
        process_seconds: None,
        wire_bytes: outcome.as_ref().ok().and_then(wire_bytes),
        verified,
        destination: dest,
        quic: outcome.as_ref().ok().and_then(|s| s.quic),
        error,
    }
}

/// The bytes that carried the files' bytes, when some went compressed.
fn wire_bytes(summary: &Summary) -> Option<u64> {
    let any = summary
        .files
        .in_memory()
        .iter()
        .any(|f| f.wire_bytes.is_some());
    any.then(|| {
        summary
            .files
            .in_memory()
            .iter()
            .map(|f| f.wire_bytes.unwrap_or(f.bytes_sent))
            .sum()
    })
}

/// Why the run does not verify: a file not committed, or committed with a
/// SHA-256 other than the one of what was generated.
fn unverified(summary: &Summary, files: &[Generated]) -> Option<String> {
    for f in files {
        let report = summary
            .files
            .in_memory()
            .iter()
            .find(|r| r.blob.ends_with(&f.name));
        match report {
            None => return Some(format!("{}: not in the upload's report", f.name)),
            Some(r) if r.status != Status::Committed => {
                let why = r.error.as_ref().map_or("failed", |e| e.message.as_str());
                return Some(format!("{}: {why}", f.name));
            }
            Some(r) if r.sha256.as_deref() != Some(f.sha256.as_str()) => {
                return Some(format!(
                    "{}: committed SHA-256 differs from the generated file's",
                    f.name
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// The QUIC round-trip time to the relay, from a connection opened for it.
async fn probe_rtt(args: &BenchArgs) -> Option<f64> {
    use crate::relay::connect::{Connector, Trust};
    let trust = match (&args.relay_cert_sha256, &args.relay_ca) {
        (Some(fp), _) => Trust::Pinned(relay_transport::tls::parse_fingerprint(fp).ok()?),
        (None, Some(ca)) => Trust::CaFile(ca.clone()),
        (None, None) => return None,
    };
    let (addr, name) = crate::relay::connect::resolve(&args.relay).await.ok()?;
    let connector = Connector::new(&trust, &Default::default(), 1 << 20, addr.is_ipv6()).ok()?;
    let conn = connector
        .connect(addr, &name, Duration::from_secs(10))
        .await
        .ok()?;
    let rtt = conn.stats().path.rtt.as_secs_f64() * 1e3;
    connector.close(Some(&conn)).await;
    Some(rtt)
}

/// Deletes every blob the runs committed (each of `written`, CONTAINER/PREFIX,
/// holds every file); returns how many.
async fn delete(
    storage: &Storage,
    container: &str,
    written: &[String],
    files: &[Generated],
) -> usize {
    let mut deleted = 0;
    for dest in written {
        let prefix = dest.split_once('/').map_or("", |(_, p)| p);
        for f in files {
            let blob = format!("{prefix}/{}", f.name);
            let gone = match storage.writer(container, &blob) {
                Ok(w) => w.delete().await,
                Err(e) => Err(e),
            };
            match gone {
                Ok(()) => deleted += 1,
                Err(e) => eprintln!("relay-client: bench: cannot delete {container}/{blob}: {e}"),
            }
        }
    }
    deleted
}

/// A run's summary, or why there is none (the bench never interrupts a run).
pub(crate) fn finished<E: std::fmt::Display>(
    outcome: Result<crate::run::outcome::Outcome, E>,
) -> Result<Summary, String> {
    match outcome {
        Ok(crate::run::outcome::Outcome::Done(summary)) => Ok(summary),
        Ok(crate::run::outcome::Outcome::Interrupted { .. }) => Err("interrupted".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The flags that choose the way (through the relay, or `--direct` to
/// storage) and sign in, as a user would type them: the same for the
/// upload and the download runs.
pub(crate) fn way_flags(args: &BenchArgs, method: Method) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let mut opt = |flag: &str, value: &Option<String>| {
        if let Some(x) = value {
            v.extend([flag.to_string(), x.clone()]);
        }
    };
    match method {
        Method::Relay | Method::RelayOff => {
            opt("--token", &args.token);
            opt("--entra", &args.relay_entra);
            opt("--entra-scope", &args.entra_scope);
            opt("--relay-cert-sha256", &args.relay_cert_sha256);
            let ca = args
                .relay_ca
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned());
            opt("--relay-ca", &ca);
            v.extend([
                "--relay".into(),
                args.relay.clone(),
                "--relay-connections".into(),
                args.relay_connections.to_string(),
            ]);
        }
        // AzCopy runs are not `relay-client` command lines (with_azcopy.rs).
        Method::Direct | Method::Azcopy => {
            opt("--storage-url", &args.storage_url);
            opt("--account-key", &args.account_key);
            v.extend(["--direct".into(), "--entra".into(), args.entra.clone()]);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn bench_args(extra: &[&str]) -> BenchArgs {
        let mut argv = vec!["relay-client", "bench", "--relay", "h:4433", "--to", "cont"];
        argv.extend(extra);
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Bench(b),
                ..
            }) => *b,
            other => panic!("{other:?}"),
        }
    }

    fn upload_of(argv: Vec<String>) -> crate::commands::args::UploadArgs {
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Upload(a),
                ..
            }) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn relay_runs_sign_in_as_asked() {
        let dir = std::path::Path::new("/tmp");
        let one = [dir.join("large-0.bin")];
        let args = bench_args(&[
            "--relay-entra",
            "managed-identity",
            "--entra-scope",
            "api://r",
        ]);
        let relay = upload_of(upload_argv(&args, dir, &one, Method::Relay, "cont/x"));
        assert_eq!(
            relay.connection.entra,
            Some(crate::sign_in::Flow::ManagedIdentity)
        );
        assert_eq!(relay.connection.entra_scope.as_deref(), Some("api://r"));
        assert_eq!(relay.connection.token, None);
        // Without it, relay runs use the token, and direct runs keep --entra.
        let args = bench_args(&[
            "--token",
            "abcdefghijklmnopqrst",
            "--storage-url",
            "https://acct.blob.core.windows.net",
        ]);
        let relay = upload_of(upload_argv(&args, dir, &one, Method::Relay, "cont/x"));
        assert_eq!(relay.connection.entra, None);
        let direct = upload_of(upload_argv(&args, dir, &one, Method::Direct, "cont/x"));
        assert_eq!(direct.connection.entra, Some(crate::sign_in::Flow::Cli));
    }
}
