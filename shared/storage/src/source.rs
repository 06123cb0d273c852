//! The read seam: the few requests a download makes on one container. A
//! listing a page at a time, each page naming where the next starts (the
//! service's continuation marker); a blob's properties; and its bytes in
//! ranges, each read at the version the download started with (`If-Match`:
//! a blob replaced since is `ReadError::Changed`, one deleted
//! `ReadError::NotFound`).
//!
//! `ContainerReader` sends them to Azure (or Azurite) through `read` and
//! `listing`; `memory_source::MemorySource` answers them from a
//! `MemoryAccount`, where a writer can replace or delete a blob between two
//! of a reader's requests, so the races a download meets are unit tests
//! instead of Azurite runs (as `store::BlobStore` is for uploads).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;

use crate::account::Storage;
use crate::error::BlobError;
use crate::first_range::{CheckOf, FirstRange};
use crate::listing::{ListPage, Lister};
use crate::read::{BlobReader, RangeCheck, ReadError, ReadProperties};

/// One container's blobs, as a download reads them. Every method is one
/// storage request (retried inside on transient failures): the unit in which
/// a reader and a writer interleave. `first_range` is one too where storage
/// can answer it so (`ContainerReader`: Get Blob; a blob of 0 bytes, which
/// has no range, then its properties); its default, for a source without
/// that request, is two: the properties, then the range.
#[async_trait]
pub trait BlobSource: Send + Sync {
    /// At most `names` blobs under `prefix`, from `marker` (what the page
    /// before named as `next_marker`; `None`: from the start).
    async fn list_page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        names: u32,
    ) -> Result<ListPage, ReadError>;
    /// Get Blob Properties of `blob`.
    async fn properties(&self, blob: &str) -> Result<ReadProperties, ReadError>;
    /// `len` bytes of `blob` from `offset`, only from the version `etag`
    /// (`If-Match`); with [`RangeCheck::StorageMd5`] checked against
    /// storage's MD5 of the range. `len` is at most
    /// `read::MAX_CHECKED_RANGE` and the range lies inside the blob.
    async fn range(
        &self,
        blob: &str,
        etag: &str,
        offset: u64,
        len: u64,
        check: RangeCheck,
    ) -> Result<Bytes, ReadError>;
    /// The first `len` bytes of `blob` (all of it, if shorter) and the
    /// properties of the version they are of, checked as `check_of` says for
    /// those properties. `len` is at most `read::MAX_CHECKED_RANGE`.
    async fn first_range(
        &self,
        blob: &str,
        len: u64,
        check_of: CheckOf<'_>,
    ) -> Result<FirstRange, ReadError> {
        let props = self.properties(blob).await?;
        let n = len.min(props.size);
        let bytes = self
            .range(blob, &props.etag, 0, n, check_of(&props))
            .await?;
        Ok(FirstRange { props, bytes })
    }
    /// Requests sent so far, retries included.
    fn requests(&self) -> u32;
}

/// One container of a storage account, read through Azure's API. Its
/// requests (listing and every blob's) count together.
pub struct ContainerReader {
    storage: Storage,
    container: String,
    lister: Lister,
    /// The reader of the blob asked for last: a download reads one blob
    /// many times (its properties, then its ranges), and the reader keeps
    /// the SDK's clients it built for it.
    last: Mutex<Option<(String, Arc<BlobReader>)>>,
}

impl ContainerReader {
    /// A reader of `container`, on `storage`'s retry schedule, request limit
    /// and counters.
    pub fn new(storage: &Storage, container: &str) -> Result<Self, BlobError> {
        Ok(Self {
            lister: storage.lister(container)?,
            storage: storage.clone(),
            container: container.to_string(),
            last: Mutex::new(None),
        })
    }

    /// The reader of `blob`, counting its requests and retries with the
    /// listing's.
    fn reader(&self, blob: &str) -> Result<Arc<BlobReader>, ReadError> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((name, reader)) = last.as_ref()
            && name == blob
        {
            return Ok(reader.clone());
        }
        let mut reader = self.storage.reader(&self.container, blob)?;
        reader.w.requests = self.lister.w.requests.clone();
        reader.w.retries = self.lister.w.retries.clone();
        let reader = Arc::new(reader);
        *last = Some((blob.to_string(), reader.clone()));
        Ok(reader)
    }

    /// Retries so far (transient failures answered again).
    pub fn retries(&self) -> u32 {
        self.lister.w.retries()
    }
}

#[async_trait]
impl BlobSource for ContainerReader {
    async fn list_page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        names: u32,
    ) -> Result<ListPage, ReadError> {
        self.lister.page(prefix, marker, names).await
    }

    async fn properties(&self, blob: &str) -> Result<ReadProperties, ReadError> {
        self.reader(blob)?.properties().await
    }

    async fn range(
        &self,
        blob: &str,
        etag: &str,
        offset: u64,
        len: u64,
        check: RangeCheck,
    ) -> Result<Bytes, ReadError> {
        self.reader(blob)?.range(etag, offset, len, check).await
    }

    async fn first_range(
        &self,
        blob: &str,
        len: u64,
        check_of: CheckOf<'_>,
    ) -> Result<FirstRange, ReadError> {
        self.reader(blob)?.first_range(len, check_of).await
    }

    fn requests(&self) -> u32 {
        self.lister.requests()
    }
}
