//! Everything decided before the first file moves: destination, per-file options,
//! how to trust the relay, direct mode's storage and key, the relay connection.
//! Each problem here is one `SetupError` (exit status 2), said once, not per file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use relay_proto::blob_name::MetadataError;
use relay_proto::id_key::IdKeyError;
use relay_proto::logsafe::hide_sas_signatures;
use relay_proto::protocol::{Overwrite, Secret};
use relay_storage::account::{ClientBuildError, Storage};
use relay_storage::blob::{BlobError, WriterOptions};
use relay_storage::credentials::{CredentialError, StorageAccess};
use relay_storage::read::MAX_CHECKED_RANGE;
use relay_storage::staging::Budget;
use relay_storage::watch::Patience;
use relay_transport::congestion::PathObserver;
use relay_transport::quic::{PathMemory, Windows};
use relay_transport::tls::FingerprintError;

use crate::commands::args::{OverwriteMode, UploadArgs};
use crate::commands::connection_args::ConnectionArgs;
use crate::relay::connect::{AddressError, Connector, ConnectorError, Trust, resolve};
use crate::relay::link::RelayLink;
use crate::relay::links::RelayLinks;
use crate::relay::path_cache::{self, PathCache};
use crate::sign_in::{Bearer, EntraToken, Flow, SignIn, SignInError};
use crate::transfer::direct::Direct;
use crate::transfer::direct_sizing::{self, Requests};
use crate::transfer::filter::FilterError;
use crate::transfer::manifest::ManifestError;
use crate::transfer::mode::Mode;
use crate::transfer::send::Options;
use crate::transfer::walk::{Destination, DestinationError, SourceErrors, parse_destination};
use crate::ui::report::FileError;
use crate::ui::weather::WeatherSink;

/// A setup problem that stops the whole command (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A source argument that does not exist or cannot be read.
    #[error(transparent)]
    Sources(#[from] SourceErrors),
    #[error("--to: {0}")]
    Destination(#[from] DestinationError),
    /// `--to` (or a download's source) is a blob URL of another account than
    /// `--storage-url`'s.
    #[error(
        "{what} names account {theirs:?} but --storage-url is account {}",
        ours.as_deref().unwrap_or("(unknown)")
    )]
    AccountMismatch {
        /// `--to`, or `source "URL"`.
        what: String,
        theirs: String,
        ours: Option<String>,
    },
    #[error("--storage-url {:?}: {source}", hide_sas_signatures(text))]
    StorageUrl {
        text: String,
        source: url::ParseError,
    },
    /// `--storage-url` (shown without its query) names more than the account.
    #[error(
        "--storage-url {service} names a container or path; give the account's service URL \
         (https://ACCOUNT.blob.core.windows.net) and put the container in --to"
    )]
    StorageUrlPath { service: url::Url },
    #[error("--metadata {item:?}: expected KEY=VALUE")]
    MetadataItem { item: String },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Fingerprint(#[from] FingerprintError),
    #[error(
        "say how to trust the relay: --relay-cert-sha256 HEX, --relay-ca PEM, or (labs only) --insecure"
    )]
    NoTrust,
    #[error("use only one of --relay-cert-sha256, --relay-ca and --insecure")]
    ConflictingTrust,
    #[error(transparent)]
    StorageAccess(#[from] CredentialError),
    #[error(transparent)]
    HttpClient(#[from] ClientBuildError),
    /// The access check could not even open a writer.
    #[error(transparent)]
    Writer(BlobError),
    /// The access check's request failed: a missing or wrong credential.
    #[error(
        "cannot use the storage credentials ({0}); give --account-key, a SAS in \
         --storage-url, or sign in for --entra cli (az login)"
    )]
    Credentials(#[source] BlobError),
    #[error("--create-container {container}: {source}")]
    CreateContainer {
        container: String,
        source: BlobError,
    },
    #[error("direct mode needs --id-key-file (no home directory to keep one in)")]
    NoKeyFile,
    #[error("--id-key-file: {0}")]
    IdKey(#[from] IdKeyError),
    #[error(
        "--create-container works with --direct only (a relay writes into containers its operator made)"
    )]
    CreateContainerNeedsDirect,
    #[error(
        "a token is needed: --token T or RELAY_TOKEN, or sign in with --entra \
         cli|device-code|managed-identity|workload-identity"
    )]
    NoToken,
    #[error("give --token (or RELAY_TOKEN) or --entra, not both")]
    TokenAndEntra,
    #[error(transparent)]
    SignIn(#[from] SignInError),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    /// The first connection to the relay failed (and no `--fallback`).
    #[error("{}", .0.message)]
    Relay(FileError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// A file's refusal every other file would get too (a wrong token, a
    /// missing container): said once, and the upload stops.
    #[error("{0}")]
    Refused(String),
}

pub fn destination(args: &UploadArgs) -> Result<Destination, SetupError> {
    let dest = parse_destination(&args.to)?;
    same_account(args, &dest, "--to")?;
    Ok(dest)
}

/// In direct mode, a blob URL (`what`: `--to`, a download's source) must
/// name `--storage-url`'s account: the credentials are that account's, and
/// another account's blobs are not there.
pub fn same_account(args: &UploadArgs, dest: &Destination, what: &str) -> Result<(), SetupError> {
    if let (Some(theirs), true) = (&dest.account, args.direct) {
        let ours = storage_account(args)?;
        if ours.as_deref() != Some(theirs.as_str()) {
            return Err(SetupError::AccountMismatch {
                what: what.to_string(),
                theirs: theirs.clone(),
                ours,
            });
        }
    }
    Ok(())
}

/// The account of `--storage-url`; a URL that also names a container is refused,
/// so `--to` is never silently nested one level deeper.
fn storage_account(args: &UploadArgs) -> Result<Option<String>, SetupError> {
    let Some(text) = &args.connection.storage_url else {
        return Ok(None);
    };
    let url = url::Url::parse(text).map_err(|source| SetupError::StorageUrl {
        text: text.clone(),
        source,
    })?;
    let host = url.host_str().unwrap_or_default();
    // Azurite and other emulators are path-style: the first segment is the account.
    let path_style = host.parse::<std::net::IpAddr>().is_ok() || host == "localhost";
    let segments = url
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).count())
        .unwrap_or(0);
    if segments > usize::from(path_style) {
        let mut service = url.clone();
        service.set_query(None);
        return Err(SetupError::StorageUrlPath { service });
    }
    Ok(relay_storage::credentials::account_name(&url))
}

pub fn options(args: &UploadArgs, dest: &Destination) -> Result<Options, SetupError> {
    let overwrite = match (&args.if_match, args.overwrite) {
        (Some(etag), _) => Overwrite::IfMatch { etag: etag.clone() },
        (None, OverwriteMode::Always) => Overwrite::Always,
        // if-different and if-newer start as never: the relay then checks its seal
        // on the blob, and the refusal names the blob for the second step.
        (None, OverwriteMode::Never | OverwriteMode::IfDifferent | OverwriteMode::IfNewer) => {
            Overwrite::Never
        }
    };
    Ok(Options {
        token: bearer(args)?,
        container: dest.container.clone(),
        overwrite,
        block_size: args.block_size,
        content_type: args.content_type.clone(),
        metadata: parse_metadata(&args.metadata)?,
        put_md5: args.put_md5,
        compress: args.compress,
        order: Default::default(),
    })
}

/// The relay's token: `--token`, or with `--entra` an Entra ID token for
/// `--entra-scope`, fetched when the first Offer needs it (`mode` asks for it
/// before any file, so a sign-in problem is one setup error).
fn bearer(args: &UploadArgs) -> Result<Bearer, SetupError> {
    let token = args.connection.token.clone().unwrap_or_default();
    let Some(flow) = args.connection.entra.filter(|_| !args.direct) else {
        return Ok(Bearer::Static(Secret(token)));
    };
    if !token.is_empty() {
        return Err(SetupError::TokenAndEntra);
    }
    let audience = args
        .connection
        .entra_scope
        .as_deref()
        .ok_or(SignInError::NoScope)?;
    let scope = crate::sign_in::scope(audience)?;
    let credential = crate::sign_in::credential(&sign_in(&args.connection, flow))?;
    Ok(Bearer::Entra(Arc::new(EntraToken::new(
        credential, flow, scope,
    ))))
}

fn sign_in(c: &ConnectionArgs, flow: Flow) -> SignIn {
    SignIn {
        flow,
        tenant: c.entra_tenant.clone(),
        client_id: c.entra_client_id.clone(),
    }
}

pub fn windows(args: &UploadArgs) -> Windows {
    Windows {
        stream_window: args.connection.stream_window,
        connection_window: args.connection.connection_window,
        congestion: args.connection.congestion,
        max_rate_mbit: args.connection.max_rate,
        fair: args.fair,
        probe_train: !args.no_probe_train,
        // Its whole connection window may be in flight (uploads).
        send_window: None,
    }
}

fn parse_metadata(items: &[String]) -> Result<BTreeMap<String, String>, SetupError> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| SetupError::MetadataItem { item: item.clone() })?;
        out.insert(k.to_string(), v.to_string());
    }
    relay_proto::blob_name::validate_metadata(&out)?;
    Ok(out)
}

fn trust(c: &ConnectionArgs) -> Result<Trust, SetupError> {
    match (&c.relay_cert_sha256, &c.relay_ca, c.insecure) {
        (Some(fp), None, false) => Ok(Trust::Pinned(relay_transport::tls::parse_fingerprint(fp)?)),
        (None, Some(ca), false) => Ok(Trust::CaFile(ca.clone())),
        (None, None, true) => {
            eprintln!(
                "relay-client: WARNING: --insecure: the relay is not verified; anyone on the path can read and alter this upload"
            );
            Ok(Trust::Insecure)
        }
        (None, None, false) => Err(SetupError::NoTrust),
        _ => Err(SetupError::ConflictingTrust),
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

/// Direct mode from the flags: the same writer the relay uses, straight to
/// storage, sized from the measured round trip (`direct_sizing`).
pub async fn direct_mode(
    args: &UploadArgs,
    bearer: &Bearer,
    container: &str,
) -> Result<Direct, SetupError> {
    let url = args.connection.storage_url.clone().unwrap_or_default();
    storage_account(args)?;
    let key = args.connection.account_key.clone().map(Secret);
    // After a fallback from the relay, the identity already signed in (one
    // device code prompt, not two); else --entra's flow, the Azure CLI by default.
    let access = StorageAccess::resolve_with(&url, key.as_ref(), || match bearer {
        Bearer::Entra(e) => Ok(e.credential()),
        Bearer::Static(_) => crate::sign_in::azure_credential(&sign_in(
            &args.connection,
            args.connection.entra.unwrap_or(Flow::Cli),
        )),
    })?;
    let writer = WriterOptions {
        block_checksum: args.block_checksum,
        patience: Patience::both(args.storage_stall_timeout),
        ..WriterOptions::default()
    };
    let storage = Storage::new(access, &writer)?;
    let warm = args
        .connections
        .map_or(WARM_CONNECTIONS, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        })
        .min(WARM_CONNECTIONS);
    let rtt = check_access(&storage, container, warm).await?;
    if args.create_container && !args.dry_run {
        storage
            .ensure_container(container)
            .await
            .map_err(|source| SetupError::CreateContainer {
                container: container.to_string(),
                source,
            })?;
    }
    let key_file = args
        .connection
        .id_key_file
        .clone()
        .or_else(default_direct_key_file)
        .ok_or(SetupError::NoKeyFile)?;
    let id_key = relay_proto::id_key::IdKey::load_or_create(&key_file)?;
    let tcp_congestion = system_tcp_congestion();
    let path = crate::transfer::direct_sizing::Path {
        rtt,
        tcp_congestion: tcp_congestion.as_deref(),
    };
    let connections = args
        .connections
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let sizing = match args.requests {
        Requests::Blocks => {
            direct_sizing::choose(path, args.block_size, connections, args.memory_budget)
        }
        Requests::Ranges => {
            direct_sizing::ranges(path, MAX_CHECKED_RANGE, connections, args.memory_budget)
        }
    };
    if !args.quiet {
        eprintln!("relay-client: direct: {}", sizing.why);
    }
    tracing::info!(why = %sizing.why, "direct mode sizing");
    Ok(Direct {
        storage,
        id_key,
        budget: Budget::new(args.memory_budget),
        connections: sizing.connections,
        block_size: sizing.block_size,
        storage_rtt: rtt,
        fell_back: false,
    })
}

/// The TCP congestion control new sockets of this process get: direct mode
/// does not choose one, so its connections have the system's default (Linux:
/// `net.ipv4.tcp_congestion_control` of this network namespace). `None` where
/// it cannot be read (other systems: Windows and macOS default to CUBIC).
pub fn system_tcp_congestion() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The blob the access check and the round-trip sample ask about (it need not
/// exist: its properties request answers "not found" just as quickly).
const ACCESS_CHECK_BLOB: &str = ".relay-client-access-check";

/// Connections opened by the access check, so the first file's blocks find
/// them open: as many as direct mode's smallest sizing puts in flight
/// (`direct_sizing`), or the user's `--connections` if fewer.
const WARM_CONNECTIONS: usize = 8;

/// The credentials checked before any file, and the storage round trip that
/// sizes direct mode, in one round of requests: `warm` properties requests at
/// once, each on a connection of its own that then waits in the pool for the
/// first file's blocks (`with_writer_options` shares it), and beside them a bare
/// TCP connect to the service, timed (`tcp_round_trip`).
///
/// The first answer settles the credentials: a missing or wrong one fails here
/// with its cause in seconds, instead of every file retrying it as if it were a
/// transient error (if none succeeds, the first failure is the cause). The
/// round trip is the TCP handshake's: one round trip, no TLS or service time.
/// Where that connect cannot be made (a proxy in the way), the first answer's
/// time stands in: a connection's handshakes and one request, so a near path
/// may be taken for a farther one (the sizing only tells near, < 20 ms, from
/// far, >= 60 ms).
///
/// One round of requests, not three in a row: on a far path each round trip
/// before the first block is time no byte moves (docs/bench/direct-honest/).
/// The warm requests that answer later are not waited for.
async fn check_access(
    storage: &Storage,
    container: &str,
    warm: usize,
) -> Result<Option<Duration>, SetupError> {
    // Quick retries, the stall timeout of the flags (`--storage-stall-timeout`).
    let quick = WriterOptions {
        backoff: relay_storage::retry::Backoff {
            initial: Duration::from_millis(200),
            cap: Duration::from_secs(1),
            max_attempts: 2,
        },
        ..storage.writer_options().clone()
    };
    let storage = storage.with_writer_options(&quick);
    let sample = tokio::spawn(tcp_round_trip(storage.access().service_url.clone()));
    let t0 = std::time::Instant::now();
    let mut answers = tokio::task::JoinSet::new();
    for _ in 0..warm.max(1) {
        let writer = storage
            .writer(container, ACCESS_CHECK_BLOB)
            .map_err(SetupError::Writer)?;
        answers.spawn(async move { writer.properties().await.map(|_| t0.elapsed()) });
    }
    let mut first_failure = None;
    let mut answered = None;
    while let Some(joined) = answers.join_next().await {
        match joined {
            Ok(Ok(elapsed)) => {
                answered = Some(elapsed);
                break;
            }
            Ok(Err(e)) => {
                first_failure.get_or_insert(e);
            }
            // A request task that panicked says nothing about the credentials.
            Err(_) => {}
        }
    }
    // The rest finish in the background: their connections are the point.
    answers.detach_all();
    match (answered, first_failure) {
        (Some(answered), _) => Ok(Some(sample.await.ok().flatten().unwrap_or(answered))),
        (None, Some(e)) => Err(SetupError::Credentials(e)),
        (None, None) => Ok(None),
    }
}

/// How long a TCP handshake with the storage service takes: one round trip.
/// `None` when a proxy is configured (the connect would time another path, or
/// none) or the connect fails or takes over `SAMPLE_CONNECT_LIMIT`.
async fn tcp_round_trip(service: url::Url) -> Option<Duration> {
    const PROXY_VARS: [&str; 6] = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ];
    if PROXY_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        return None;
    }
    let host = service.host_str()?.to_string();
    let port = service.port_or_known_default()?;
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .ok()?
        .next()?;
    let t0 = std::time::Instant::now();
    let connect = tokio::net::TcpStream::connect(addr);
    match tokio::time::timeout(SAMPLE_CONNECT_LIMIT, connect).await {
        Ok(Ok(_stream)) => Some(t0.elapsed()),
        _ => None,
    }
}

/// The longest TCP handshake `tcp_round_trip` waits for: a round trip of
/// seconds is far by any measure, and the first answer then stands in.
const SAMPLE_CONNECT_LIMIT: Duration = Duration::from_secs(3);

/// Relay mode, connected once up front so a wrong address or certificate is one
/// clear error; `--fallback direct` turns a failed handshake into direct mode.
/// A relay that does not answer is waited for within `--patience` (not with
/// `--fallback`, which asks for direct mode instead of waiting); if patience
/// runs out here the link says so (`RelayLink::gave_up`) and the run stops
/// resumably before any file starts.
pub async fn mode(
    args: &UploadArgs,
    bearer: &Bearer,
    container: &str,
    weather: WeatherSink,
) -> Result<Mode, SetupError> {
    if args.direct {
        return Ok(Mode::Direct(Box::new(
            direct_mode(args, bearer, container).await?,
        )));
    }
    if args.create_container {
        return Err(SetupError::CreateContainerNeedsDirect);
    }
    if let Some(rate) = args.connection.max_rate {
        crate::relay::rate::set_cap(rate);
    }
    let relay = args.connection.relay.clone().unwrap_or_default();
    match bearer {
        Bearer::Static(t) if t.0.is_empty() => return Err(SetupError::NoToken),
        Bearer::Static(_) => {}
        // The first token now: a sign-in that cannot work is one setup error
        // before any file, and a device code prompt comes before the progress.
        Bearer::Entra(_) => {
            bearer.current().await?;
        }
    }
    let trust = trust(&args.connection)?;
    let (addr, name) = resolve(&relay).await?;
    let name = args.connection.server_name.clone().unwrap_or(name);
    let n = usize::try_from(args.connection.relay_connections).map_or(1, |n| n.max(1));
    let (memory, cache) = path_memory(&args.connection, addr, &name);
    let link = |warm, observer, cache| -> Result<RelayLink, SetupError> {
        let memory = PathMemory {
            warm,
            observer: Some(observer),
        };
        let observer = memory.observer.clone().unwrap_or_default();
        let mut connector =
            Connector::with_memory(&trust, &windows(args), memory, 8 << 20, addr.is_ipv6())?;
        connector.announce_zstd(
            &trust,
            args.compress != crate::transfer::compress::Mode::Off,
        )?;
        let silence = args.connection.idle_timeout.max(Duration::from_secs(1));
        // The watchdog must hear an ACK well within its silence limit.
        connector.keep_alive(silence / 3);
        Ok(RelayLink::new(
            connector,
            relay.clone(),
            addr,
            name.clone(),
            args.connection.connect_timeout,
            args.connection.busy_wait,
            silence,
            args.connection.patience,
            observer,
            cache,
            weather.clone(),
        ))
    };
    // Each connection starts warm from its share of the saved path, with an
    // observer of its own; the first keeps the cache, for the run's total.
    let warm = memory.warm.map(|e| crate::relay::spread::share(e, n));
    let first = link(warm, memory.observer.clone().unwrap_or_default(), cache)?;
    let rest = (1..n)
        .map(|_| link(warm, Arc::default(), None))
        .collect::<Result<Vec<_>, _>>()?;
    // The first connection is made now, so a wrong address or certificate is
    // one clear error; the others when a file first needs them.
    let patient = args.fallback.is_none() && first.patient();
    match first.get_with(patient).await {
        Ok(_) => Ok(Mode::Relay(Box::new(RelayLinks::new(first, rest)))),
        Err(_) if first.gave_up() => Ok(Mode::Relay(Box::new(RelayLinks::new(first, rest)))),
        Err(e) if args.fallback.is_some() => {
            eprintln!(
                "relay-client: {}; falling back to direct upload (--fallback direct)",
                e.message
            );
            let mut direct = direct_mode(args, bearer, container).await?;
            direct.fell_back = true;
            Ok(Mode::Direct(Box::new(direct)))
        }
        Err(e) => Err(SetupError::Relay(e)),
    }
}

/// Warm start from the path cache (unless `--no-warm-start`), and an observer
/// whose estimate is saved there after the run (also with `--no-warm-start`).
/// Keyed by address and TLS name: another relay, or the same name elsewhere, is
/// another path.
fn path_memory(
    c: &ConnectionArgs,
    addr: SocketAddr,
    name: &str,
) -> (PathMemory, Option<PathCache>) {
    let observer = Some(Arc::new(PathObserver::default()));
    let cache = c
        .path_cache
        .clone()
        .or_else(path_cache::default_file)
        .map(|file| PathCache::new(file, format!("{addr} {name}")));
    let warm = if c.no_warm_start {
        None
    } else {
        cache.as_ref().and_then(PathCache::load)
    };
    (PathMemory { warm, observer }, cache)
}
