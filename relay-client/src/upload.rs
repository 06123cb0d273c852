//! The `upload` command: walks the sources, runs up to `--parallel` files at once
//! over one QUIC connection (or directly), retries what is retryable with capped
//! backoff (reconnecting and resuming), and reports.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use quinn::Connection;
use relay_proto::protocol::{Overwrite, Secret};
use relay_storage::blob::{Storage, WriterOptions};
use relay_storage::credentials::StorageAccess;
use relay_storage::retry::Backoff;
use relay_storage::staging::Budget;
use relay_transport::congestion::PathObserver;
use relay_transport::quic::{PathMemory, Windows};
use tokio::sync::{Mutex, Semaphore};

use crate::cli::UploadArgs;
use crate::connect::{ConnectError, Connector, Trust, resolve};
use crate::direct::{Direct, upload_file};
use crate::path_cache::{self, PathCache};
use crate::report::{Clocks, ErrorReport, FileError, FileReport, Status, Summary};
use crate::send::{Options, Sent, send_file};
use crate::walk::{Source, collect, parse_destination};

/// A setup problem that stops the whole command (exit status 2).
#[derive(Debug)]
pub struct SetupError(pub String);

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

enum Mode {
    Relay(RelayLink),
    Direct(Direct),
}

/// One QUIC connection, re-established when it is lost.
struct RelayLink {
    connector: Connector,
    addr: SocketAddr,
    name: String,
    timeout: Duration,
    current: Mutex<Option<Connection>>,
    /// Where this run's connections report their path estimate, and where it is
    /// saved for the next run (warm start).
    observer: Arc<PathObserver>,
    cache: Option<PathCache>,
}

impl RelayLink {
    /// Whether the connection started warm; saves what it measured.
    fn remember_path(&self) -> bool {
        if let (Some(cache), Some(estimate)) = (&self.cache, self.observer.estimate()) {
            cache.save(estimate);
        }
        self.observer.warm_started()
    }

    async fn get(&self) -> Result<Connection, FileError> {
        let mut cur = self.current.lock().await;
        if let Some(c) = cur.as_ref()
            && c.close_reason().is_none()
        {
            return Ok(c.clone());
        }
        // A busy relay (connection limit) is asked again with backoff: it says
        // "later", not "no".
        let backoff = Backoff {
            initial: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            max_attempts: 6,
        };
        let mut tries = 0;
        let c = loop {
            tries += 1;
            match self
                .connector
                .connect(self.addr, &self.name, self.timeout)
                .await
            {
                Ok(c) => break c,
                Err(ConnectError::Busy(m)) if backoff.allows(tries) => {
                    tracing::warn!(attempt = tries, "{m}");
                    tokio::time::sleep(backoff.delay(tries, rand::random::<f64>())).await;
                }
                Err(e) => return Err(FileError::new("connection", e.to_string(), true)),
            }
        };
        *cur = Some(c.clone());
        tokio::spawn(watchdog(c.clone()));
        Ok(c)
    }
}

/// Per-second transport figures at debug level (`RELAY_LOG=relay_client::path=debug`):
/// what an operator needs to tell a slow link from a slow relay.
struct PathTrace {
    enabled: bool,
    at: Instant,
    last: quinn::ConnectionStats,
}

impl PathTrace {
    fn new(conn: &Connection) -> Self {
        Self {
            enabled: tracing::enabled!(target: "relay_client::path", tracing::Level::DEBUG),
            at: Instant::now(),
            last: conn.stats(),
        }
    }

    fn tick(&mut self, conn: &Connection) {
        if !self.enabled || self.at.elapsed() < Duration::from_secs(1) {
            return;
        }
        let s = conn.stats();
        let secs = self.at.elapsed().as_secs_f64();
        tracing::debug!(
            target: "relay_client::path",
            tx_mbit = format!("{:.1}", (s.udp_tx.bytes - self.last.udp_tx.bytes) as f64 * 8.0 / secs / 1e6),
            sent = s.path.sent_packets - self.last.path.sent_packets,
            lost = s.path.lost_packets - self.last.path.lost_packets,
            cwnd = s.path.cwnd,
            rtt_ms = format!("{:.1}", s.path.rtt.as_secs_f64() * 1e3),
            mtu = s.path.current_mtu,
            "path"
        );
        self.at = Instant::now();
        self.last = s;
    }
}

/// A relay that hears nothing from us for this long is gone (crashed, restarted,
/// or its host is unreachable). Both ends send a keep-alive every 5 s, each
/// answered by an ACK, so a live relay is never this quiet.
const RELAY_SILENT: Duration = Duration::from_secs(10);

/// Closes `conn` when the relay stops acknowledging anything, so its files fail as
/// retryable and resume over a new connection. QUIC's own idle timeout (60 s) would
/// catch this too, but far later; and a relay restarted on the same address answers
/// old packets with stateless resets this client cannot authenticate, so only
/// acknowledged (authenticated) frames count as signs of life.
async fn watchdog(conn: Connection) {
    let mut acks = conn.stats().frame_rx.acks;
    let mut heard = Instant::now();
    let mut trace = PathTrace::new(&conn);
    loop {
        tokio::select! {
            _ = conn.closed() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        trace.tick(&conn);
        let now = conn.stats().frame_rx.acks;
        if now != acks {
            acks = now;
            heard = Instant::now();
        } else if heard.elapsed() >= RELAY_SILENT {
            tracing::warn!(
                remote = %conn.remote_address(),
                silent_s = RELAY_SILENT.as_secs(),
                "relay not responding; reconnecting"
            );
            conn.close(
                relay_proto::protocol::app_error::CLIENT_ABORT.into(),
                b"relay not responding",
            );
            return;
        }
    }
}

fn parse_metadata(items: &[String]) -> Result<BTreeMap<String, String>, SetupError> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| SetupError(format!("--metadata {item:?}: expected KEY=VALUE")))?;
        out.insert(k.to_string(), v.to_string());
    }
    relay_proto::blob_name::validate_metadata(&out).map_err(SetupError)?;
    Ok(out)
}

fn trust(args: &UploadArgs) -> Result<Trust, SetupError> {
    match (&args.relay_cert_sha256, &args.relay_ca, args.insecure) {
        (Some(fp), None, false) => Ok(Trust::Pinned(relay_transport::tls::parse_fingerprint(fp).map_err(SetupError)?)),
        (None, Some(ca), false) => Ok(Trust::CaFile(ca.clone())),
        (None, None, true) => {
            eprintln!("relay-client: WARNING: --insecure: the relay is not verified; anyone on the path can read and alter this upload");
            Ok(Trust::Insecure)
        }
        (None, None, false) => Err(SetupError(
            "say how to trust the relay: --relay-cert-sha256 HEX, --relay-ca PEM, or (labs only) --insecure".into(),
        )),
        _ => Err(SetupError(
            "use only one of --relay-cert-sha256, --relay-ca and --insecure".into(),
        )),
    }
}

/// Where direct mode keeps its key: `$XDG_STATE_HOME/blob-relay/direct-id.key`,
/// else `~/.local/state/blob-relay/direct-id.key`.
fn default_direct_key_file() -> Option<std::path::PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".local/state"))
        })?;
    Some(state.join("blob-relay/direct-id.key"))
}

/// Direct mode from the flags: the same writer the relay uses, straight to storage.
fn direct_mode(args: &UploadArgs) -> Result<Direct, SetupError> {
    let url = args.storage_url.clone().unwrap_or_default();
    let key = args.account_key.clone().map(Secret);
    let access = StorageAccess::resolve(&url, key.as_ref(), args.entra).map_err(SetupError)?;
    let storage = Storage::new(access, &WriterOptions::default()).map_err(SetupError)?;
    let key_file = args
        .id_key_file
        .clone()
        .or_else(default_direct_key_file)
        .ok_or_else(|| {
            SetupError("direct mode needs --id-key-file (no home directory to keep one in)".into())
        })?;
    let id_key = relay_proto::id_key::IdKey::load_or_create(&key_file)
        .map_err(|e| SetupError(format!("--id-key-file: {e}")))?;
    Ok(Direct {
        storage,
        id_key,
        budget: Budget::new(args.memory_budget),
        connections: args.connections.max(1),
        block_size: args
            .block_size
            .unwrap_or(relay_proto::limits::DEFAULT_BLOCK_SIZE),
    })
}

pub async fn run(args: UploadArgs) -> Result<Summary, SetupError> {
    let t0 = Instant::now();
    let (container, prefix) =
        parse_destination(&args.to).map_err(|e| SetupError(format!("--to: {e}")))?;
    let overwrite = match (&args.if_match, args.overwrite) {
        (Some(etag), _) => Overwrite::IfMatch { etag: etag.clone() },
        (None, true) => Overwrite::Always,
        (None, false) => Overwrite::Never,
    };
    let opts = Arc::new(Options {
        token: Secret(args.token.clone().unwrap_or_default()),
        container: container.clone(),
        overwrite,
        block_size: args.block_size,
        content_type: args.content_type.clone(),
        metadata: parse_metadata(&args.metadata)?,
    });
    let windows = Windows {
        stream_window: args.stream_window,
        connection_window: args.connection_window,
        congestion: args.congestion,
        max_rate_mbit: args.max_rate,
        fair: args.fair,
    };
    let mode = if args.direct {
        Mode::Direct(direct_mode(&args)?)
    } else {
        let relay = args.relay.clone().unwrap_or_default();
        if args.token.as_deref().unwrap_or_default().is_empty() {
            return Err(SetupError(
                "a token is needed: --token T or RELAY_TOKEN".into(),
            ));
        }
        let trust = trust(&args)?;
        let (addr, name) = resolve(&relay).await.map_err(SetupError)?;
        let name = args.server_name.clone().unwrap_or(name);
        let (memory, cache) = path_memory(&args, addr, &name);
        let observer = memory.observer.clone().unwrap_or_default();
        let connector = Connector::with_memory(&trust, &windows, memory, 8 << 20, addr.is_ipv6())
            .map_err(SetupError)?;
        let link = RelayLink {
            connector,
            addr,
            name,
            timeout: Duration::from_secs(args.connect_timeout),
            current: Mutex::new(None),
            observer,
            cache,
        };
        // Connect once up front so a wrong address or certificate is one clear error.
        match link.get().await {
            Ok(_) => Mode::Relay(link),
            Err(e) if args.fallback.is_some() => {
                eprintln!(
                    "relay-client: {}; falling back to direct upload (--fallback direct)",
                    e.message
                );
                Mode::Direct(direct_mode(&args)?)
            }
            Err(e) => return Err(SetupError(e.message)),
        }
    };
    let mode = Arc::new(mode);

    let (sources, walk_errors) = collect(&args.paths, &prefix);
    let show = !args.json && !args.quiet && std::io::stdout().is_terminal();
    let multi = MultiProgress::with_draw_target(if show {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let total_bytes: u64 = sources
        .iter()
        .filter_map(|s| std::fs::metadata(&s.path).ok())
        .map(|m| m.len())
        .sum();
    let total = multi.add(ProgressBar::new(total_bytes));
    total.set_style(
        ProgressStyle::with_template(
            "total {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );

    // Files in flight: at most --parallel, and at most what the relay's windows
    // take at once (each file counts min(size, stream window)); so many small files
    // fill the path while a few large ones never overrun the connection window.
    let slots = Arc::new(Semaphore::new(args.parallel.max(1)));
    let window = InFlight::new(&windows);
    let mut tasks = tokio::task::JoinSet::new();
    let mut reports = Vec::new();
    for (i, src) in sources.into_iter().enumerate() {
        let size = std::fs::metadata(&src.path).map(|m| m.len()).unwrap_or(0);
        let (slot, share) = tokio::join!(slots.clone().acquire_owned(), window.acquire(size));
        let wait_ms = t0.elapsed().as_millis() as u64;
        // Collect what finished meanwhile, so memory follows files in flight.
        while let Some(done) = tasks.try_join_next() {
            match done {
                Ok(r) => reports.push(r),
                Err(e) => return Err(SetupError(format!("internal error: {e}"))),
            }
        }
        let (mode, opts, multi, total) = (mode.clone(), opts.clone(), multi.clone(), total.clone());
        let attempts = args.attempts.max(1);
        tasks.spawn(async move {
            let _slot = (slot, share);
            let bar = multi.insert_before(&total, ProgressBar::new(0));
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:40!} {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(src.blob.clone());
            let report = one_file(&mode, &src, &opts, &bar, attempts, wait_ms).await;
            total.inc(report.bytes_sent);
            bar.finish_and_clear();
            multi.remove(&bar);
            (i, report)
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(r) => reports.push(r),
            Err(e) => return Err(SetupError(format!("internal error: {e}"))),
        }
    }
    total.finish_and_clear();
    reports.sort_by_key(|(i, _)| *i);
    let mut files: Vec<FileReport> = reports.into_iter().map(|(_, r)| r).collect();
    for (path, why) in walk_errors {
        files.push(failed_report(
            &path.display().to_string(),
            &container,
            "",
            FileError::new("source", why, false),
            0,
            Clocks::default(),
        ));
    }
    // Every file is verified and committed (or failed) here; closing the
    // connection below is not part of the upload's time.
    let seconds = t0.elapsed().as_secs_f64();
    let (name, warm_start, quic) = match mode.as_ref() {
        Mode::Direct(_) => ("direct", None, None),
        Mode::Relay(link) => {
            let quic = link.current.lock().await.as_ref().map(|c| {
                let p = c.stats().path;
                crate::report::QuicStats {
                    rtt_ms: p.rtt.as_secs_f64() * 1e3,
                    sent_packets: p.sent_packets,
                    lost_packets: p.lost_packets,
                }
            });
            link.connector.close().await;
            ("relay", Some(link.remember_path()), quic)
        }
    };
    let mut summary = Summary::new(name, files, seconds);
    summary.warm_start = warm_start;
    summary.quic = quic;
    Ok(summary)
}

/// Warm start from the path cache (unless `--no-warm-start`), and an observer
/// whose estimate is saved there after the run (also with `--no-warm-start`).
/// Keyed by address and TLS name: another relay, or the same name elsewhere, is
/// another path.
fn path_memory(args: &UploadArgs, addr: SocketAddr, name: &str) -> (PathMemory, Option<PathCache>) {
    let observer = Some(Arc::new(PathObserver::default()));
    let cache = args
        .path_cache
        .clone()
        .or_else(path_cache::default_file)
        .map(|file| PathCache::new(file, format!("{addr} {name}")));
    let warm = if args.no_warm_start {
        None
    } else {
        cache.as_ref().and_then(PathCache::load)
    };
    (PathMemory { warm, observer }, cache)
}

async fn one_file(
    mode: &Mode,
    src: &Source,
    opts: &Options,
    bar: &ProgressBar,
    attempts: u32,
    wait_ms: u64,
) -> FileReport {
    let path = src.path.display().to_string();
    if let Err(m) = relay_proto::blob_name::validate_blob_name(&src.blob) {
        return failed_report(
            &path,
            &opts.container,
            &src.blob,
            FileError::new("invalid_name", m, false),
            0,
            Clocks {
                wait_ms,
                ..Default::default()
            },
        );
    }
    let backoff = Backoff {
        initial: Duration::from_millis(500),
        cap: Duration::from_secs(15),
        max_attempts: attempts,
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let res: Result<Sent, FileError> = match mode {
            Mode::Relay(link) => match link.get().await {
                Ok(conn) => send_file(&conn, src, opts, bar).await,
                Err(e) => Err(e),
            },
            Mode::Direct(d) => upload_file(d, src, opts, bar).await,
        };
        match res {
            Ok(sent) => {
                return FileReport {
                    path,
                    container: opts.container.clone(),
                    blob: src.blob.clone(),
                    status: Status::Committed,
                    bytes: sent.bytes,
                    sha256: Some(sent.sha256),
                    etag: Some(sent.etag),
                    bytes_resumed: sent.bytes_resumed,
                    bytes_sent: sent.bytes_sent,
                    retries: sent.retries,
                    storage_requests: sent.storage_requests,
                    attempts: tries,
                    clocks_ms: Clocks {
                        wait_ms,
                        ..sent.clocks
                    },
                    relay_ms: sent.relay_clocks,
                    error: None,
                };
            }
            Err(e) if e.retryable && backoff.allows(tries) => {
                let delay = backoff.delay(tries, rand::random::<f64>());
                tracing::warn!(path = %path, attempt = tries, ?delay, error = %e.message, "retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => {
                return failed_report(
                    &path,
                    &opts.container,
                    &src.blob,
                    e,
                    tries,
                    Clocks {
                        wait_ms,
                        ..Default::default()
                    },
                );
            }
        }
    }
}

fn failed_report(
    path: &str,
    container: &str,
    blob: &str,
    e: FileError,
    attempts: u32,
    clocks: Clocks,
) -> FileReport {
    FileReport {
        path: path.to_string(),
        container: container.to_string(),
        blob: blob.to_string(),
        status: Status::Failed,
        bytes: 0,
        sha256: None,
        etag: None,
        bytes_resumed: 0,
        bytes_sent: 0,
        retries: 0,
        storage_requests: 0,
        attempts,
        clocks_ms: clocks,
        relay_ms: None,
        error: Some(ErrorReport {
            code: e.code,
            message: e.message,
        }),
    }
}

/// Bytes in flight against the relay's connection window, in 64 KiB units: a file
/// takes min(size, stream window), at least one unit.
struct InFlight {
    units: Arc<Semaphore>,
    stream_units: u64,
    total_units: u64,
}

const IN_FLIGHT_UNIT: u64 = 64 << 10;

impl InFlight {
    fn new(windows: &Windows) -> Self {
        let total_units = (windows.connection_window / IN_FLIGHT_UNIT).max(1);
        Self {
            units: Arc::new(Semaphore::new(total_units as usize)),
            stream_units: (windows.stream_window / IN_FLIGHT_UNIT).clamp(1, total_units),
            total_units,
        }
    }

    fn units_for(&self, size: u64) -> u32 {
        let units = size
            .div_ceil(IN_FLIGHT_UNIT)
            .clamp(1, self.stream_units)
            .min(self.total_units);
        u32::try_from(units).unwrap_or(u32::MAX)
    }

    async fn acquire(&self, size: u64) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.units
            .clone()
            .acquire_many_owned(self.units_for(size))
            .await
            .ok()
    }
}
