//! Relay mode's setup: how to trust the relay, its address, the warm start
//! from the path cache, and the links (one per `--relay-connections`), each
//! with its windows and patience.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use relay_transport::congestion::PathObserver;
use relay_transport::quic::{PathMemory, Windows};

use super::{ModeFlags, SetupError};
use crate::commands::connection_args::ConnectionArgs;
use crate::relay::connect::{Connector, Trust, resolve};
use crate::relay::link::RelayLink;
use crate::relay::links::RelayLinks;
use crate::relay::path_cache::{self, PathCache};
use crate::sign_in::Bearer;
use crate::ui::weather::WeatherSink;

/// The relay's links with the first connected now, so a wrong address or
/// certificate is one clear error (the others connect when a file first
/// needs them). A relay that does not answer is waited for within
/// `--patience` (not with `--fallback`, which asks for direct mode instead of
/// waiting); if patience runs out here the link says so
/// (`RelayLink::gave_up`) and the run stops resumably before any file starts.
/// `None`: the handshake failed and `--fallback direct` takes over.
pub(super) async fn first_connected(
    args: &ConnectionArgs,
    flags: &ModeFlags,
    bearer: &Bearer,
    weather: WeatherSink,
) -> Result<Option<RelayLinks>, SetupError> {
    let (first, rest) = links(args, flags, bearer, weather).await?;
    let patient = !flags.fallback && first.patient();
    match first.get_with(patient).await {
        Ok(_) => Ok(Some(RelayLinks::new(first, rest))),
        Err(_) if first.gave_up() => Ok(Some(RelayLinks::new(first, rest))),
        Err(e) if flags.fallback => {
            eprintln!(
                "relay-client: {}; falling back to direct upload (--fallback direct)",
                e.message
            );
            Ok(None)
        }
        Err(e) => Err(SetupError::Relay(e)),
    }
}

/// The relay's links, none connected yet: the first keeps the path cache
/// (for the run's total), the others (`--relay-connections`) start warm from
/// their share of the saved path with an observer of their own.
async fn links(
    args: &ConnectionArgs,
    flags: &ModeFlags,
    bearer: &Bearer,
    weather: WeatherSink,
) -> Result<(RelayLink, Vec<RelayLink>), SetupError> {
    if let Some(rate) = args.max_rate {
        crate::relay::rate::set_cap(rate);
    }
    let relay = args.relay.clone().unwrap_or_default();
    match bearer {
        Bearer::Static(t) if t.0.is_empty() => return Err(SetupError::NoToken),
        Bearer::Static(_) => {}
        // The first token now: a sign-in that cannot work is one setup error
        // before any file, and a device code prompt comes before the progress.
        Bearer::Entra(_) => {
            bearer.current().await?;
        }
    }
    let trust = trust(args)?;
    let (addr, name) = resolve(&relay).await?;
    let name = args.server_name.clone().unwrap_or(name);
    let n = usize::try_from(args.relay_connections).map_or(1, |n| n.max(1));
    let (memory, cache) = path_memory(args, addr, &name);
    let windows = windows(args, flags);
    let link = |warm, observer, cache| -> Result<RelayLink, SetupError> {
        let memory = PathMemory {
            warm,
            observer: Some(observer),
        };
        let observer = memory.observer.clone().unwrap_or_default();
        let zstd = flags.compress != crate::transfer::compress::Mode::Off;
        let mut connector =
            Connector::with_memory(&trust, &windows, memory, 8 << 20, addr.is_ipv6(), zstd)?;
        let silence = args.idle_timeout.max(Duration::from_secs(1));
        // The watchdog must hear an ACK well within its silence limit.
        connector.keep_alive(silence / 3);
        Ok(RelayLink::new(
            connector,
            relay.clone(),
            addr,
            name.clone(),
            args.connect_timeout,
            args.busy_wait,
            silence,
            args.patience,
            observer,
            cache,
            weather.clone(),
        ))
    };
    let warm = memory.warm.map(|e| crate::relay::spread::share(e, n));
    let first = link(warm, memory.observer.clone().unwrap_or_default(), cache)?;
    let rest = (1..n)
        .map(|_| link(warm, Arc::default(), None))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((first, rest))
}

/// The QUIC windows and congestion control of the relay's connections.
pub fn windows(args: &ConnectionArgs, flags: &ModeFlags) -> Windows {
    Windows {
        stream_window: args.stream_window,
        connection_window: args.connection_window,
        congestion: args.congestion,
        max_rate_mbit: args.max_rate,
        fair: flags.fair,
        probe_train: !flags.no_probe_train,
        // Its whole connection window may be in flight (uploads).
        send_window: None,
    }
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
