//! `--entra-*` flags into an `entra::Entra` (reads the CA file, builds the HTTPS
//! client that fetches the tenant's keys).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::operations::config::SignInArgs;
use crate::sign_in::entra::grants::GrantError;
use crate::sign_in::entra::{Entra, Grants, KeySource, Policy, RefreshBudget};

/// The window `--entra-key-refreshes` counts in.
pub const REFRESH_WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum EntraConfigError {
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error(
        "--entra-audience needs at least one --entra-grant, --entra-reader-roles or --entra-deleter-roles (no principal could do anything)"
    )]
    NoGrant,
    #[error("--entra-authority must be https://, not {0:?}")]
    NotHttps(String),
    #[error("--entra-ca-file {}: {reason}", path.display())]
    CaFile { path: PathBuf, reason: String },
    #[error("cannot build the HTTPS client for Entra ID keys: {0}")]
    Client(String),
}

/// `None` unless `--entra-audience` is given. `auth_deadline` bounds how long a token waits for a key fetch (`key_wait`).
pub fn entra(
    args: &SignInArgs,
    auth_deadline: Duration,
) -> Result<Option<Arc<Entra>>, EntraConfigError> {
    let (false, Some(tenant)) = (args.entra_audience.is_empty(), &args.entra_tenant) else {
        return Ok(None);
    };
    let grants = Grants::parse(&args.entra_grant)?
        .with_reader_roles(args.entra_reader_roles)
        .with_deleter_roles(args.entra_deleter_roles);
    if grants.is_empty() {
        return Err(EntraConfigError::NoGrant);
    }
    let authority = args.entra_authority.trim_end_matches('/').to_string();
    if !authority.starts_with("https://") {
        return Err(EntraConfigError::NotHttps(authority));
    }
    let issuers = if args.entra_issuer.is_empty() {
        Policy::default_issuers(&authority, tenant)
    } else {
        args.entra_issuer.clone()
    };
    let policy = Policy {
        tenant: tenant.clone(),
        issuers,
        audiences: args.entra_audience.clone(),
        skew_secs: i64::try_from(args.entra_skew.as_secs()).unwrap_or(i64::MAX),
    };
    let http = client(args.entra_ca_file.as_ref())?;
    let keys = KeySource::new(
        http,
        format!("{authority}/{tenant}/v2.0/.well-known/openid-configuration"),
        RefreshBudget::new(
            usize::try_from(args.entra_key_refreshes).unwrap_or(1),
            REFRESH_WINDOW,
        ),
    )
    .with_wait(key_wait(auth_deadline));
    Ok(Some(Arc::new(Entra::new(policy, keys, grants))))
}

/// How long a token waits for a key fetch: half of `--auth-deadline`, so an
/// Offer sent early in its connection's deadline (a client sends it within a
/// round trip of the handshake) is answered before the deadline, whatever the
/// key endpoint does; the HTTPS client's own timeouts are longer.
pub fn key_wait(auth_deadline: Duration) -> Duration {
    auth_deadline / 2
}

/// HTTPS only, bounded in time; with `ca`, one more trusted root.
pub fn client(ca: Option<&PathBuf>) -> Result<reqwest::Client, EntraConfigError> {
    let mut b = reqwest::Client::builder()
        .https_only(true)
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(20));
    if let Some(path) = ca {
        let bad = |reason: String| EntraConfigError::CaFile {
            path: path.clone(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no certificate".into()));
        }
        b = b.tls_certs_merge(certs);
    }
    b.build()
        .map_err(|e| EntraConfigError::Client(e.to_string()))
}
