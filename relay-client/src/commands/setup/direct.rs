//! Direct mode's setup: the storage account and its credentials, checked
//! once before any file, direct mode's key, and its sizing from the measured
//! round trip to storage.

use relay_proto::protocol::Secret;
use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::StorageAccess;
use relay_storage::staging::Budget;
use relay_storage::watch::Patience;

use super::access::{self, WARM_CONNECTIONS};
use super::{DirectFlags, SetupError};
use crate::commands::connection_args::ConnectionArgs;
use crate::sign_in::{Bearer, Flow, SignIn};
use crate::transfer::direct::Direct;
use crate::transfer::direct_sizing;

/// The account of `--storage-url`; a URL that also names a container is refused,
/// so `--to` is never silently nested one level deeper.
pub(super) fn storage_account(args: &ConnectionArgs) -> Result<Option<String>, SetupError> {
    let Some(text) = &args.storage_url else {
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
    args: &ConnectionArgs,
    flags: &DirectFlags,
    bearer: &Bearer,
    container: &str,
) -> Result<Direct, SetupError> {
    let storage = storage(args, flags, bearer)?;
    let warm = flags
        .connections
        .map_or(WARM_CONNECTIONS, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        })
        .min(WARM_CONNECTIONS);
    let create = flags.create_container && !flags.dry_run;
    let rtt = access::ready(&storage, container, warm, create).await?;
    let key_file = args
        .id_key_file
        .clone()
        .or_else(default_direct_key_file)
        .ok_or(SetupError::NoKeyFile)?;
    let id_key = relay_proto::id_key::IdKey::load_or_create(&key_file)?;
    let tcp_congestion = system_tcp_congestion();
    let path = direct_sizing::Path {
        rtt,
        tcp_congestion: tcp_congestion.as_deref(),
    };
    let connections = flags
        .connections
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let sizing = direct_sizing::sized(
        flags.requests,
        path,
        flags.block_size,
        connections,
        flags.memory_budget,
    );
    if !flags.quiet {
        eprintln!("relay-client: direct: {}", sizing.why);
    }
    tracing::info!(why = %sizing.why, "direct mode sizing");
    Ok(Direct {
        storage,
        id_key,
        budget: Budget::new(flags.memory_budget),
        connections: sizing.connections,
        block_size: sizing.block_size,
        storage_rtt: rtt,
        fell_back: false,
    })
}

/// The storage account of `--storage-url` with its credentials: an account
/// key, a SAS in the URL, or a signed-in identity.
fn storage(
    args: &ConnectionArgs,
    flags: &DirectFlags,
    bearer: &Bearer,
) -> Result<Storage, SetupError> {
    let url = args.storage_url.clone().unwrap_or_default();
    storage_account(args)?;
    let key = args.account_key.clone().map(Secret);
    // After a fallback from the relay, the identity already signed in (one
    // device code prompt, not two); else --entra's flow, the Azure CLI by default.
    let access = StorageAccess::resolve_with(&url, key.as_ref(), || match bearer {
        Bearer::Entra(e) => Ok(e.credential()),
        Bearer::Static(_) => crate::sign_in::azure_credential(&SignIn {
            flow: args.entra.unwrap_or(Flow::Cli),
            tenant: args.entra_tenant.clone(),
            client_id: args.entra_client_id.clone(),
        }),
    })?;
    let writer = WriterOptions {
        block_checksum: flags.block_checksum,
        patience: Patience::both(flags.storage_stall_timeout),
        ..WriterOptions::default()
    };
    Ok(Storage::new(access, &writer)?)
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
