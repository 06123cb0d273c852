//! One storage account: its credentials, the HTTP client every writer shares (with
//! the pool and timeouts of `WriterOptions`), and the blob writers it opens.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64};

use azure_core::http::{ClientOptions, Transport};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};

use crate::blob::BlobWriter;
use crate::credentials::{CannotHoldPath, StorageAccess};
use crate::delete::BlobDeleter;
use crate::error::BlobError;
use crate::listing::Lister;
use crate::options::WriterOptions;
use crate::progress::WatchedClient;
use crate::read::BlobReader;
use crate::retry::{AbandonCounts, RetryCounts};
use crate::sdk::{self, AccountPipeline};

/// The HTTP client could not be built (TLS roots, system configuration).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientBuildError(#[from] reqwest::Error);

/// Opens blob writers against one storage account; cheap to clone.
#[derive(Clone)]
pub struct Storage {
    access: StorageAccess,
    transport: Transport,
    /// Where every writer also records its retries (the relay's metrics).
    retry_counts: Option<Arc<RetryCounts>>,
    /// Where every writer also counts its requests (the relay's metrics).
    request_count: Option<Arc<AtomicU64>>,
    options: WriterOptions,
    /// Permits for requests in flight, shared by every writer opened here.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The requests this crate builds itself (`put_blob.rs`) go through one
    /// pipeline for the account, with the SDK's policies.
    shared: Arc<AccountPipeline>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({:?})", self.access)
    }
}

impl Storage {
    pub fn new(access: StorageAccess, opts: &WriterOptions) -> Result<Self, ClientBuildError> {
        let http = reqwest::Client::builder()
            .connect_timeout(opts.connect_timeout)
            // No read timeout: reqwest's runs from the start of the request to
            // its answer, body upload included, so it would end slow uploads
            // that still move. The writer's watch (`watch.rs`) decides instead.
            .pool_max_idle_per_host(opts.max_idle_per_host)
            .pool_idle_timeout(opts.pool_idle_timeout)
            .tcp_nodelay(true)
            .build()?;
        let transport = Transport::new(Arc::new(WatchedClient::new(http)));
        let shared = Arc::new(AccountPipeline::new(&access, &transport));
        Ok(Self {
            access,
            transport,
            retry_counts: None,
            request_count: None,
            options: opts.clone(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(
                opts.max_concurrent_requests.max(1),
            )),
            shared,
        })
    }

    /// Writers with other options (retries, patience) over this one's HTTP
    /// connections: a request made through either warms the connection the
    /// other's next request takes (direct mode's access check, then its files:
    /// on a 200 ms path a connection is a round trip). Connection-level
    /// options (connect timeout, idle pool) stay this one's.
    pub fn with_writer_options(&self, opts: &WriterOptions) -> Self {
        Self {
            access: self.access.clone(),
            transport: self.transport.clone(),
            retry_counts: self.retry_counts.clone(),
            request_count: self.request_count.clone(),
            options: opts.clone(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(
                opts.max_concurrent_requests.max(1),
            )),
            shared: self.shared.clone(),
        }
    }

    /// The options every writer opened here gets (retries, patience).
    pub fn writer_options(&self) -> &WriterOptions {
        &self.options
    }

    /// Requests this account's writers may have in flight at once
    /// (`--storage-concurrency`).
    pub fn max_requests_in_flight(&self) -> usize {
        self.options.max_concurrent_requests.max(1)
    }

    /// Every writer opened from now on also counts its retries, by status, in
    /// `counts`: live, while transfers run (a writer's own count only reaches its
    /// transfer's Receipt).
    pub fn with_retry_counts(mut self, counts: Arc<RetryCounts>) -> Self {
        self.retry_counts = Some(counts);
        self
    }

    /// Every writer opened from now on also adds each request it sends to `count`.
    pub fn with_request_count(mut self, count: Arc<AtomicU64>) -> Self {
        self.request_count = Some(count);
        self
    }

    pub fn access(&self) -> &StorageAccess {
        &self.access
    }

    fn client_options(&self) -> ClientOptions {
        sdk::client_options(&self.access, &self.transport)
    }

    fn credential(&self) -> Option<Arc<dyn azure_core::credentials::TokenCredential>> {
        sdk::credential(&self.access)
    }

    /// A writer for one blob. Cheap: the SDK's clients for it (a pipeline of
    /// their own) are built only if one of its requests needs them; a small
    /// file's only request, Put Blob, goes through the account's pipeline.
    pub fn writer(&self, container: &str, blob: &str) -> Result<BlobWriter, BlobError> {
        Ok(self.writer_at(self.access.blob_url(container, blob)?))
    }

    /// A reader for one blob (downloads), on the writers' retry schedule,
    /// request limit and counters.
    pub fn reader(&self, container: &str, blob: &str) -> Result<BlobReader, BlobError> {
        Ok(BlobReader {
            w: self.writer(container, blob)?,
        })
    }

    /// Deletes versions of one blob (`delete::BlobDeleter::delete_if_match`),
    /// on the writers' retry schedule, request limit and counters.
    pub fn deleter(&self, container: &str, blob: &str) -> Result<BlobDeleter, BlobError> {
        Ok(BlobDeleter {
            r: self.reader(container, blob)?,
        })
    }

    /// Lists one container a page at a time.
    pub fn lister(&self, container: &str) -> Result<Lister, BlobError> {
        Ok(Lister {
            w: self.writer_at(self.access.container_url(container)?),
            metadata: false,
        })
    }

    /// `writer`, for the blob at `url` (made by `StorageAccess::blob_url`):
    /// for a caller that opens many writers of one blob, its URL made once.
    pub fn writer_at(&self, url: url::Url) -> BlobWriter {
        BlobWriter {
            url,
            sdk: std::sync::OnceLock::new(),
            account: self.shared.clone(),
            retries: Arc::new(AtomicU32::new(0)),
            retry_counts: self.retry_counts.clone(),
            requests: Arc::new(AtomicU32::new(0)),
            unanswered: Arc::new(AtomicU32::new(0)),
            request_count: self.request_count.clone(),
            options: self.options.clone(),
            in_flight: self.in_flight.clone(),
            abandons: Arc::new(AbandonCounts::default()),
        }
    }

    /// Creates a container if it does not exist (demo and tests; the relay never does).
    pub async fn ensure_container(&self, container: &str) -> Result<(), BlobError> {
        self.ensure_container_at(self.access.container_url(container)?)
            .await
    }

    /// `ensure_container`, for the container at `url` (made by
    /// `StorageAccess::container_url`).
    pub async fn ensure_container_at(&self, url: url::Url) -> Result<(), BlobError> {
        let client = BlobContainerClient::new(
            url,
            self.credential(),
            Some(BlobContainerClientOptions {
                client_options: self.client_options(),
                ..Default::default()
            }),
        )
        .map_err(|e| BlobError::from_azure("client setup", e))?;
        match client.create(None).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = BlobError::from_azure("Create Container", e);
                if e.status == Some(409) {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }
}

/// A container or blob name the account's URL cannot hold fails its request
/// before it is sent, as any other error of that request.
impl From<CannotHoldPath> for BlobError {
    fn from(e: CannotHoldPath) -> Self {
        BlobError {
            status: None,
            code: None,
            message: e.to_string(),
        }
    }
}
