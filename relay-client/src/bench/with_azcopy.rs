//! The bench's AzCopy runs (`--azcopy`, or `azcopy` on PATH): the same files
//! as the relay and direct runs, to the same container, each run verified
//! the same way (every uploaded blob read back and hashed; every downloaded
//! file hashed on disk), its SAS signed for the run and never shown.

use std::path::{Path, PathBuf};

use relay_storage::account::Storage;
use url::Url;

use super::azcopy::{self, SasFrom, Tuning, Way, command};
use super::files::Generated;
use super::table::{AzcopyNote, Method, Row};
use crate::cli::BenchArgs;

/// An AzCopy ready to run, and how its SAS is had.
pub(super) struct Azcopy {
    path: PathBuf,
    sas_from: SasFrom,
    /// The blob service URL, without a query.
    service: Url,
    /// `--azcopy-sas`, or the SAS in `--storage-url`.
    fixed_sas: Option<String>,
    /// The account key to sign with, and its account.
    key: Option<(String, String)>,
}

/// Whether AzCopy runs, and the note the report carries (none when there is
/// no AzCopy: the bench is then as it was); an explicit `--azcopy` that
/// cannot run is an error.
pub(super) async fn prepare(
    args: &BenchArgs,
) -> Result<(Option<Azcopy>, Option<AzcopyNote>), String> {
    let service = args.storage_url.as_deref().and_then(|u| Url::parse(u).ok());
    let sas_in_url = service
        .as_ref()
        .and_then(|u| u.query_pairs().any(|(k, _)| k == "sig").then(|| u.query()))
        .flatten()
        .map(str::to_string);
    let decision = command::decide(command::Given {
        explicit: args.azcopy.clone(),
        on_path: azcopy::on_path(),
        disabled: args.no_azcopy,
        storage_url: service.is_some(),
        sas_flag: args.azcopy_sas.is_some(),
        account_key: args.account_key.is_some(),
        sas_in_url: sas_in_url.is_some(),
    });
    let skipped = |why: String| AzcopyNote {
        path: None,
        version: None,
        concurrency: None,
        block_size_bytes: None,
        sas_from: None,
        skipped: Some(why),
    };
    let (path, sas_from) = match decision {
        command::Decision::Run { azcopy, sas } => (azcopy, sas),
        command::Decision::Absent => return Ok((None, None)),
        command::Decision::Skip(why) => return Ok((None, Some(skipped(why)))),
        command::Decision::Refuse(why) => return Err(why),
    };
    let version = match azcopy::version(&path).await {
        Ok(v) => v,
        Err(e) if args.azcopy.is_some() => return Err(e),
        Err(e) => return Ok((None, Some(skipped(e)))),
    };
    let mut service = service.ok_or("no storage URL")?;
    service.set_query(None);
    let key = match (&sas_from, &args.account_key) {
        (SasFrom::AccountKey, Some(key)) => {
            let account = relay_storage::credentials::account_name(&service)
                .ok_or("no account name in --storage-url")?;
            Some((account, key.clone()))
        }
        _ => None,
    };
    let fixed_sas = match sas_from {
        SasFrom::Given => args
            .azcopy_sas
            .as_deref()
            .map(|s| s.trim_start_matches('?').to_string()),
        SasFrom::StorageUrl => sas_in_url,
        SasFrom::AccountKey => None,
    };
    let note = AzcopyNote {
        path: Some(path.display().to_string()),
        version: Some(version),
        concurrency: None,
        block_size_bytes: None,
        sas_from: Some(
            match sas_from {
                SasFrom::Given => "azcopy-sas",
                SasFrom::AccountKey => "account-key",
                SasFrom::StorageUrl => "storage-url",
            }
            .to_string(),
        ),
        skipped: None,
    };
    let me = Azcopy {
        path,
        sas_from,
        service,
        fixed_sas,
        key,
    };
    Ok((Some(me), Some(note)))
}

impl Azcopy {
    /// A SAS for one job on `container`: signed for it when we hold the key.
    fn sas(&self, container: &str, way: Way, bytes: u64) -> Result<String, String> {
        if let Some(s) = &self.fixed_sas {
            return Ok(s.clone());
        }
        let Some((account, key)) = &self.key else {
            return Err(format!("no SAS ({:?})", self.sas_from));
        };
        let lifetime =
            time::Duration::try_from(command::sas_lifetime(bytes)).map_err(|e| e.to_string())?;
        relay_storage::sas::container_sas(
            account,
            key,
            container,
            way.permissions(),
            time::OffsetDateTime::now_utc(),
            lifetime,
        )
        .map_err(|e| e.to_string())
    }

    /// `SERVICE/CONTAINER/PATH?SAS`, each path segment encoded.
    fn location(&self, container: &str, path: &str, sas: &str) -> Result<String, String> {
        let mut url = self.service.clone();
        url.path_segments_mut()
            .map_err(|()| format!("{}: cannot hold a path", self.service))?
            .pop_if_empty()
            .push(container)
            .extend(path.split('/').filter(|s| !s.is_empty()));
        url.set_query(Some(sas));
        Ok(url.to_string())
    }
}

/// What one AzCopy run is: its way, where from and to, the files it must move.
pub(super) struct Copy<'a> {
    pub way: Way,
    /// Upload: the local folder (its contents go under `dest`, as `upload`
    /// names them), or `--from`'s folder (which goes under `dest` by name).
    /// Download: the folder the staged prefix goes into.
    pub local: &'a Path,
    pub local_is_data_dir: bool,
    /// CONTAINER/PREFIX written to (upload) or read from (download).
    pub remote: &'a str,
    pub files: &'a [Generated],
    pub run: u32,
    /// The bench's work folder (AzCopy's log and plan folders go under it).
    pub work: &'a Path,
}

/// Runs one AzCopy copy; the row is verified only if AzCopy moved every
/// file and every file's bytes then hash to what was generated.
pub(super) async fn run_one(
    me: &Azcopy,
    c: Copy<'_>,
    storage: Option<&Storage>,
    note: &mut Option<AzcopyNote>,
) -> Row {
    let bytes: u64 = c.files.iter().map(|f| f.size).sum();
    let (container, prefix) = c.remote.split_once('/').unwrap_or((c.remote, ""));
    let local = if c.local_is_data_dir {
        c.local.join("*")
    } else {
        c.local.to_path_buf()
    };
    let prepared = me.sas(container, c.way, bytes).and_then(|sas| {
        let remote = me.location(container, prefix, &sas)?;
        Ok((sas, remote))
    });
    let (sas, remote) = match prepared {
        Ok(x) => x,
        Err(e) => return failed_row(c.run, c.files, c.remote, bytes, e),
    };
    let local = local.to_string_lossy().into_owned();
    let (source, dest) = match c.way {
        Way::Upload => (local, remote),
        Way::Download => (remote, local),
    };
    let ran = azcopy::run(azcopy::Job {
        azcopy: &me.path,
        source,
        dest,
        way: c.way,
        recursive: true,
        tuning: Tuning::Defaults,
        scratch: c.work.join("azcopy-job"),
        sas: &sas,
        files: c.files.len(),
    })
    .await;
    if let Some(note) = note {
        note.concurrency = note.concurrency.or(ran.facts.concurrency);
        note.block_size_bytes = note.block_size_bytes.or(ran.facts.block_size_bytes);
    }
    let error = match ran.error {
        Some(e) => Some(e),
        None => match c.way {
            Way::Upload => blobs_differ(storage, container, prefix, c.files).await,
            Way::Download => {
                let top = c.local.join(super::files::STAGED);
                super::files::on_disk_differs(&top, c.files).await
            }
        },
    };
    Row {
        method: Method::Azcopy,
        run: c.run,
        files: c.files.len(),
        bytes,
        seconds: ran.seconds,
        goodput_mbit_s: if ran.seconds > 0.0 {
            bytes as f64 * 8.0 / ran.seconds / 1e6
        } else {
            0.0
        },
        cpu_s: ran.cpu_s,
        cpu_s_per_gib: super::cpu::per_gib(ran.cpu_s, bytes),
        process_seconds: Some(ran.process_seconds),
        wire_bytes: None,
        verified: error.is_none(),
        destination: c.remote.to_string(),
        quic: None,
        error,
    }
}

fn failed_row(run: u32, files: &[Generated], remote: &str, bytes: u64, e: String) -> Row {
    Row {
        method: Method::Azcopy,
        run,
        files: files.len(),
        bytes,
        seconds: 0.0,
        goodput_mbit_s: 0.0,
        cpu_s: 0.0,
        cpu_s_per_gib: None,
        process_seconds: None,
        wire_bytes: None,
        verified: false,
        destination: remote.to_string(),
        quic: None,
        error: Some(e),
    }
}

/// The first uploaded blob that is missing or whose bytes (read back whole)
/// hash to other than its file's SHA-256: AzCopy reports no hash of its own.
async fn blobs_differ(
    storage: Option<&Storage>,
    container: &str,
    prefix: &str,
    files: &[Generated],
) -> Option<String> {
    let Some(storage) = storage else {
        return Some("no storage credentials to read the blobs back".into());
    };
    for f in files {
        let blob = [prefix, &f.name]
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        let got = match storage.writer(container, &blob) {
            Ok(w) => w.content_sha256().await,
            Err(e) => Err(e),
        };
        match got {
            Ok((_, sha)) if hex::encode(sha) == f.sha256 => {}
            Ok(_) => {
                return Some(format!(
                    "{}: the blob's SHA-256 differs from the file's",
                    f.name
                ));
            }
            Err(e) => return Some(format!("{}: cannot read the blob back: {e}", f.name)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(service: &str) -> Azcopy {
        Azcopy {
            path: PathBuf::from("/bin/azcopy"),
            sas_from: SasFrom::AccountKey,
            service: Url::parse(service).expect("url"),
            fixed_sas: None,
            key: Some(("devstoreaccount1".into(), "AAECAw==".into())),
        }
    }

    #[test]
    fn each_job_gets_a_sas_for_its_container_and_way_only() {
        let a = me("http://127.0.0.1:10000/devstoreaccount1/");
        let up = a.sas("cont", Way::Upload, 1 << 20).expect("signed");
        assert!(up.contains("sr=c&sp=w&"), "{up}");
        let down = a.sas("cont", Way::Download, 1 << 20).expect("signed");
        assert!(down.contains("sp=rl&"), "{down}");
        let url = a
            .location("cont", "p/bench-1/run-1/azcopy", &up)
            .expect("url");
        assert!(
            url.starts_with(
                "http://127.0.0.1:10000/devstoreaccount1/cont/p/bench-1/run-1/azcopy?sv="
            ),
            "{url}"
        );
        let fixed = Azcopy {
            fixed_sas: Some("sv=x&sig=y".into()),
            key: None,
            ..a
        };
        assert_eq!(
            fixed.sas("other", Way::Upload, 0).as_deref(),
            Ok("sv=x&sig=y")
        );
        let named = me("https://acct.blob.core.windows.net/");
        let url = named.location("c", "a b/ü", "sv=1").expect("url");
        assert_eq!(
            url,
            "https://acct.blob.core.windows.net/c/a%20b/%C3%BC?sv=1"
        );
    }
}
