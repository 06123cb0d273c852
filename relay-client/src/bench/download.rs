//! `bench --download`: the other direction. The files go into storage once,
//! through the relay and untimed; then each run downloads all of them with the
//! real `download` command (built from the flags a user would type) through the
//! relay and, with storage credentials, straight from storage (`download
//! --direct`), alternating which goes first, each into a fresh folder. With
//! `--from DIR` the relay also downloads with `--compress off` (`relay-off`),
//! to show what compression buys on the way back. Every file on disk is then
//! hashed against the SHA-256 of what was generated.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;

use super::files::{Generated, STAGED, on_disk_differs};
use super::{BenchError, Method, Row, order, upload_argv, upload_once};
use crate::cli::{BenchArgs, Cli, Command};
use crate::ui::report::{Status, Summary};

/// What the download runs compare: direct downloads (with storage
/// credentials) and AzCopy (when it runs).
pub(super) struct Others<'a> {
    pub direct: bool,
    pub azcopy: Option<&'a super::with_azcopy::Azcopy>,
    pub note: &'a mut Option<crate::bench::table::AzcopyNote>,
    pub storage: Option<&'a relay_storage::account::Storage>,
}

/// Puts the files at `staged` (CONTAINER/PREFIX), then downloads them
/// `args.runs` times per method; one row per download.
pub(super) async fn runs(
    args: &BenchArgs,
    dir: &Path,
    paths: &[PathBuf],
    files: &[Generated],
    staged: &str,
    others: Others<'_>,
) -> Result<Vec<Row>, BenchError> {
    let argv = upload_argv(args, dir, paths, Method::Relay, staged);
    let put = upload_once(argv, files, Method::Relay, 0, staged.to_string()).await;
    if !put.verified {
        return Err(BenchError::Stage(put.error.unwrap_or_default()));
    }
    let mut rows = Vec::new();
    for run in 1..=args.runs {
        // A user's own files: with and without compression, as for upload.
        for method in order(
            run,
            others.direct,
            args.from.is_some(),
            others.azcopy.is_some(),
        ) {
            let into = dir.join(format!("download-{run}-{}", method.name()));
            let _ = std::fs::remove_dir_all(&into);
            let row = match (method, others.azcopy) {
                (Method::Azcopy, Some(azcopy)) => {
                    let copy = super::with_azcopy::Copy {
                        way: super::azcopy::Way::Download,
                        local: &into,
                        local_is_data_dir: false,
                        remote: staged,
                        files,
                        run,
                        work: dir,
                    };
                    super::with_azcopy::run_one(azcopy, copy, others.storage, others.note).await
                }
                _ => {
                    let argv = download_argv(args, dir, method, staged, &into);
                    download_once(argv, files, method, run, staged, &into).await
                }
            };
            rows.push(row);
            // The next run's folder starts empty, and the disk holds one copy.
            let _ = std::fs::remove_dir_all(&into);
        }
    }
    Ok(rows)
}

/// The `download` command line for one run: what a user would type.
fn download_argv(
    args: &BenchArgs,
    dir: &Path,
    method: Method,
    source: &str,
    into: &Path,
) -> Vec<String> {
    let mut v: Vec<String> = vec!["relay-client".into(), "download".into(), source.into()];
    v.extend([
        "--to".into(),
        into.to_string_lossy().into_owned(),
        "--quiet".into(),
        "--path-cache".into(),
        dir.join("paths.json").to_string_lossy().into_owned(),
    ]);
    if method == Method::RelayOff {
        v.extend(["--compress".into(), "off".into()]);
    }
    v.extend(super::way_flags(args, method));
    v
}

async fn download_once(
    argv: Vec<String>,
    files: &[Generated],
    method: Method,
    run: u32,
    source: &str,
    into: &Path,
) -> Row {
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let cpu0 = super::cpu::self_s();
    let t0 = Instant::now();
    let outcome = match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Download(a),
            ..
        }) => {
            // Quiet, with every file's report kept (a failure names its file).
            let reporter = std::sync::Arc::new(crate::ui::progress::Reporter::with_every_report(
                crate::ui::progress::Output::Json,
                true,
            ));
            super::finished(
                crate::commands::download::run(
                    *a,
                    reporter,
                    crate::run::interrupt::Interrupt::never(),
                )
                .await,
            )
        }
        Ok(_) => Err("not a download".to_string()),
        Err(e) => Err(e.to_string()),
    };
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_s = super::cpu::self_s() - cpu0;
    // The download's own folder: the source's last segment.
    let top = into.join(STAGED);
    let error = match &outcome {
        Ok(summary) => match failed_file(summary) {
            Some(why) => Some(why),
            None => on_disk_differs(&top, files).await,
        },
        Err(e) => Some(e.clone()),
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
        cpu_s_per_gib: super::cpu::per_gib(cpu_s, bytes),
        process_seconds: None,
        wire_bytes: outcome.as_ref().ok().and_then(super::wire_bytes),
        verified: error.is_none(),
        destination: source.to_string(),
        quic: outcome.as_ref().ok().and_then(|s| s.quic),
        error,
    }
}

/// The first file the download did not write, with its reason.
fn failed_file(summary: &Summary) -> Option<String> {
    summary
        .files
        .in_memory()
        .iter()
        .find(|r| r.status != Status::Downloaded)
        .map(|r| {
            let why = r.error.as_ref().map_or("not downloaded", |e| &e.message);
            format!("{}: {why}", r.blob)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn parsed(argv: Vec<String>) -> crate::commands::download_args::DownloadArgs {
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Download(a),
                ..
            }) => *a,
            other => panic!("{other:?}"),
        }
    }

    fn bench(extra: &[&str]) -> BenchArgs {
        let mut argv = vec!["relay-client", "bench", "--relay", "h:4433", "--to", "c"];
        argv.extend(extra);
        argv.push("--download");
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Bench(b),
                ..
            }) => *b,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_method_downloads_with_the_flags_a_user_would_type() {
        let args = bench(&[
            "--token",
            "abcdefghijklmnopqrst",
            "--relay-cert-sha256",
            "AB:CD",
            "--relay-connections",
            "3",
            "--storage-url",
            "https://acct.blob.core.windows.net",
            "--account-key",
            "a2V5",
        ]);
        assert!(args.download);
        let (dir, into) = (Path::new("/tmp/w"), Path::new("/tmp/w/download-1-relay"));
        let relay = parsed(download_argv(&args, dir, Method::Relay, "c/p/source", into));
        assert_eq!(relay.sources, ["c/p/source"]);
        assert_eq!(relay.to, into);
        assert_eq!(relay.connection.relay.as_deref(), Some("h:4433"));
        assert_eq!(
            relay.connection.token.as_deref(),
            Some("abcdefghijklmnopqrst")
        );
        assert_eq!(relay.connection.relay_connections, 3);
        assert!(!relay.direct);
        assert_eq!(relay.compress, crate::transfer::compress::Mode::Auto);
        let off = parsed(download_argv(
            &args,
            dir,
            Method::RelayOff,
            "c/p/source",
            into,
        ));
        assert_eq!(off.compress, crate::transfer::compress::Mode::Off);
        assert!(!off.direct && off.connection.relay.is_some());
        let direct = parsed(download_argv(
            &args,
            dir,
            Method::Direct,
            "c/p/source",
            into,
        ));
        assert!(direct.direct);
        assert_eq!(
            direct.connection.storage_url.as_deref(),
            Some("https://acct.blob.core.windows.net")
        );
        assert_eq!(direct.connection.account_key.as_deref(), Some("a2V5"));
        assert_eq!(direct.connection.relay, None);
    }

    #[tokio::test]
    async fn a_file_on_disk_is_checked_by_its_hash() {
        let dir = std::env::temp_dir().join(format!("bench-dl-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("small")).expect("mkdir");
        std::fs::write(dir.join("small/a"), b"abc").expect("write");
        let sha = hex::encode(Sha256::digest(b"abc"));
        let file = |name: &str, sha256: &str| Generated {
            name: name.into(),
            size: 3,
            sha256: sha256.into(),
        };
        assert_eq!(on_disk_differs(&dir, &[file("small/a", &sha)]).await, None);
        let other = hex::encode(Sha256::digest(b"abd"));
        let bad = on_disk_differs(&dir, &[file("small/a", &other)]).await;
        assert!(bad.is_some_and(|e| e.contains("differs")));
        let gone = on_disk_differs(&dir, &[file("small/b", &sha)]).await;
        assert!(gone.is_some_and(|e| e.contains("cannot read")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
