//! The storage seam: the few requests an upload makes on one blob. `blob::BlobWriter`
//! sends them to Azure; `memory::MemoryBlob` keeps them in memory and can
//! interleave several writers one request at a time, so races between uploads to
//! one name are unit tests instead of Azurite runs.
//!
//! Errors are storage's own (`BlobError`: the status and code the service gave);
//! wire codes are chosen by the caller (`relay-pipeline`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::BlobError;

/// Properties of a committed blob.
#[derive(Debug, Clone)]
pub struct BlobProperties {
    pub etag: String,
    pub size: u64,
    pub sha256: Option<String>,
    /// The relay's seal over name, size and SHA-256 (`id_key::IdKey::seal`).
    pub seal: Option<String>,
    /// The mark of whoever committed this version (`IdKey::writer_mark`).
    pub writer: Option<String>,
    /// Last-Modified, in seconds since the Unix epoch: set by the service at each
    /// commit, so no writer can choose it (`--overwrite=if-newer` compares it).
    pub last_modified: Option<u64>,
}

/// When a commit may replace an existing blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Only if no blob has this name (`If-None-Match: *`).
    IfAbsent,
    /// Only if the blob is still at this etag (`If-Match`).
    IfMatch(String),
    /// Unconditionally.
    Always,
}

/// What a commit publishes besides the bytes: the verified SHA-256 and the seal
/// over it (both stored in metadata), the content type, the blob's Content-MD5
/// (`--put-md5`; a Put Blob always sets it), the user's metadata, and the
/// condition.
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    pub sha256_hex: &'a str,
    pub seal: &'a str,
    pub content_type: Option<&'a str>,
    /// MD5 of every byte of the blob, computed by whoever hashed them all.
    pub content_md5: Option<[u8; 16]>,
    pub metadata: &'a BTreeMap<String, String>,
    pub condition: &'a Condition,
}

/// One blob's storage, as an upload uses it. Every method is one storage request
/// (retried inside on transient failures): the unit in which writers interleave.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Properties, or `None` if the blob does not exist.
    async fn properties(&self) -> Result<Option<BlobProperties>, BlobError>;
    /// Uncommitted blocks as (raw ID, size); empty if none or no blob.
    async fn uncommitted_blocks(&self) -> Result<Vec<(Vec<u8>, u64)>, BlobError>;
    /// Put Block: stores `data` under `id` in the uncommitted list (replacing any
    /// block already there under that ID).
    async fn stage_block(&self, id: &[u8], data: Bytes) -> Result<(), BlobError>;
    /// Put Block List: publishes exactly `ids`, taken from the uncommitted list;
    /// returns the new etag.
    async fn commit_blocks(
        &self,
        ids: Vec<Vec<u8>>,
        commit: &Commit<'_>,
    ) -> Result<String, BlobError>;
    /// Put Blob: publishes `data` with one request; returns the new etag.
    async fn put_blob(&self, data: Bytes, commit: &Commit<'_>) -> Result<String, BlobError>;
    /// Retries so far (transient failures answered again).
    fn retries(&self) -> u32;
    /// Requests sent so far, retries included.
    fn requests(&self) -> u32;
    /// Attempts so far that ended without storage's answer (a transport error,
    /// a timeout): each may have reached storage and been done.
    fn unanswered(&self) -> u32 {
        0
    }

    /// Requests given up by the writer's watch (`watch.rs`), by reason.
    fn abandoned(&self) -> crate::retry::Abandoned {
        crate::retry::Abandoned::default()
    }
}
