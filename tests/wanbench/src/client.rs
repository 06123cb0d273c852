//! The site side: the command line of each method and what its JSON says.
//!
//! relay-client (relay and --direct) and the Python SDK script print
//! different JSON; both are read into one `ClientReport`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use relay_tests::{DEV_ACCOUNT, DEV_KEY};
use serde_json::Value;

use crate::cloud::{Cloud, READER_TOKEN, TOKEN, strip_proxies};
use crate::plan::Method;

/// Programs the site side runs.
pub struct SiteBins {
    pub relay_client: PathBuf,
    pub python: PathBuf,
    pub upload_py: PathBuf,
    /// py/download.py, for the `python-sdk-dl` row.
    pub download_py: PathBuf,
    /// rclone (Debian package), for the `rclone` row.
    pub rclone: PathBuf,
    /// AzCopy (the pinned npm package), for the `azcopy-*` rows.
    pub azcopy: PathBuf,
}

/// Where one run writes and what it sends.
pub struct RunSpec<'a> {
    pub method: Method,
    pub files: &'a [PathBuf],
    pub container: &'a str,
    /// Blob name prefix of this run (a fresh one per run).
    pub prefix: &'a str,
    pub storage_url: &'a str,
    /// Container SAS URL (rclone).
    pub sas_url: &'a str,
    /// The directory holding exactly `files` (rclone copies a directory).
    pub dir: &'a Path,
    /// rclone's (empty) config file: it reads its remote from the environment.
    pub rclone_config: &'a Path,
    /// AzCopy's container SAS for uploads (write) and downloads (read, list).
    pub azcopy_sas_up: &'a str,
    pub azcopy_sas_down: &'a str,
    /// AzCopy's HOME, log and plan folders for this run.
    pub scratch: &'a Path,
    pub relay_congestion: &'a str,
    /// Extra arguments for relay-client (relay and direct rows).
    pub client_args: &'a [String],
    /// relay-client's path cache for this profile (warm start between runs).
    pub path_cache: &'a Path,
    /// Download rows: where the files come back to (`--to`).
    pub to_dir: &'a Path,
    pub stdout: &'a Path,
    pub stderr: &'a Path,
}

/// The command for `spec` (not yet placed in a namespace).
pub fn command(bins: &SiteBins, cloud: &Cloud, spec: &RunSpec) -> anyhow::Result<Command> {
    let mut cmd;
    match spec.method {
        Method::Relay
        | Method::RelayCubic
        | Method::RelayCold
        | Method::RelayColdPlain
        | Method::RelayOff => {
            let cc = if spec.method == Method::RelayCubic {
                "cubic"
            } else {
                spec.relay_congestion
            };
            cmd = Command::new(&bins.relay_client);
            cmd.arg("upload")
                .args(spec.files)
                .arg("--relay")
                .arg(cloud.relay_addr.to_string())
                .args(["--relay-cert-sha256", &cloud.fingerprint])
                .args(["--congestion", cc])
                .env("RELAY_TOKEN", TOKEN);
            cmd.arg("--path-cache").arg(spec.path_cache);
            if !matches!(spec.method, Method::Relay | Method::RelayOff) {
                cmd.arg("--no-warm-start");
            }
            if spec.method == Method::RelayOff {
                cmd.args(["--compress", "off"]);
            }
            if spec.method == Method::RelayColdPlain {
                cmd.arg("--no-probe-train");
            }
        }
        Method::DirectCubic | Method::DirectBbr | Method::DirectBbr32 => {
            cmd = Command::new(&bins.relay_client);
            cmd.arg("upload")
                .args(spec.files)
                .arg("--direct")
                .args(["--storage-url", spec.storage_url])
                .env("RELAY_ACCOUNT_KEY", DEV_KEY);
            // direct-cubic and direct-bbr size themselves as a user's upload
            // does (block size and requests in flight from the measured path).
            if spec.method == Method::DirectBbr32 {
                cmd.args(["--connections", "32"]);
            }
        }
        Method::PythonSdk | Method::PythonSdkBbr | Method::PythonSdk32 | Method::PythonSdk64 => {
            cmd = Command::new(&bins.python);
            cmd.arg(&bins.upload_py)
                .args(["--endpoint", spec.storage_url])
                .args(["--account", DEV_ACCOUNT])
                .args(["--key", DEV_KEY])
                .args(["--container", spec.container])
                .arg(format!("--prefix={}/", spec.prefix))
                .arg(format!("--parallel={}", spec.method.python_parallel()))
                .args(["--max-concurrency", "8"])
                .args(spec.files);
            return finish(cmd, spec);
        }
        Method::RelayDl | Method::RelayDlOff | Method::DirectDlCubic | Method::DirectDlBbr => {
            // The run's prefix as the source: its files land in
            // TO_DIR/PREFIX/, named as they were uploaded. The extra client
            // arguments are upload flags, so they are not passed here.
            cmd = Command::new(&bins.relay_client);
            cmd.arg("download")
                .arg(format!("{}/{}", spec.container, spec.prefix))
                .arg("--to")
                .arg(spec.to_dir);
            if spec.method == Method::RelayDlOff {
                cmd.args(["--compress", "off"]);
            }
            if matches!(spec.method, Method::RelayDl | Method::RelayDlOff) {
                cmd.arg("--relay")
                    .arg(cloud.relay_addr.to_string())
                    .args(["--relay-cert-sha256", &cloud.fingerprint])
                    .args(["--congestion", spec.relay_congestion])
                    .arg("--path-cache")
                    .arg(spec.path_cache)
                    .env("RELAY_TOKEN", READER_TOKEN);
            } else {
                cmd.arg("--direct")
                    .args(["--storage-url", spec.storage_url])
                    .env("RELAY_ACCOUNT_KEY", DEV_KEY);
            }
            cmd.args(["--json", "--quiet"]);
            return finish(cmd, spec);
        }
        Method::PythonSdkDl => {
            // Blob PREFIX/NAME to TO_DIR/PREFIX/NAME, as relay-client's
            // download of the prefix places it.
            cmd = Command::new(&bins.python);
            cmd.arg(&bins.download_py)
                .args(["--endpoint", spec.storage_url])
                .args(["--account", DEV_ACCOUNT])
                .args(["--key", DEV_KEY])
                .args(["--container", spec.container])
                .arg(format!("--prefix={}/", spec.prefix))
                .arg("--to")
                .arg(spec.to_dir.join(spec.prefix))
                .arg(format!("--parallel={}", spec.method.python_parallel()))
                .args(["--max-concurrency", "8"])
                .args(spec.files.iter().filter_map(|p| p.file_name()));
            return finish(cmd, spec);
        }
        m @ (Method::AzcopyCubic
        | Method::AzcopyBbr
        | Method::AzcopyTunedCubic
        | Method::AzcopyTunedBbr
        | Method::AzcopyDlCubic
        | Method::AzcopyDlBbr
        | Method::AzcopyTunedDlCubic
        | Method::AzcopyTunedDlBbr) => {
            let tuning = m
                .azcopy()
                .unwrap_or(relay_client::bench::azcopy::Tuning::Defaults);
            let sas = if m.is_download() {
                spec.azcopy_sas_down
            } else {
                spec.azcopy_sas_up
            };
            let remote = format!("{}/{}/{}", spec.storage_url, spec.container, spec.prefix);
            let copy = crate::azcopy::copy(m, spec.files, spec.dir, &remote, sas, spec.to_dir);
            let mut cmd = crate::azcopy::command(&bins.azcopy, &copy, tuning, spec.scratch);
            strip_proxies(&mut cmd);
            cmd.stdout(file(spec.stdout)?).stderr(file(spec.stderr)?);
            // Open and silent until it exits: at EOF AzCopy spins a core.
            cmd.stdin(Stdio::piped());
            return Ok(cmd);
        }
        Method::Rclone => {
            // `copy DIR :azureblob:CONTAINER/PREFIX`: blob names = PREFIX/base
            // name, as for the other methods. Defaults otherwise (files up to
            // 256 MiB as one Put Blob, larger ones in 4 MiB blocks, 16 at
            // once), with 32 files at once for many small files.
            cmd = Command::new(&bins.rclone);
            cmd.arg("copy")
                .arg(spec.dir)
                .arg(format!(":azureblob:{}/{}", spec.container, spec.prefix))
                .args(["--transfers", "32", "--stats", "0", "-q"])
                .env("RCLONE_CONFIG", spec.rclone_config)
                .env("RCLONE_AZUREBLOB_SAS_URL", spec.sas_url);
            return finish(cmd, spec);
        }
    }
    cmd.arg("--to")
        .arg(format!("{}/{}", spec.container, spec.prefix))
        .args(["--json", "--quiet"])
        .args(spec.client_args);
    finish(cmd, spec)
}

fn finish(mut cmd: Command, spec: &RunSpec) -> anyhow::Result<Command> {
    strip_proxies(&mut cmd);
    cmd.stdin(Stdio::null())
        .stdout(file(spec.stdout)?)
        .stderr(file(spec.stderr)?);
    Ok(cmd)
}

/// rclone prints no JSON summary: a run that exited 0 claims every file, and
/// the bench's download check decides. Its time is the process's wall time
/// (start to exit, ~50 ms more than the transfer).
pub fn rclone_report(
    exit_code: Option<i32>,
    wall_s: f64,
    files: &[PathBuf],
    prefix: &str,
    bytes: u64,
) -> ClientReport {
    let ok = exit_code == Some(0);
    ClientReport {
        ok,
        seconds: wall_s,
        bytes: if ok { bytes } else { 0 },
        retries: 0,
        reattempts: 0,
        warm_start: None,
        storage_requests: None,
        abandoned: None,
        direct_sizing: None,
        files: files
            .iter()
            .map(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                FileOutcome {
                    path: p.display().to_string(),
                    blob: format!("{prefix}/{name}"),
                    committed: ok,
                    sha256: None,
                }
            })
            .collect(),
    }
}

fn file(p: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::File::create(p).with_context(|| format!("create {}", p.display()))
}

/// One file as the client reported it.
#[derive(Clone, Debug)]
pub struct FileOutcome {
    pub path: String,
    pub blob: String,
    pub committed: bool,
    /// The client's own end-to-end hash (relay-client only).
    pub sha256: Option<String>,
}

/// A client's summary, whichever client it was.
#[derive(Clone, Debug)]
pub struct ClientReport {
    pub ok: bool,
    /// The client's own clock: start to the last verified commit.
    pub seconds: f64,
    pub bytes: u64,
    pub retries: u64,
    /// Attempts beyond the first, summed over files (relay-client restarts a
    /// file after e.g. a lost connection; the Python SDK has no such count).
    pub reattempts: u64,
    /// relay-client in relay mode: whether the connection started warm.
    pub warm_start: Option<bool>,
    /// Requests to storage: relay-client's per-file counts (the relay's, in
    /// relay mode), the Python SDK's request hook; None for rclone.
    pub storage_requests: Option<u64>,
    /// relay-client --direct: (given up, given up while moving), over files.
    pub abandoned: Option<(u64, u64)>,
    /// relay-client --direct: (block size, requests in flight per file).
    pub direct_sizing: Option<(u64, u64)>,
    pub files: Vec<FileOutcome>,
}

/// Read the JSON a method printed.
pub fn parse(method: Method, stdout: &str) -> anyhow::Result<ClientReport> {
    let v: Value = serde_json::from_str(stdout.trim()).context("client printed no JSON summary")?;
    let files = v
        .get("files")
        .and_then(Value::as_array)
        .context("JSON has no files[]")?;
    let text = |f: &Value, k: &str| f.get(k).and_then(Value::as_str).map(str::to_string);
    let outcomes: Vec<FileOutcome> = files
        .iter()
        .map(|f| FileOutcome {
            path: text(f, "path").unwrap_or_default(),
            blob: text(f, "blob").unwrap_or_default(),
            // Upload rows commit their files, download rows download them.
            committed: matches!(
                text(f, "status").as_deref(),
                Some("committed" | "downloaded")
            ),
            sha256: text(f, "sha256"),
        })
        .collect();
    let reattempts = files
        .iter()
        .filter_map(|f| f.get("attempts").and_then(Value::as_u64))
        .map(|a| a.saturating_sub(1))
        .sum();
    let (seconds, bytes, retries, requests) = if method.is_python() {
        (
            v.get("seconds").and_then(Value::as_f64),
            v.get("bytes").and_then(Value::as_u64),
            v.get("retries").and_then(Value::as_u64).unwrap_or(0),
            v.get("requests").and_then(Value::as_u64),
        )
    } else {
        let t = v.get("totals").context("JSON has no totals")?;
        let retries = files
            .iter()
            .filter_map(|f| f.get("retries").and_then(Value::as_u64))
            .sum();
        let requests = files
            .iter()
            .map(|f| f.get("storage_requests").and_then(Value::as_u64))
            .sum::<Option<u64>>();
        (
            t.get("seconds").and_then(Value::as_f64),
            t.get("bytes").and_then(Value::as_u64),
            retries,
            requests,
        )
    };
    let abandoned = files
        .iter()
        .map(|f| {
            let a = f.get("abandoned")?;
            let n = |k: &str| a.get(k).and_then(Value::as_u64).unwrap_or(0);
            Some((n("stalled") + n("unanswered"), n("while_moving")))
        })
        .try_fold((0, 0), |acc: (u64, u64), x| {
            x.map(|(a, m)| (acc.0 + a, acc.1 + m))
        })
        .filter(|_| !files.is_empty());
    let direct_sizing = v.get("direct").and_then(|d| {
        Some((
            d.get("block_size_bytes")?.as_u64()?,
            d.get("connections")?.as_u64()?,
        ))
    });
    Ok(ClientReport {
        ok: v.get("ok").and_then(Value::as_bool).unwrap_or(false),
        seconds: seconds.context("JSON has no seconds")?,
        bytes: bytes.context("JSON has no bytes")?,
        retries,
        reattempts,
        warm_start: v.get("warm_start").and_then(Value::as_bool),
        storage_requests: requests,
        abandoned,
        direct_sizing,
        files: outcomes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_relay_client_and_python_summaries() {
        let rc = r#"{"ok":true,"mode":"direct","files":[{"path":"/t/a.bin","container":"c",
            "blob":"p/a.bin","status":"committed","bytes":5,"sha256":"ab","retries":2,"attempts":3,
            "storage_requests":2,"abandoned":{"stalled":1,"unanswered":0,"while_moving":0}}],
            "totals":{"files":1,"committed":1,"failed":0,"bytes":5,"seconds":1.5,"mbit_per_s":0.1},
            "direct":{"block_size_bytes":8388608,"connections":32,"fell_back":false}}"#;
        let r = parse(Method::DirectBbr, rc).expect("parses");
        assert!(r.ok);
        assert_eq!(
            (r.seconds, r.bytes, r.retries, r.reattempts),
            (1.5, 5, 2, 2)
        );
        assert_eq!(r.files[0].sha256.as_deref(), Some("ab"));
        assert_eq!(r.storage_requests, Some(2));
        assert_eq!(r.abandoned, Some((1, 0)));
        assert_eq!(r.direct_sizing, Some((8 << 20, 32)));

        let py = r#"{"ok":false,"seconds":2.0,"bytes":0,"retries":1,"requests":3,
            "files":[{"path":"a","blob":"p/a","bytes":5,"status":"failed","error":"x"}]}"#;
        let r = parse(Method::PythonSdk, py).expect("parses");
        assert!(!r.ok && !r.files[0].committed);
        assert_eq!(r.storage_requests, Some(3));
        assert!(parse(Method::Relay, "not json").is_err());
    }
}
