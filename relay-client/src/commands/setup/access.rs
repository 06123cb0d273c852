//! The access check of direct mode: the credentials tried before any file,
//! the storage round trip measured beside it, and `--create-container`.

use std::time::Duration;

use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;

use super::SetupError;

/// The credentials checked (`check_access`), then the container made if
/// asked; the storage round trip measured meanwhile.
pub(super) async fn ready(
    storage: &Storage,
    container: &str,
    warm: usize,
    create: bool,
) -> Result<Option<Duration>, SetupError> {
    // The URLs are made once, here: every warm request asks about the same
    // blob, and the container made is the one it names.
    let access = storage.access();
    let probe = (access.blob_url(container, ACCESS_CHECK_BLOB))
        .map_err(|e| SetupError::Writer(e.into()))?;
    let created = |source| SetupError::CreateContainer {
        container: container.to_string(),
        source,
    };
    let to_create = (create.then(|| access.container_url(container)))
        .transpose()
        .map_err(|e| created(e.into()))?;
    let rtt = check_access(storage, &probe, warm).await?;
    if let Some(url) = to_create {
        storage.ensure_container_at(url).await.map_err(created)?;
    }
    Ok(rtt)
}

/// The blob the access check and the round-trip sample ask about (it need not
/// exist: its properties request answers "not found" just as quickly).
const ACCESS_CHECK_BLOB: &str = ".relay-client-access-check";

/// Connections opened by the access check, so the first file's blocks find
/// them open: as many as direct mode's smallest sizing puts in flight
/// (`direct_sizing`), or the user's `--connections` if fewer.
pub(super) const WARM_CONNECTIONS: usize = 8;

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
    probe: &url::Url,
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
    let sample = tokio::spawn(tcp_round_trip(storage.access().service_url.clone()));
    let storage = storage.with_writer_options(&quick);
    let t0 = std::time::Instant::now();
    let mut answers = tokio::task::JoinSet::new();
    for _ in 0..warm.max(1) {
        let writer = storage.writer_at(probe.clone());
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
