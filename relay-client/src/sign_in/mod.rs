//! Signing in with Entra ID instead of a shared token: which flow gets the
//! access token (`Flow`), for which audience (`scope`), and the credential that
//! does it. The Azure identity library (`azure_identity`, the one direct mode
//! already uses towards storage) has the Azure CLI, managed identity and
//! workload identity; it has no device code flow, so that one is ours
//! (`device_code`), small, over the documented OAuth 2.0 endpoints. What keeps
//! the relay's token fresh during a long upload is `bearer`.

pub mod bearer;
pub mod device_code;

use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use clap::ValueEnum;

pub use bearer::{Bearer, EntraToken};

/// How the client gets its Entra ID token (`--entra`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Flow {
    /// The signed-in Azure CLI (or Azure Developer CLI) user: `az login` first.
    #[value(alias = "developer-tools")]
    Cli,
    /// A person on a machine without a browser: the client prints a code to
    /// enter at https://microsoft.com/devicelogin on any other device.
    DeviceCode,
    /// The managed identity of this Azure VM (IMDS), or of an App Service /
    /// Container App (IDENTITY_ENDPOINT); --entra-client-id picks a
    /// user-assigned one.
    ManagedIdentity,
    /// A federated (Kubernetes) workload identity: AZURE_CLIENT_ID,
    /// AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE, as the workload
    /// identity webhook sets them.
    WorkloadIdentity,
}

impl Flow {
    pub fn name(self) -> &'static str {
        match self {
            Flow::Cli => "cli",
            Flow::DeviceCode => "device-code",
            Flow::ManagedIdentity => "managed-identity",
            Flow::WorkloadIdentity => "workload-identity",
        }
    }
}

/// A flow and what it may need besides the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    pub flow: Flow,
    /// Directory (tenant) ID: device code's authority path (default
    /// `organizations`), the Azure CLI's `--tenant`, workload identity's tenant
    /// (default AZURE_TENANT_ID).
    pub tenant: Option<String>,
    /// Device code: the public client that asks (default the Azure CLI's);
    /// managed identity: a user-assigned identity's client ID; workload
    /// identity: the federated application (default AZURE_CLIENT_ID).
    pub client_id: Option<String>,
}

/// Why a sign-in cannot even start, or a token cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("--entra {flow}: {source}")]
    Credential {
        flow: &'static str,
        source: azure_core::Error,
    },
    #[error(
        "--entra-scope {0:?}: expected the relay's application ID URI (api://...) or its client ID"
    )]
    Scope(String),
    #[error(
        "--entra needs the relay's application ID URI: --entra-scope api://... or \
         RELAY_ENTRA_SCOPE (`terraform output relay_entra_scope`)"
    )]
    NoScope,
    #[error("cannot get an Entra ID token for the relay (--entra {flow}): {reason}")]
    Token { flow: &'static str, reason: String },
}

/// The OAuth scope for an audience: `api://blob-relay` and
/// `api://blob-relay/` become `api://blob-relay/.default` (the app's
/// permissions as granted: its app roles); a scope already ending in
/// `/.default` stays.
pub fn scope(audience: &str) -> Result<String, SignInError> {
    let a = audience.trim();
    if a.is_empty() || a.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SignInError::Scope(audience.to_string()));
    }
    if a.ends_with("/.default") {
        return Ok(a.to_string());
    }
    Ok(format!("{}/.default", a.trim_end_matches('/')))
}

/// The credential for a flow, for the relay's token. Nothing is asked of Entra
/// ID yet (the first token is fetched when an Offer first needs one).
pub fn credential(s: &SignIn) -> Result<Arc<dyn TokenCredential>, SignInError> {
    azure_credential(s).map_err(|source| SignInError::Credential {
        flow: s.flow.name(),
        source,
    })
}

/// `credential`, with the Azure SDK's error (what storage's credentials take).
pub fn azure_credential(s: &SignIn) -> azure_core::Result<Arc<dyn TokenCredential>> {
    let err = |e| e;
    Ok(match s.flow {
        Flow::Cli => {
            // The Azure CLI alone when a tenant is named (azd takes no tenant).
            if let Some(tenant) = &s.tenant {
                let options = azure_identity::AzureCliCredentialOptions {
                    tenant_id: Some(tenant.clone()),
                    ..Default::default()
                };
                azure_identity::AzureCliCredential::new(Some(options)).map_err(err)?
            } else {
                azure_identity::DeveloperToolsCredential::new(None).map_err(err)?
            }
        }
        Flow::ManagedIdentity => {
            let options = azure_identity::ManagedIdentityCredentialOptions {
                user_assigned_id: s
                    .client_id
                    .clone()
                    .map(azure_identity::UserAssignedId::ClientId),
                ..Default::default()
            };
            azure_identity::ManagedIdentityCredential::new(Some(options)).map_err(err)?
        }
        Flow::WorkloadIdentity => {
            let options = azure_identity::WorkloadIdentityCredentialOptions {
                client_id: s.client_id.clone(),
                tenant_id: s.tenant.clone(),
                ..Default::default()
            };
            azure_identity::WorkloadIdentityCredential::new(Some(options)).map_err(err)?
        }
        Flow::DeviceCode => Arc::new(
            device_code::DeviceCodeCredential::new(s.tenant.clone(), s.client_id.clone())
                .map_err(err)?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_end_in_default() {
        let ok = |a: &str| scope(a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok("api://blob-relay"), "api://blob-relay/.default");
        assert_eq!(ok("api://blob-relay/"), "api://blob-relay/.default");
        assert_eq!(ok("api://blob-relay/.default"), "api://blob-relay/.default");
        assert_eq!(
            ok("0b5e7c1e-1111-4222-8333-444455556666"),
            "0b5e7c1e-1111-4222-8333-444455556666/.default"
        );
        for bad in ["", "  ", "api://a b", "api://a\u{7}b"] {
            assert!(scope(bad).is_err(), "{bad:?}");
        }
    }
}
