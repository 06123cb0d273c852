//! AzCopy rows (`azcopy-*`): AzCopy in the site namespace, run as a user runs
//! it (relay_client::bench::azcopy says how), with a container SAS signed from
//! the development key over the same emulated link as direct mode. Its time
//! ends where its log says the job ended (it looks at its job every 2 s and
//! exits only then); every blob (upload) or file (download) is then checked
//! by the bench as for every row.

use std::path::{Path, PathBuf};

use relay_client::bench::azcopy::{self, Tuning, Way, command, job};

use crate::client::{ClientReport, FileOutcome};
use crate::plan::Method;
use crate::row::AzcopyRun;

/// What one AzCopy row runs: source, destination and whether it recurses.
pub struct Copy {
    pub source: String,
    pub dest: String,
    pub recursive: bool,
    pub way: Way,
}

/// Upload: one file by its path to PREFIX/NAME, several as `DIR/*` into
/// PREFIX/ (the blobs named as every other row names them). Download: the
/// prefix into `to_dir` (AzCopy puts it in TO_DIR/PREFIX/, as relay-client).
pub fn copy(
    method: Method,
    files: &[PathBuf],
    dir: &Path,
    remote: &str,
    sas: &str,
    to_dir: &Path,
) -> Copy {
    if method.is_download() {
        return Copy {
            source: format!("{remote}?{sas}"),
            dest: to_dir.display().to_string(),
            recursive: true,
            way: Way::Download,
        };
    }
    match files {
        [one] => Copy {
            source: one.display().to_string(),
            dest: format!("{remote}/{}?{sas}", file_name(one)),
            recursive: false,
            way: Way::Upload,
        },
        _ => Copy {
            source: format!("{}/*", dir.display()),
            dest: format!("{remote}?{sas}"),
            recursive: true,
            way: Way::Upload,
        },
    }
}

/// The command line and environment (a scratch HOME, log and plan folders of
/// the run's own; stdin an open pipe, see relay_client::bench::azcopy).
pub fn command(azcopy: &Path, c: &Copy, tuning: Tuning, scratch: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(azcopy);
    cmd.args(command::copy_argv(
        &c.source,
        &c.dest,
        c.way,
        c.recursive,
        tuning,
    ))
    .envs(command::env(scratch, tuning))
    .env("HOME", scratch.join("home"));
    cmd
}

/// The run's summary, as every row's: the job's (or, capped, nothing's).
/// `seconds` is the job's end in its log, else the process's time.
pub fn report(
    stdout: &str,
    exit_code: Option<i32>,
    seconds: f64,
    files: &[PathBuf],
    prefix: &str,
    bytes: u64,
) -> anyhow::Result<ClientReport> {
    let summary = job::summary(stdout).map_err(anyhow::Error::msg)?;
    let why = summary.incomplete(files.len());
    if let Some(why) = &why {
        eprintln!("wanbench: azcopy: {why}");
    }
    let ok = why.is_none() && exit_code == Some(0);
    Ok(ClientReport {
        ok,
        seconds,
        bytes: if ok { bytes } else { summary.bytes },
        retries: 0,
        reattempts: 0,
        warm_start: None,
        storage_requests: None,
        abandoned: None,
        direct_sizing: None,
        files: files
            .iter()
            .map(|p| FileOutcome {
                path: p.display().to_string(),
                blob: format!("{prefix}/{}", file_name(p)),
                committed: ok,
                sha256: None,
            })
            .collect(),
    })
}

/// What the row records of the run.
pub fn run_info(tuning: Tuning, facts: &job::LogFacts, process_seconds: f64) -> AzcopyRun {
    AzcopyRun {
        version: facts.version.clone(),
        tuning: match tuning {
            Tuning::Defaults => "defaults",
            Tuning::Tuned => "tuned",
        }
        .into(),
        concurrency: facts.concurrency,
        block_size_bytes: facts.block_size_bytes,
        job_end_logged: facts.done,
        process_seconds,
    }
}

/// The log of a run, watched while it runs.
pub fn watch(scratch: &Path) -> azcopy::LogDir {
    azcopy::LogDir::new(scratch)
}

/// `azcopy --version` runs and says 10.x (checked once, before the runs).
pub fn check(azcopy: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new(azcopy)
        .arg("--version")
        .output()
        .map_err(|e| {
            anyhow::anyhow!("{}: {e} (scripts/setup installs AzCopy)", azcopy.display())
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().strip_prefix("azcopy version ") {
        Some(v) if out.status.success() => Ok(v.to_string()),
        _ => anyhow::bail!(
            "{}: does not run ({}): {} (scripts/setup installs it and libsecret-1-0)",
            azcopy.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_and_files_are_named_as_every_other_row_names_them() {
        let one = [PathBuf::from("/w/files/1x16MiB/f-000000.bin")];
        let remote = "http://10.77.0.2:10000/devstoreaccount1/wanbench/azcopy-bbr-1x16MiB-r1";
        let c = copy(
            Method::AzcopyBbr,
            &one,
            Path::new("/w/files/1x16MiB"),
            remote,
            "sig=s",
            Path::new("/d"),
        );
        assert_eq!(c.source, "/w/files/1x16MiB/f-000000.bin");
        assert_eq!(c.dest, format!("{remote}/f-000000.bin?sig=s"));
        assert!(!c.recursive && c.way == Way::Upload);
        let many = [PathBuf::from("/w/a/f-1"), PathBuf::from("/w/a/f-2")];
        let c = copy(
            Method::AzcopyTunedCubic,
            &many,
            Path::new("/w/a"),
            remote,
            "sig=s",
            Path::new("/d"),
        );
        assert_eq!((c.source.as_str(), c.recursive), ("/w/a/*", true));
        assert_eq!(c.dest, format!("{remote}?sig=s"));
        let c = copy(
            Method::AzcopyDlCubic,
            &many,
            Path::new("/w/a"),
            remote,
            "sig=r",
            Path::new("/d"),
        );
        assert_eq!(
            (c.source, c.dest, c.way),
            (format!("{remote}?sig=r"), "/d".into(), Way::Download)
        );
    }

    #[test]
    fn a_job_short_of_its_files_is_not_ok() {
        let line = |completed: u32| {
            format!(
                r#"{{"MessageType":"EndOfJob","MessageContent":"{{\"JobStatus\":\"Completed\",\"TotalTransfers\":\"{completed}\",\"TransfersCompleted\":\"{completed}\",\"TransfersFailed\":\"0\",\"TransfersSkipped\":\"0\",\"TotalBytesTransferred\":\"10\"}}"}}"#
            )
        };
        let files = [PathBuf::from("/a/x"), PathBuf::from("/a/y")];
        let r = report(&line(2), Some(0), 1.5, &files, "p", 20).expect("parses");
        assert!(r.ok && r.files.iter().all(|f| f.committed));
        assert_eq!(r.files[1].blob, "p/y");
        assert_eq!((r.seconds, r.bytes), (1.5, 20));
        assert!(
            !report(&line(1), Some(0), 1.5, &files, "p", 20)
                .expect("parses")
                .ok
        );
        assert!(
            !report(&line(2), Some(1), 1.5, &files, "p", 20)
                .expect("parses")
                .ok
        );
        assert!(report("", Some(0), 1.0, &files, "p", 20).is_err());
    }
}
