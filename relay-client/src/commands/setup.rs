//! Everything decided before the first file moves: destination, per-file options,
//! how to trust the relay, direct mode's storage and key, the relay connection.
//! Each problem here is one `SetupError` (exit status 2), said once, not per file.

use std::collections::BTreeMap;
use std::time::Duration;

use relay_proto::blob_name::MetadataError;
use relay_proto::id_key::IdKeyError;
use relay_proto::logsafe::hide_sas_signatures;
use relay_proto::protocol::Overwrite;
use relay_storage::account::ClientBuildError;
use relay_storage::blob::BlobError;
use relay_storage::checksum::BlockChecksum;
use relay_storage::credentials::CredentialError;
use relay_transport::tls::FingerprintError;

use crate::commands::args::{OverwriteMode, UploadArgs};
use crate::commands::connection_args::ConnectionArgs;
use crate::relay::connect::{AddressError, ConnectorError};
use crate::sign_in::{Bearer, SignInError};
use crate::transfer::direct_sizing::Requests;
use crate::transfer::filter::FilterError;
use crate::transfer::manifest::ManifestError;
use crate::transfer::mode::Mode;
use crate::transfer::refusal::Refusal;
use crate::transfer::send::Options;
use crate::transfer::walk::{Destination, DestinationError, SourceErrors, parse_destination};
use crate::ui::report::FileError;
use crate::ui::weather::WeatherSink;

mod access;
pub mod connection;
mod direct;
mod relay;

pub use direct::system_tcp_congestion;
pub use relay::windows;

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
    /// A file's refusal every other file would get too.
    #[error(transparent)]
    Stopped(#[from] Refusal),
}

pub fn destination(args: &UploadArgs) -> Result<Destination, SetupError> {
    let dest = parse_destination(&args.to)?;
    same_account(&args.connection, args.direct, &dest, "--to")?;
    Ok(dest)
}

/// In direct mode, a blob URL (`what`: `--to`, a download's source) must
/// name `--storage-url`'s account: the credentials are that account's, and
/// another account's blobs are not there.
pub fn same_account(
    args: &ConnectionArgs,
    direct: bool,
    dest: &Destination,
    what: &str,
) -> Result<(), SetupError> {
    if let (Some(theirs), true) = (&dest.account, direct) {
        let ours = direct::storage_account(args)?;
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
        token: connection::bearer(&args.connection, args.direct)?,
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

/// What shapes a command's connection besides its `ConnectionArgs`.
#[derive(Debug, Clone)]
pub struct ModeFlags {
    /// `--direct`: storage instead of the relay.
    pub direct: bool,
    /// `--fallback direct`: direct mode if the relay's handshake fails.
    pub fallback: bool,
    /// `--compress`: announced in the handshake unless `off`.
    pub compress: crate::transfer::compress::Mode,
    pub fair: bool,
    pub no_probe_train: bool,
    pub direct_flags: DirectFlags,
}

/// What direct mode is set up from besides the connection flags.
#[derive(Debug, Clone)]
pub struct DirectFlags {
    pub create_container: bool,
    pub dry_run: bool,
    /// No sizing line on stderr.
    pub quiet: bool,
    pub block_checksum: BlockChecksum,
    pub storage_stall_timeout: Duration,
    pub connections: Option<u64>,
    pub memory_budget: u64,
    pub block_size: Option<u64>,
    /// Blocks (upload, watch) or ranges (download): what the sizing follows.
    pub requests: Requests,
}

impl From<&UploadArgs> for ModeFlags {
    fn from(args: &UploadArgs) -> Self {
        ModeFlags {
            direct: args.direct,
            fallback: args.fallback.is_some(),
            compress: args.compress,
            fair: args.fair,
            no_probe_train: args.no_probe_train,
            direct_flags: DirectFlags {
                create_container: args.create_container,
                dry_run: args.dry_run,
                quiet: args.output.quiet,
                block_checksum: args.block_checksum,
                storage_stall_timeout: args.storage_stall_timeout,
                connections: args.connections,
                memory_budget: args.memory_budget,
                block_size: args.block_size,
                requests: Requests::Blocks,
            },
        }
    }
}

/// Relay mode, connected once up front so a wrong address or certificate is one
/// clear error (`relay::first_connected`); `--fallback direct` turns a failed
/// handshake into direct mode. Direct mode is set up in one place, whether
/// asked for or fallen back to.
pub async fn mode(
    args: &ConnectionArgs,
    flags: &ModeFlags,
    bearer: &Bearer,
    container: &str,
    weather: WeatherSink,
) -> Result<Mode, SetupError> {
    let direct = &flags.direct_flags;
    if !flags.direct && direct.create_container {
        return Err(SetupError::CreateContainerNeedsDirect);
    }
    let fell_back = !flags.direct;
    if fell_back {
        let links = relay::first_connected(args, flags, bearer, weather).await?;
        if let Some(links) = links {
            return Ok(Mode::Relay(Box::new(links)));
        }
    }
    let mut d = direct::direct_mode(args, direct, bearer, container).await?;
    d.fell_back = fell_back;
    Ok(Mode::Direct(Box::new(d)))
}
