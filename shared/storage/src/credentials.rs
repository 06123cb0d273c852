//! How the blob writer authenticates to Azure Storage: Entra ID (managed identity on
//! a VM, Azure CLI for a person), a SAS in the URL, or an account SAS we sign from an
//! account key. Secrets stay out of logs and out of the URL we print.

use std::sync::{Arc, Mutex};

use azure_core::credentials::TokenCredential;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Request, Url};
use time::OffsetDateTime;

use crate::sas::{SasError, account_sas};
use relay_proto::logsafe::hide_sas_signatures;
use relay_proto::secret::Secret;

/// `--entra` names no credential we know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown Entra ID source {0:?} (managed-identity | cli)")]
pub struct EntraSourceError(pub String);

/// Why the storage URL and credentials cannot be used. The URL is quoted
/// with its SAS signature hidden.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("invalid storage URL {:?}: {source}", hide_sas_signatures(url))]
    InvalidUrl {
        url: String,
        source: url::ParseError,
    },
    #[error("storage URL {:?} must be http or https", hide_sas_signatures(url))]
    Scheme { url: String },
    /// An account key needs the account's name, from the host or the path.
    #[error("cannot tell the account name from {:?}", hide_sas_signatures(url))]
    NoAccountName { url: String },
    /// The account key cannot sign a SAS.
    #[error(transparent)]
    AccountKey(#[from] SasError),
    #[error(
        "storage URL {service_url} uses http: Entra ID needs https; give --account-key or a SAS in the URL"
    )]
    EntraNeedsHttps { service_url: Url },
    /// The Entra ID credential could not be set up.
    #[error(transparent)]
    Entra(azure_core::Error),
}

/// A storage URL that cannot have a container and blob path added to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("storage URL {0} cannot hold a path")]
pub struct CannotHoldPath(pub Url);

/// Which Entra ID credential to use when neither a SAS nor a key is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntraSource {
    /// Managed identity (the relay VM); the default for services.
    #[default]
    ManagedIdentity,
    /// The signed-in Azure CLI / azd user (people at their desk).
    DeveloperTools,
}

impl std::str::FromStr for EntraSource {
    type Err = EntraSourceError;
    fn from_str(s: &str) -> Result<Self, EntraSourceError> {
        match s {
            "managed-identity" => Ok(Self::ManagedIdentity),
            "cli" | "developer-tools" => Ok(Self::DeveloperTools),
            _ => Err(EntraSourceError(s.to_string())),
        }
    }
}

impl EntraSource {
    /// The credential this source names.
    pub fn credential(self) -> Result<Arc<dyn TokenCredential>, azure_core::Error> {
        Ok(match self {
            EntraSource::ManagedIdentity => azure_identity::ManagedIdentityCredential::new(None)?,
            EntraSource::DeveloperTools => azure_identity::DeveloperToolsCredential::new(None)?,
        })
    }
}

/// Resolved storage endpoint and authentication.
#[derive(Clone)]
pub struct StorageAccess {
    /// Blob service URL without query (e.g. `https://acct.blob.core.windows.net/`).
    pub service_url: Url,
    pub auth: StorageAuth,
}

#[derive(Clone)]
pub enum StorageAuth {
    Entra(Arc<dyn TokenCredential>),
    /// A policy that adds a SAS (fixed, or signed from the key) to every request.
    Sas(Arc<SasPolicy>),
}

impl std::fmt::Debug for StorageAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.auth {
            StorageAuth::Entra(_) => "entra-id",
            StorageAuth::Sas(p) => p.kind(),
        };
        write!(f, "StorageAccess({} via {kind})", self.service_url)
    }
}

impl StorageAccess {
    /// Order: an account key if given (we sign a short-lived SAS), else a SAS in the
    /// URL, else Entra ID. Entra ID needs https; a key or SAS also works over http
    /// (Azurite).
    pub fn resolve(
        url: &str,
        account_key: Option<&Secret>,
        entra: EntraSource,
    ) -> Result<Self, CredentialError> {
        Self::resolve_with(url, account_key, || entra.credential())
    }

    /// `resolve`, with the Entra ID credential made by `entra` (called only when
    /// neither a key nor a SAS is given): the client's sign-in flows
    /// (device code, workload identity) beside the two this crate makes.
    pub fn resolve_with(
        url: &str,
        account_key: Option<&Secret>,
        entra: impl FnOnce() -> Result<Arc<dyn TokenCredential>, azure_core::Error>,
    ) -> Result<Self, CredentialError> {
        let mut service_url = Url::parse(url).map_err(|source| CredentialError::InvalidUrl {
            url: url.to_string(),
            source,
        })?;
        if !matches!(service_url.scheme(), "http" | "https") {
            return Err(CredentialError::Scheme {
                url: url.to_string(),
            });
        }
        let sas_in_url = service_url
            .query_pairs()
            .any(|(k, _)| k == "sig")
            .then(|| service_url.query().unwrap_or_default().to_string());
        service_url.set_query(None);
        if !service_url.path().ends_with('/') {
            let p = format!("{}/", service_url.path());
            service_url.set_path(&p);
        }
        let auth = if let Some(key) = account_key {
            let account =
                account_name(&service_url).ok_or_else(|| CredentialError::NoAccountName {
                    url: url.to_string(),
                })?;
            // Fail now, not on the first request, if the key is unusable.
            account_sas(
                &account,
                &key.0,
                OffsetDateTime::now_utc(),
                time::Duration::hours(1),
            )?;
            StorageAuth::Sas(Arc::new(SasPolicy::from_key(account, key.clone())))
        } else if let Some(sas) = sas_in_url {
            StorageAuth::Sas(Arc::new(SasPolicy::fixed(sas)))
        } else {
            if service_url.scheme() != "https" {
                return Err(CredentialError::EntraNeedsHttps { service_url });
            }
            StorageAuth::Entra(entra().map_err(CredentialError::Entra)?)
        };
        Ok(Self { service_url, auth })
    }

    /// URL of a blob: one path segment per `/`-separated part, each percent-encoded.
    pub fn blob_url(&self, container: &str, blob: &str) -> Result<Url, CannotHoldPath> {
        let mut url = self.service_url.clone();
        {
            let mut segs = url
                .path_segments_mut()
                .map_err(|_| CannotHoldPath(self.service_url.clone()))?;
            segs.pop_if_empty().push(container);
            for part in blob.split('/') {
                segs.push(part);
            }
        }
        Ok(url)
    }

    pub fn container_url(&self, container: &str) -> Result<Url, CannotHoldPath> {
        let mut url = self.service_url.clone();
        url.path_segments_mut()
            .map_err(|_| CannotHoldPath(self.service_url.clone()))?
            .pop_if_empty()
            .push(container);
        Ok(url)
    }
}

/// `acct` from `https://acct.blob.core.windows.net/`, or from the first path
/// segment for emulator-style URLs (`http://127.0.0.1:10000/devstoreaccount1/`).
pub fn account_name(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    let first_path = url.path_segments()?.find(|s| !s.is_empty());
    let is_ip = host.parse::<std::net::IpAddr>().is_ok() || host == "localhost";
    if is_ip {
        first_path.map(str::to_string)
    } else {
        host.split('.').next().map(str::to_string)
    }
}

/// Adds a SAS to every request's query. With a key it signs a fresh one-hour SAS,
/// renewed ten minutes before it expires, so long transfers never hold a stale one.
pub struct SasPolicy {
    source: SasSource,
    cached: Mutex<Option<(String, OffsetDateTime)>>,
}

enum SasSource {
    Fixed(String),
    Key { account: String, key: Secret },
}

impl std::fmt::Debug for SasPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SasPolicy({})", self.kind())
    }
}

impl SasPolicy {
    pub fn fixed(query: String) -> Self {
        Self {
            source: SasSource::Fixed(query),
            cached: Mutex::new(None),
        }
    }

    pub fn from_key(account: String, key: Secret) -> Self {
        Self {
            source: SasSource::Key { account, key },
            cached: Mutex::new(None),
        }
    }

    fn kind(&self) -> &'static str {
        match self.source {
            SasSource::Fixed(_) => "sas",
            SasSource::Key { .. } => "account-key",
        }
    }

    fn current(&self) -> Result<String, SasError> {
        match &self.source {
            SasSource::Fixed(q) => Ok(q.clone()),
            SasSource::Key { account, key } => {
                let now = OffsetDateTime::now_utc();
                let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((q, renew_at)) = cached.as_ref()
                    && now < *renew_at
                {
                    return Ok(q.clone());
                }
                let q = account_sas(account, &key.0, now, time::Duration::hours(1))?;
                *cached = Some((q.clone(), now + time::Duration::minutes(50)));
                Ok(q)
            }
        }
    }
}

#[async_trait::async_trait]
impl Policy for SasPolicy {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let sas = self.current().map_err(|e| {
            azure_core::Error::with_message(azure_core::error::ErrorKind::Credential, e.to_string())
        })?;
        let url = request.url_mut();
        // A retry passes through here again: never add a second signature.
        if !url.query_pairs().any(|(k, _)| k == "sig") {
            let merged = match url.query() {
                Some(q) if !q.is_empty() => format!("{q}&{sas}"),
                _ => sas,
            };
            url.set_query(Some(&merged));
        }
        match next.split_first() {
            Some((head, rest)) => head.send(ctx, request, rest).await,
            None => Err(azure_core::Error::with_message(
                azure_core::error::ErrorKind::Other,
                "SAS policy is the last in the pipeline",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names() {
        let u = |s: &str| Url::parse(s).expect("url");
        assert_eq!(
            account_name(&u("https://acct.blob.core.windows.net/")),
            Some("acct".into())
        );
        assert_eq!(
            account_name(&u("http://127.0.0.1:10000/devstoreaccount1")),
            Some("devstoreaccount1".into())
        );
    }

    #[test]
    fn blob_urls_encode_segments() {
        let a = StorageAccess::resolve(
            "http://127.0.0.1:10000/devstoreaccount1?sv=1&sig=abc",
            None,
            EntraSource::default(),
        )
        .expect("resolve");
        assert!(
            a.service_url.query().is_none(),
            "SAS must not stay in the printed URL"
        );
        let url = a.blob_url("c", "dir/a b#?.bin").expect("url");
        assert_eq!(url.path(), "/devstoreaccount1/c/dir/a%20b%23%3F.bin");
    }

    #[test]
    fn errors_quote_the_url_without_its_signature() {
        for url in [
            "http://127.0.0.1:99999/acct?sv=1&sig=S3CRET",
            "ftp://acct/?sv=1&sig=S3CRET",
        ] {
            let e = StorageAccess::resolve(url, None, EntraSource::default())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("sig=REDACTED"), "{e}");
            assert!(!e.contains("S3CRET"), "{e}");
        }
        let key = Secret("AAECAw==".into());
        let e = StorageAccess::resolve(
            "http://127.0.0.1/?sv=1&sig=S3CRET",
            Some(&key),
            EntraSource::default(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            e.starts_with("cannot tell the account name") && !e.contains("S3CRET"),
            "{e}"
        );
    }

    #[test]
    fn http_without_sas_or_key_is_refused() {
        let e = StorageAccess::resolve("http://127.0.0.1:10000/x", None, EntraSource::default());
        assert!(e.is_err());
    }
}
