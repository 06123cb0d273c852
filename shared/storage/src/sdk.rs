//! The Azure SDK's side of one storage account, shared by its writers: the
//! pipeline for the requests this crate builds itself and the SDK's clients for
//! one blob. `account` (which opens writers) and `blob` (the writer) both build
//! on it, so neither needs the other's internals.

use std::sync::Arc;

use azure_core::http::policies::Policy;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::{ClientOptions, Pipeline, RetryOptions, Transport};
use azure_storage_blob::{BlobClient, BlobClientOptions, BlockBlobClient};

use crate::credentials::{StorageAccess, StorageAuth};
use crate::error::BlobError;

/// The scope of an Entra ID token for Azure Storage (what `BlobClient::new` asks for).
const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

/// The SDK's clients for one blob (one pipeline, shared by both).
pub(crate) struct SdkClients {
    pub blob: BlobClient,
    pub block: BlockBlobClient,
}

/// What every writer of an account shares: one pipeline for the requests this
/// crate builds itself, the REST API version they name (the SDK's own), and
/// what a writer needs to build the SDK's clients when it has to.
pub(crate) struct AccountPipeline {
    pub pipeline: Pipeline,
    pub version: String,
    client_options: ClientOptions,
    credential: Option<Arc<dyn azure_core::credentials::TokenCredential>>,
}

impl AccountPipeline {
    /// The pipeline `BlobClient::new` builds for a blob of this account (its
    /// per-try auth policy: the SAS, or the Entra ID bearer token for
    /// storage), built once.
    pub(crate) fn new(access: &StorageAccess, transport: &Transport) -> Self {
        let mut per_try: Vec<Arc<dyn Policy>> = Vec::new();
        if let Some(c) = credential(access) {
            per_try.push(Arc::new(BearerTokenAuthorizationPolicy::new(
                c,
                vec![STORAGE_SCOPE],
            )));
        }
        Self {
            pipeline: Pipeline::new(
                option_env!("CARGO_PKG_NAME"),
                option_env!("CARGO_PKG_VERSION"),
                client_options(access, transport),
                Vec::new(),
                per_try,
                None,
            ),
            version: BlobClientOptions::default().version,
            client_options: client_options(access, transport),
            credential: credential(access),
        }
    }

    /// The SDK's clients for the blob at `url`: one pipeline, shared by both.
    pub(crate) fn blob_clients(&self, url: &url::Url) -> Result<SdkClients, BlobError> {
        let blob = BlobClient::new(
            url.clone(),
            self.credential.clone(),
            Some(BlobClientOptions {
                client_options: self.client_options.clone(),
                ..Default::default()
            }),
        )
        .map_err(|e| BlobError::from_azure("client setup", e))?;
        let block = blob.block_blob_client();
        Ok(SdkClients { blob, block })
    }
}

/// Our transport, no SDK retries (the writer has its own), and the SAS policy
/// when the account is reached by SAS.
pub(crate) fn client_options(access: &StorageAccess, transport: &Transport) -> ClientOptions {
    let mut o = ClientOptions {
        transport: Some(transport.clone()),
        retry: RetryOptions::none(),
        ..Default::default()
    };
    if let StorageAuth::Sas(p) = &access.auth {
        o.per_try_policies.push(p.clone());
    }
    o
}

pub(crate) fn credential(
    access: &StorageAccess,
) -> Option<Arc<dyn azure_core::credentials::TokenCredential>> {
    match &access.auth {
        StorageAuth::Entra(c) => Some(c.clone()),
        StorageAuth::Sas(_) => None,
    }
}
