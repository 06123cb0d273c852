//! The blob writer: Put Block, Get Block List, Put Block List and Get Properties over
//! Microsoft's `azure_storage_blob`, with our own HTTP client, our own retry schedule
//! (the SDK's is turned off so retries are counted and bounded), and errors that
//! name what Azure said.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use azure_core::error::CheckSuccessOptions;
use azure_core::http::{Context, Etag, NoFormat, PipelineSendOptions, RequestContent};
use azure_storage_blob::models::{
    BlobClientGetPropertiesResultHeaders, BlockBlobClientCommitBlockListOptions,
    BlockBlobClientCommitBlockListResultHeaders, BlockBlobClientGetBlockListOptions,
    BlockBlobClientStageBlockOptions, BlockListType, BlockLookupList,
};
use bytes::Bytes;
use md5::{Digest, Md5};

use crate::checksum::{BlockChecksum, azure_crc64, crc64_header_bytes};
use crate::progress::{BodyTracker, TRACKER};
use crate::put_blob::{self, BodyChecksum, PutBlob};
use crate::retry::{AbandonCounts, Abandoned, RetryCounts};
use crate::sdk::{AccountPipeline, SdkClients};
use crate::store::{BlobStore, Commit, Condition};
use crate::watch::{Abandon, RequestWatch};
use relay_proto::blob_name::SHA256_METADATA_KEY;
use relay_proto::id_key::{SEAL_METADATA_KEY, WRITER_METADATA_KEY};

pub use crate::error::{BlobError, TIMEOUT_CODE};
pub use crate::options::WriterOptions;
pub use crate::store::BlobProperties;

/// Writes one blob. Every call retries transient failures on the writer's schedule
/// and counts the retries.
pub struct BlobWriter {
    pub(crate) url: url::Url,
    /// The SDK's clients for this blob, built on the first request that needs
    /// them (Put Blob does not: `put_blob.rs`).
    pub(crate) sdk: OnceLock<SdkClients>,
    pub(crate) account: Arc<AccountPipeline>,
    pub(crate) retries: Arc<AtomicU32>,
    pub(crate) retry_counts: Option<Arc<RetryCounts>>,
    pub(crate) requests: Arc<AtomicU32>,
    /// Attempts that ended without an answer from storage (`unanswered`).
    pub(crate) unanswered: Arc<AtomicU32>,
    pub(crate) request_count: Option<Arc<AtomicU64>>,
    pub(crate) options: WriterOptions,
    pub(crate) in_flight: Arc<tokio::sync::Semaphore>,
    pub(crate) abandons: Arc<AbandonCounts>,
}

impl BlobWriter {
    /// The SDK's clients, built now if this is the first request to need them.
    pub(crate) fn sdk(&self) -> Result<&SdkClients, BlobError> {
        if let Some(c) = self.sdk.get() {
            return Ok(c);
        }
        let built = self.account.blob_clients(&self.url)?;
        Ok(self.sdk.get_or_init(|| built))
    }

    pub fn retries(&self) -> u32 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Storage requests this writer sent (retries included).
    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Attempts that ended with no answer (a transport error, a timeout): each
    /// may have reached storage and been done there.
    pub fn unanswered(&self) -> u32 {
        self.unanswered.load(Ordering::Relaxed)
    }

    /// What this writer's requests gave up, by reason.
    pub fn abandoned(&self) -> Abandoned {
        self.abandons.snapshot()
    }

    /// One attempt of a raw request through the account's pipeline: its
    /// answer unread, an error for any status not in `success`.
    pub(crate) async fn answer(
        &self,
        r: &mut azure_core::http::Request,
        success: &'static [u16],
    ) -> azure_core::Result<azure_core::http::AsyncRawResponse> {
        let options = azure_core::http::PipelineStreamOptions {
            check_success: CheckSuccessOptions {
                success_codes: success,
            },
            ..Default::default()
        };
        self.account
            .pipeline
            .stream(&Context::new(), r, Some(options))
            .await
    }

    /// Sends `call` until it succeeds, fails for good, or the backoff gives up.
    /// Each attempt is abandoned only for making no progress (`watch.rs`):
    /// `has_body` says whether it sends one, `answer_allowance` is time the
    /// service may need beyond the usual to answer.
    pub(crate) async fn with_retry<T, F, Fut>(
        &self,
        op: &str,
        has_body: bool,
        answer_allowance: Duration,
        mut call: F,
    ) -> Result<T, BlobError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = azure_core::Result<T>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            self.requests.fetch_add(1, Ordering::Relaxed);
            if let Some(c) = &self.request_count {
                c.fetch_add(1, Ordering::Relaxed);
            }
            // The watch starts when the request may go out, not when it started
            // waiting for a permit. The semaphore is never closed.
            let permit = self.in_flight.acquire().await.ok();
            let outcome = self.attempt(op, has_body, answer_allowance, call()).await;
            drop(permit);
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if e.status.is_none() {
                        self.unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                    let backoff = &self.options.backoff;
                    if !e.is_retryable() || !backoff.allows(attempts) {
                        return Err(e);
                    }
                    let delay = backoff.delay(attempts, rand::random::<f64>());
                    tracing::warn!(op, attempts, ?delay, error = %e, "retrying Azure request");
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    if let Some(counts) = &self.retry_counts {
                        if e.code.as_deref() == Some(TIMEOUT_CODE) && e.status.is_none() {
                            counts.record_timeout();
                        } else {
                            counts.record(e.status);
                        }
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// One attempt under its watch: the SDK call runs with this attempt's body
    /// tracker in scope (`progress::TRACKER`), and the watch wakes only at its
    /// deadline, so a healthy request costs no timer work.
    async fn attempt<T, Fut>(
        &self,
        op: &str,
        has_body: bool,
        answer_allowance: Duration,
        call: Fut,
    ) -> Result<T, BlobError>
    where
        Fut: Future<Output = azure_core::Result<T>>,
    {
        let start = Instant::now();
        let tracker = Arc::new(BodyTracker::new(start));
        let mut watch = RequestWatch::new(self.options.patience, start, has_body, answer_allowance);
        let call = TRACKER.scope(tracker.clone(), call);
        tokio::pin!(call);
        loop {
            let deadline = tokio::time::Instant::from_std(watch.deadline());
            tokio::select! {
                result = &mut call => {
                    let e = match result {
                        Ok(v) => return Ok(v),
                        Err(e) => e,
                    };
                    watch.observe(tracker.snapshot());
                    // A timer of the HTTP stack (none is set today) ending a
                    // body that still moved: the failure this design rules out.
                    if is_timeout(&e) && watch.moving_at(Instant::now()) {
                        self.abandons.record_while_moving();
                    }
                    return Err(BlobError::from_azure(op, e));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    watch.observe(tracker.snapshot());
                    let now = Instant::now();
                    if let Some(why) = watch.verdict(now) {
                        if watch.moving_at(now) {
                            self.abandons.record_while_moving();
                        }
                        self.abandons.record(&why);
                        return Err(abandoned_error(op, &why));
                    }
                }
            }
        }
    }

    /// Deletes the committed blob (e.g. what `relay-client bench` wrote); a blob
    /// that is not there counts as deleted.
    pub async fn delete(&self) -> Result<(), BlobError> {
        let sdk = self.sdk()?;
        match self
            .with_retry("Delete Blob", false, Duration::ZERO, || {
                sdk.blob.delete(None)
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.status == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Properties, or `None` if the blob does not exist.
    pub async fn properties(&self) -> Result<Option<BlobProperties>, BlobError> {
        let sdk = self.sdk()?;
        let res = self
            .with_retry("Get Blob Properties", false, Duration::ZERO, || {
                sdk.blob.get_properties(None)
            })
            .await;
        let resp = match res {
            Ok(r) => r,
            Err(e) if e.status == Some(404) => return Ok(None),
            Err(e) => return Err(e),
        };
        let bad = |e: azure_core::Error| BlobError::from_azure("Get Blob Properties", e);
        let etag = resp
            .etag()
            .map_err(bad)?
            .map(|e| e.to_string())
            .unwrap_or_default();
        let size = resp.content_length().map_err(bad)?.unwrap_or(0);
        let last_modified = resp
            .last_modified()
            .map_err(bad)?
            .and_then(|t| u64::try_from(t.unix_timestamp()).ok());
        let metadata = resp.metadata().map_err(bad)?;
        let find = |key: &str| {
            metadata
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        Ok(Some(BlobProperties {
            etag,
            size,
            sha256: find(SHA256_METADATA_KEY),
            seal: find(SEAL_METADATA_KEY),
            writer: find(WRITER_METADATA_KEY),
            last_modified,
        }))
    }

    /// The committed blob's Content-MD5 property (what `azcopy --check-md5` and
    /// `rclone check` compare), `None` if it has none or there is no blob.
    pub async fn content_md5(&self) -> Result<Option<Vec<u8>>, BlobError> {
        self.header(|r| r.content_md5()).await
    }

    /// The committed blob's Content-Encoding, `None` if it has none (a relay's
    /// never has: the blob holds the file's bytes however they travelled).
    pub async fn content_encoding(&self) -> Result<Option<String>, BlobError> {
        self.header(|r| r.content_encoding()).await
    }

    /// One header of Get Blob Properties; `None` if there is no blob.
    async fn header<T>(
        &self,
        read: impl Fn(
            &azure_core::http::Response<
                azure_storage_blob::models::BlobClientGetPropertiesResult,
                NoFormat,
            >,
        ) -> azure_core::Result<Option<T>>,
    ) -> Result<Option<T>, BlobError> {
        let sdk = self.sdk()?;
        let res = self
            .with_retry("Get Blob Properties", false, Duration::ZERO, || {
                sdk.blob.get_properties(None)
            })
            .await;
        match res {
            Ok(resp) => read(&resp).map_err(|e| BlobError::from_azure("Get Blob Properties", e)),
            Err(e) if e.status == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Downloads the committed blob and hashes it as it streams (memory stays
    /// bounded): the independent check used by the demo and the tests.
    pub async fn content_sha256(&self) -> Result<(u64, [u8; 32]), BlobError> {
        use futures::StreamExt;
        use sha2::Digest as _;
        let resp = self
            .sdk()?
            .blob
            .download(None)
            .await
            .map_err(|e| BlobError::from_azure("Get Blob", e))?;
        let mut body = resp.body;
        let mut h = sha2::Sha256::new();
        let mut n = 0u64;
        // The HTTP client has no read timeout (it would end slow uploads too):
        // a download that stops moving for the stall interval fails here.
        let stall = self.options.patience.stall;
        loop {
            let next = tokio::time::timeout(stall, body.next())
                .await
                .map_err(|_| {
                    abandoned_error(
                        "Get Blob",
                        &Abandon::Stalled {
                            accepted_bytes: n,
                            quiet: stall,
                        },
                    )
                })?;
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(|e| BlobError::from_azure("Get Blob", e))?;
            n += chunk.len() as u64;
            h.update(&chunk);
        }
        Ok((n, h.finalize().into()))
    }

    /// Uncommitted blocks as (raw ID, size); empty if the blob has none or does not exist.
    pub async fn uncommitted_blocks(&self) -> Result<Vec<(Vec<u8>, u64)>, BlobError> {
        self.block_list(BlockListType::Uncommitted).await
    }

    /// The committed block list in order, (ID, size) each: what the blob is
    /// made of (empty for a blob written by Put Blob, or none at all).
    pub async fn committed_blocks(&self) -> Result<Vec<(Vec<u8>, u64)>, BlobError> {
        self.block_list(BlockListType::Committed).await
    }

    async fn block_list(&self, which: BlockListType) -> Result<Vec<(Vec<u8>, u64)>, BlobError> {
        let sdk = self.sdk()?;
        let res = self
            .with_retry("Get Block List", false, Duration::ZERO, || {
                sdk.block
                    .get_block_list(which, Some(BlockBlobClientGetBlockListOptions::default()))
            })
            .await;
        let resp = match res {
            Ok(r) => r,
            Err(e) if e.status == Some(404) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let list = resp
            .into_model()
            .map_err(|e| BlobError::from_azure("Get Block List", e))?;
        let blocks = match which {
            BlockListType::Committed => list.committed_blocks,
            _ => list.uncommitted_blocks,
        };
        Ok(blocks
            .unwrap_or_default()
            .into_iter()
            .filter_map(|b| Some((b.name?, u64::try_from(b.size?).ok()?)))
            .collect())
    }

    /// Put Block with a transactional checksum (`WriterOptions::block_checksum`),
    /// so corruption between us and storage is caught before the block is staged.
    pub async fn stage_block(&self, id: &[u8], data: Bytes) -> Result<(), BlobError> {
        let (md5, crc64) = match self.options.block_checksum {
            BlockChecksum::Md5 => {
                let d = data.clone();
                // About 2 ms per MiB: off the async workers.
                let md5 = tokio::task::spawn_blocking(move || Md5::digest(&d).to_vec())
                    .await
                    .map_err(|e| BlobError {
                        status: None,
                        code: None,
                        message: format!("MD5 task failed: {e}"),
                    })?;
                (Some(md5), None)
            }
            // Tens of microseconds per MiB with carry-less multiply: inline.
            BlockChecksum::Crc64 => (None, Some(crc64_header_bytes(&data))),
        };
        let len = data.len() as u64;
        let sdk = self.sdk()?;
        self.with_retry("Put Block", len > 0, Duration::ZERO, || {
            let opts = BlockBlobClientStageBlockOptions {
                transactional_content_md5: md5.clone(),
                transactional_content_crc64: crc64.clone(),
                ..Default::default()
            };
            sdk.block.stage_block(
                id,
                len,
                <RequestContent<azure_core::Bytes, NoFormat> as From<Bytes>>::from(data.clone()),
                Some(opts),
            )
        })
        .await
        .map(|_| ())
    }

    /// Put Blob: publishes a file that fits in one block with a single request,
    /// under the same rules as a commit (called only after its SHA-256 matched;
    /// the condition from `overwrite`; the SHA-256 and the seal in metadata).
    ///
    /// Its body checksum, which the service checks against what arrived:
    /// - the whole file's MD5 when the caller kept one (`--put-md5`), sent as the
    ///   blob's Content-MD5;
    /// - else the block checksum's kind: with MD5 the body's MD5, sent the same
    ///   way; with CRC-64 the body's CRC-64 (`x-ms-content-crc64`), a small
    ///   fraction of MD5's CPU; the service sets a Put Blob's Content-MD5 itself
    ///   when the request carries none, so other tools can still verify the blob.
    pub async fn put_blob(&self, data: Bytes, commit: &Commit<'_>) -> Result<String, BlobError> {
        let md5;
        let checksum = match (&commit.content_md5, self.options.block_checksum) {
            (Some(whole), _) => BodyChecksum::Md5(whole),
            (None, BlockChecksum::Md5) => {
                md5 = Md5::digest(&data);
                BodyChecksum::Md5(&md5)
            }
            (None, BlockChecksum::Crc64) => BodyChecksum::Crc64(azure_crc64(&data).to_le_bytes()),
        };
        let meta = commit_metadata(commit);
        let (if_match, if_none_match) = condition_headers(commit.condition);
        let put = PutBlob {
            url: &self.url,
            version: &self.account.version,
            checksum,
            content_type: commit.content_type,
            metadata: &meta,
            if_match,
            if_none_match,
        };
        let resp = self
            .with_retry("Put Blob", !data.is_empty(), Duration::ZERO, || {
                let mut request = put.request(data.clone());
                async move {
                    let options = PipelineSendOptions {
                        check_success: CheckSuccessOptions {
                            success_codes: put_blob::CREATED,
                        },
                        ..Default::default()
                    };
                    self.account
                        .pipeline
                        .send(&Context::new(), &mut request, Some(options))
                        .await
                }
            })
            .await?;
        Ok(resp
            .headers()
            .get_optional_string(&azure_core::http::headers::ETAG)
            .unwrap_or_default())
    }

    /// Put Block List: publishes exactly `ids`, with the verified SHA-256 and the
    /// relay's seal over it in metadata.
    /// Blocks staged under other IDs (older attempts) are discarded by Azure.
    pub async fn commit(
        &self,
        ids: Vec<Vec<u8>>,
        commit: &Commit<'_>,
    ) -> Result<String, BlobError> {
        let meta = commit_metadata(commit);
        let (if_match, if_none_match) = conditions(commit.condition);
        // The service's work grows with the list: give it a second per 1024
        // blocks to answer (49 s more for 50,000).
        let allowance = Duration::from_secs(ids.len().div_ceil(1024) as u64);
        let list = BlockLookupList {
            committed: None,
            latest: Some(ids),
            uncommitted: None,
        };
        let sdk = self.sdk()?;
        let resp = self
            .with_retry("Put Block List", true, allowance, || {
                let opts = BlockBlobClientCommitBlockListOptions {
                    blob_content_md5: commit.content_md5.map(|m| m.to_vec()),
                    blob_content_type: commit.content_type.map(str::to_string),
                    metadata: Some(meta.clone()),
                    if_match: if_match.clone(),
                    if_none_match: if_none_match.clone(),
                    ..Default::default()
                };
                let body = list.clone().try_into();
                async move {
                    let body = body?;
                    sdk.block.commit_block_list(body, Some(opts)).await
                }
            })
            .await?;
        let etag = resp
            .etag()
            .map_err(|e| BlobError::from_azure("Put Block List", e))?
            .map(|e| e.to_string())
            .unwrap_or_default();
        Ok(etag)
    }
}

/// The error of an attempt its watch gave up (retryable: no status).
fn abandoned_error(op: &str, why: &Abandon) -> BlobError {
    let message = match why {
        Abandon::Stalled {
            accepted_bytes,
            quiet,
        } => format!(
            "{op}: abandoned: no progress for {} s ({accepted_bytes} bytes of the body sent)",
            quiet.as_secs()
        ),
        Abandon::Unanswered { waited } => format!(
            "{op}: abandoned: no answer {} s after the request was sent",
            waited.as_secs()
        ),
        Abandon::AnswerStalled {
            received_bytes,
            quiet,
        } => format!(
            "{op}: abandoned: the answer stopped for {} s ({received_bytes} bytes of its body received)",
            quiet.as_secs()
        ),
    };
    BlobError {
        status: None,
        code: Some(TIMEOUT_CODE.into()),
        message,
    }
}

/// Whether a failure was some timer's (the HTTP client's or the OS's), found
/// anywhere in its chain of causes.
fn is_timeout(err: &azure_core::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(c) = cause {
        if c.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_timeout)
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// `If-Match` / `If-None-Match` for a commit under `condition`.
fn condition_headers(condition: &Condition) -> (Option<&str>, Option<&str>) {
    match condition {
        Condition::IfAbsent => (None, Some("*")),
        Condition::IfMatch(etag) => (Some(etag.as_str()), None),
        Condition::Always => (None, None),
    }
}

/// The same, as the SDK's option types take them.
fn conditions(condition: &Condition) -> (Option<Etag>, Option<Etag>) {
    let (m, n) = condition_headers(condition);
    (m.map(Etag::from), n.map(Etag::from))
}

/// The user's metadata plus the verified SHA-256 and the seal over it.
fn commit_metadata(commit: &Commit<'_>) -> HashMap<String, String> {
    let mut meta: HashMap<String, String> = commit.metadata.clone().into_iter().collect();
    meta.insert(
        SHA256_METADATA_KEY.to_string(),
        commit.sha256_hex.to_string(),
    );
    meta.insert(SEAL_METADATA_KEY.to_string(), commit.seal.to_string());
    meta
}

#[async_trait::async_trait]
impl BlobStore for BlobWriter {
    async fn properties(&self) -> Result<Option<BlobProperties>, BlobError> {
        BlobWriter::properties(self).await
    }

    async fn uncommitted_blocks(&self) -> Result<Vec<(Vec<u8>, u64)>, BlobError> {
        BlobWriter::uncommitted_blocks(self).await
    }

    async fn stage_block(&self, id: &[u8], data: Bytes) -> Result<(), BlobError> {
        BlobWriter::stage_block(self, id, data).await
    }

    async fn commit_blocks(
        &self,
        ids: Vec<Vec<u8>>,
        commit: &Commit<'_>,
    ) -> Result<String, BlobError> {
        self.commit(ids, commit).await
    }

    async fn put_blob(&self, data: Bytes, commit: &Commit<'_>) -> Result<String, BlobError> {
        BlobWriter::put_blob(self, data, commit).await
    }

    fn retries(&self) -> u32 {
        BlobWriter::retries(self)
    }

    fn requests(&self) -> u32 {
        BlobWriter::requests(self)
    }

    fn unanswered(&self) -> u32 {
        BlobWriter::unanswered(self)
    }

    fn abandoned(&self) -> Abandoned {
        BlobWriter::abandoned(self)
    }
}
