//! The cloud side of one lab: Azurite and relay-server inside the cloud
//! namespace, plus blob checks run from there (they never cross the link,
//! so verification does not disturb the emulated path or its counters).

use std::future::Future;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use linklab::{Lab, Side};
use relay_proto::protocol::Secret;
use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{EntraSource, StorageAccess};
use relay_tests::{DEV_ACCOUNT, DEV_KEY};

use crate::storage_delay::{DelayProxy, DelaySpec};

/// Where every client (and the relay) reaches storage in the cloud namespace.
const AZURITE_PORT: u16 = 10000;
/// Azurite's own port when the storage delay proxy holds `AZURITE_PORT`.
const AZURITE_BEHIND_PROXY: u16 = 10001;
/// Where the bench's own checks reach Azurite (never through the delay proxy:
/// downloading 10,000 blobs at +20 ms each would cost minutes per run).
static BACKEND_PORT: AtomicU16 = AtomicU16::new(AZURITE_PORT);
const RELAY_PORT: u16 = 4433;
pub const TOKEN: &str = "wanbench-token-0123456789abcdef";
/// The download rows' token: it may read (only) `READABLE_CONTAINER`, as
/// reading is a grant of its own; `TOKEN` writes, as it always did.
pub const READER_TOKEN: &str = "wanbench-reader-0123456789abcdef";
pub const READABLE_CONTAINER: &str = "wanbench";
/// `--sync-rerun`'s token: a sync lists what it writes, so it reads and
/// writes `READABLE_CONTAINER` (its changed-alone upload uses it too, so
/// both authenticate alike).
pub const SYNC_TOKEN: &str = "wanbench-sync-0123456789abcdef";

/// What stands for the storage account.
pub enum StorageBin {
    Azurite(PathBuf),
    /// `relay_tests::standin` (`--storage standin`).
    StandIn(PathBuf),
}

/// Paths of the programs the cloud side runs.
pub struct CloudBins {
    pub storage: StorageBin,
    pub relay_server: PathBuf,
    /// Azurite runs on these CPUs only (`--storage-cpu`).
    pub storage_cpus: Option<Vec<usize>>,
}

/// A child we started; killed (by pid) and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Running Azurite + relay; both die with the lab (and with us: PDEATHSIG).
pub struct Cloud {
    // Drop order: relay first, then its storage.
    relay: Proc,
    _delay: Option<DelayProxy>,
    azurite: Proc,
    pub relay_addr: SocketAddr,
    pub fingerprint: String,
}

impl Cloud {
    pub fn start(
        lab: &Lab,
        bins: &CloudBins,
        congestion: &str,
        delay: Option<DelaySpec>,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let az_port = if delay.is_some() {
            AZURITE_BEHIND_PROXY
        } else {
            AZURITE_PORT
        };
        BACKEND_PORT.store(az_port, Ordering::SeqCst);
        let mut az = match &bins.storage {
            StorageBin::Azurite(path) => {
                let mut az = Command::new(path);
                az.args(["--blobHost", "0.0.0.0", "--blobPort"])
                    .arg(az_port.to_string())
                    .args([
                        "--inMemoryPersistence",
                        "--disableTelemetry",
                        "--skipApiVersionCheck",
                        "--silent",
                    ]);
                // Rows with the relay's `--block-checksum crc64`
                // (RELAY_BLOCK_CHECKSUM, the setting for Azure): Azurite's
                // strict mode refuses x-ms-content-crc64, loose mode ignores
                // it (as loopback-bench does).
                if std::env::var_os("RELAY_TESTS_AZURITE_LOOSE").is_some() {
                    az.arg("--loose");
                }
                az
            }
            StorageBin::StandIn(path) => {
                let mut s = Command::new(path);
                s.arg("--listen").arg(format!("0.0.0.0:{az_port}"));
                s
            }
        };
        az.stdin(Stdio::null())
            .stdout(log_file(dir, "azurite.log")?)
            .stderr(log_file(dir, "azurite.err")?);
        die_with_parent(&mut az);
        if let Some(cpus) = bins.storage_cpus.clone() {
            // SAFETY: sched_setaffinity is async-signal-safe; `cpus` was
            // allocated before fork.
            unsafe {
                az.pre_exec(move || crate::cpu_split::pin_to(&cpus));
            }
        }
        let mut azurite = Proc(lab.spawn_in(Side::Cloud, az)?);
        wait_for_tcp(lab, az_port, Duration::from_secs(60), &mut azurite.0)
            .context("Azurite did not start (see azurite.err in the work dir)")?;
        let delay = match delay {
            Some(spec) => Some(DelayProxy::start(lab, AZURITE_PORT, az_port, spec)?),
            None => None,
        };
        let relay_addr = SocketAddr::new(lab.addr(Side::Cloud).into(), RELAY_PORT);

        let tokens = dir.join("tokens");
        std::fs::write(
            &tokens,
            format!(
                "{TOKEN}\n{READER_TOKEN} {READABLE_CONTAINER}:r\n{SYNC_TOKEN} {READABLE_CONTAINER}:rw\n"
            ),
        )
        .context("write tokens")?;
        let fp_file = dir.join("relay.sha256");
        let _ = std::fs::remove_file(&fp_file);
        let mut relay = Command::new(&bins.relay_server);
        relay
            .arg("--listen")
            .arg(relay_addr.to_string())
            .arg("--storage-url")
            .arg(format!("http://127.0.0.1:{AZURITE_PORT}/{DEV_ACCOUNT}"))
            .arg("--tokens")
            .arg(&tokens)
            .arg("--id-key-ephemeral")
            .arg("--state-dir")
            .arg(dir.join("relay-state"))
            .arg("--cert-fingerprint-file")
            .arg(&fp_file)
            .args(["--congestion", congestion])
            .env("RELAY_ACCOUNT_KEY", DEV_KEY)
            .env_remove("RELAY_HEALTH_LISTEN")
            .stdin(Stdio::null())
            .stdout(log_file(dir, "relay.log")?)
            .stderr(log_file(dir, "relay.err")?);
        strip_proxies(&mut relay);
        die_with_parent(&mut relay);
        let mut relay = Proc(lab.spawn_in(Side::Cloud, relay)?);
        let fingerprint = wait_for_fingerprint(&fp_file, &mut relay.0)?;
        Ok(Cloud {
            relay,
            _delay: delay,
            azurite,
            relay_addr,
            fingerprint,
        })
    }

    pub fn azurite_pid(&self) -> u32 {
        self.azurite.0.id()
    }

    pub fn relay_pid(&self) -> u32 {
        self.relay.0.id()
    }

    /// Blob endpoint as seen from the site (across the link).
    pub fn storage_url_from_site(lab: &Lab) -> String {
        format!(
            "http://{}:{AZURITE_PORT}/{DEV_ACCOUNT}",
            lab.addr(Side::Cloud)
        )
    }

    /// A container SAS URL (from the development key) as seen from the site,
    /// for tools that take one (rclone's azureblob `sas_url`).
    pub fn container_sas_url(lab: &Lab, container: &str) -> anyhow::Result<String> {
        let sas = relay_storage::sas::account_sas(
            DEV_ACCOUNT,
            DEV_KEY,
            time::OffsetDateTime::now_utc(),
            time::Duration::hours(12),
        )
        .map_err(anyhow::Error::msg)?;
        Ok(format!(
            "{}/{container}?{sas}",
            Self::storage_url_from_site(lab)
        ))
    }

    /// A container SAS (query string) with only `permissions`, signed from the
    /// development key: what the AzCopy rows run with.
    pub fn container_sas(container: &str, permissions: &str) -> anyhow::Result<String> {
        relay_storage::sas::container_sas(
            DEV_ACCOUNT,
            DEV_KEY,
            container,
            permissions,
            time::OffsetDateTime::now_utc(),
            time::Duration::hours(12),
        )
        .map_err(anyhow::Error::msg)
    }

    /// Both processes still running (a crash would poison later rows).
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(s) = self.azurite.0.try_wait().context("azurite")? {
            bail!("Azurite exited: {s}");
        }
        if let Some(s) = self.relay.0.try_wait().context("relay")? {
            bail!("relay-server exited: {s} (see relay.err in the work dir)");
        }
        Ok(())
    }
}

/// Appends: every run starts its own Azurite and relay, and all their logs stay.
fn log_file(dir: &Path, name: &str) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .with_context(|| format!("open {name}"))
}

/// Children must not talk to a proxy: every address here is in the lab.
pub fn strip_proxies(cmd: &mut Command) {
    for k in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(k);
    }
}

/// SIGKILL the child if we die (a killed bench must not leave servers behind).
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

fn wait_for_tcp(lab: &Lab, port: u16, limit: Duration, child: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let ok = lab.run_in(Side::Cloud, move || {
            Ok(TcpStream::connect(("127.0.0.1", port)).is_ok())
        })?;
        if ok {
            return Ok(());
        }
        if let Some(s) = child.try_wait()? {
            bail!("exited early: {s}");
        }
        if Instant::now() > deadline {
            bail!("nothing listens on port {port} after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for_fingerprint(path: &Path, relay: &mut Child) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            let fp = s.trim().to_string();
            if !fp.is_empty() {
                return Ok(fp);
            }
        }
        if let Some(s) = relay.try_wait()? {
            bail!("relay-server exited at start: {s} (see relay.err in the work dir)");
        }
        if Instant::now() > deadline {
            bail!("relay-server wrote no fingerprint within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run `f` with a Storage on a thread inside the cloud namespace (its
/// sockets are created there and reach Azurite over the cloud's loopback).
pub fn with_storage<F, Fut, T>(lab: &Lab, f: F) -> anyhow::Result<T>
where
    F: FnOnce(Storage) -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<T>>,
    T: Send + 'static,
{
    lab.run_in(Side::Cloud, move || {
        let port = BACKEND_PORT.load(Ordering::SeqCst);
        let url = format!("http://127.0.0.1:{port}/{DEV_ACCOUNT}");
        let access =
            StorageAccess::resolve(&url, Some(&Secret(DEV_KEY.into())), EntraSource::default())
                .map_err(anyhow::Error::msg)?;
        let storage =
            Storage::new(access, &WriterOptions::default()).map_err(anyhow::Error::msg)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("tokio runtime")?;
        rt.block_on(f(storage))
    })
}

pub fn ensure_container(lab: &Lab, container: &str) -> anyhow::Result<()> {
    let c = container.to_string();
    with_storage(lab, move |s| async move {
        s.ensure_container(&c).await?;
        Ok(())
    })
}

/// Checks run on this many blobs at once (10,000 small blobs one by one
/// would take minutes per run).
const CHECKS_IN_FLIGHT: usize = 32;

/// `check` on every blob name, `CHECKS_IN_FLIGHT` at a time; results in order.
async fn each_blob<T, F, Fut>(
    s: Storage,
    container: &str,
    blobs: Vec<String>,
    check: F,
) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(relay_storage::blob::BlobWriter) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    let mut out: Vec<Option<T>> = (0..blobs.len()).map(|_| None).collect();
    for (i, blob) in blobs.into_iter().enumerate() {
        if tasks.len() >= CHECKS_IN_FLIGHT
            && let Some(done) = tasks.join_next().await
        {
            let (j, v) = done.context("check task")?;
            out[j] = Some(v?);
        }
        let fut = check(s.writer(container, &blob)?);
        tasks.spawn(async move { (i, fut.await) });
    }
    while let Some(done) = tasks.join_next().await {
        let (j, v) = done.context("check task")?;
        out[j] = Some(v?);
    }
    out.into_iter()
        .map(|v| v.context("a check did not run"))
        .collect()
}

/// Download each blob and hash it; true where the SHA-256 matches.
// The WAN-lab tests (tests/*.rs include this file) ask yes or no; the bench
// itself reports why (`check_blobs`).
#[allow(dead_code)]
pub fn verify_blobs(
    lab: &Lab,
    container: &str,
    blobs: Vec<(String, String)>,
) -> anyhow::Result<Vec<bool>> {
    Ok(check_blobs(lab, container, blobs)?
        .into_iter()
        .map(|v| v == Verdict::Same)
        .collect())
}

/// What a blob's download said against the SHA-256 it should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// The bytes arrived and hash to something else.
    Differs,
    /// No download succeeded (the last error): nothing is known of the bytes.
    Unread(String),
}

/// Downloads each blob and hashes it against its expected SHA-256. A download
/// that fails is asked again (twice): Azurite on a loaded 2-core machine
/// sometimes drops one, and a bench must not report "differs" for bytes it
/// never read.
pub fn check_blobs(
    lab: &Lab,
    container: &str,
    blobs: Vec<(String, String)>,
) -> anyhow::Result<Vec<Verdict>> {
    let c = container.to_string();
    with_storage(lab, move |s| async move {
        let (names, wants): (Vec<String>, Vec<String>) = blobs.into_iter().unzip();
        let got = each_blob(s, &c, names, |w| async move {
            let mut last = String::new();
            for _ in 0..3 {
                match w.content_sha256().await {
                    Ok((_, h)) => return Ok(Ok(hex::encode(h))),
                    Err(e) => last = e.to_string(),
                }
            }
            Ok(Err(last))
        })
        .await?;
        Ok(got
            .into_iter()
            .zip(wants)
            .map(|(g, want)| match g {
                Ok(h) if h == want => Verdict::Same,
                Ok(_) => Verdict::Differs,
                Err(e) => Verdict::Unread(e),
            })
            .collect())
    })
}

/// Deletes these blobs (a bench that checked them keeps in-memory Azurite's
/// store small: its cost per request grows with the blobs it holds, where a
/// storage account's does not).
#[allow(dead_code)]
pub fn delete_blobs(lab: &Lab, container: &str, blobs: Vec<String>) -> anyhow::Result<()> {
    let c = container.to_string();
    with_storage(lab, move |s| async move {
        each_blob(s, &c, blobs, |w| async move {
            w.delete().await?;
            Ok(())
        })
        .await?;
        Ok(())
    })
}

/// Bytes that reached storage for these blobs: the size of committed ones,
/// the staged (uncommitted) blocks of the rest. What a capped run achieved.
pub fn stored_bytes(lab: &Lab, container: &str, blobs: Vec<String>) -> anyhow::Result<u64> {
    let c = container.to_string();
    with_storage(lab, move |s| async move {
        let sizes = each_blob(s, &c, blobs, |w| async move {
            Ok(match w.properties().await? {
                Some(p) => p.size,
                None => w.uncommitted_blocks().await?.iter().map(|(_, n)| n).sum(),
            })
        })
        .await?;
        Ok(sizes.iter().sum())
    })
}
