//! Deleting one version of a blob: `Delete Blob` with `If-Match` on the ETag
//! the caller listed, never without one, so a blob written after the listing
//! (a new ETag) is kept. On the writer's retry schedule and counters: a 5xx,
//! a throttle or a lost answer is sent again; a 404 or a 412 is an answer,
//! never retried.
//!
//! A retry after a lost answer may find the blob gone (the first request
//! deleted it): that is `NotFound`, which a caller treats as done. A storage
//! may answer a conditional request on a missing blob with 412 rather than
//! 404 (Azurite does), so a 412 is told apart by the blob's properties: gone,
//! or another version.

use std::time::Duration;

use azure_core::http::{Method, Request};

use crate::blob::BlobWriter;
use crate::error::BlobError;
use crate::read::{BlobReader, ReadError, header_etag};

/// What became of a delete that storage answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// The version asked for was deleted.
    Deleted,
    /// No blob of the name (404): gone already.
    NotFound,
    /// The blob is another version now (412): it was kept.
    Changed,
}

/// Why a delete got no answer that says what became of the blob.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// One version's ETag is required: a delete without one (or with `*`)
    /// could remove any version.
    #[error("a delete needs the ETag of the one version to delete")]
    NoEtag,
    /// Storage failed, after the retries, or refused the request.
    #[error(transparent)]
    Storage(BlobError),
}

/// Deletes one blob's version `etag` (quoted or bare).
pub struct BlobDeleter {
    /// The blob's reader: its writer sends the delete, and it reads the
    /// properties after a 412; their requests count together.
    pub(crate) r: BlobReader,
}

impl BlobDeleter {
    /// Storage requests sent (retries included).
    pub fn requests(&self) -> u32 {
        self.r.requests()
    }

    /// `Delete Blob` with `If-Match: etag`; the snapshots of a blob that has
    /// any are refused by storage (409) and kept, as the blob is.
    pub async fn delete_if_match(&self, etag: &str) -> Result<Deletion, DeleteError> {
        let etag = etag.trim();
        let bare = etag.trim_matches('"');
        // `*` matches any version, a list several: neither is one version.
        if bare.is_empty() || bare.contains(['*', ',', '"']) {
            return Err(DeleteError::NoEtag);
        }
        let etag = header_etag(etag);
        let w: &BlobWriter = &self.r.w;
        let url = w.url.clone();
        let version = w.account.version.clone();
        let sent = w
            .with_retry("Delete Blob", false, Duration::ZERO, || {
                let mut r = Request::new(url.clone(), Method::Delete);
                r.insert_header("if-match", etag.clone());
                r.insert_header("x-ms-version", version.clone());
                async move { w.answer(&mut r, &[202]).await.map(drop) }
            })
            .await;
        match sent {
            Ok(()) => Ok(Deletion::Deleted),
            Err(e) => match e.status {
                Some(404) => Ok(Deletion::NotFound),
                Some(412) => self.gone_or_changed(e).await,
                _ => Err(DeleteError::Storage(e)),
            },
        }
    }

    /// After a 412: `NotFound` if there is no blob of the name, else `Changed`.
    async fn gone_or_changed(&self, refused: BlobError) -> Result<Deletion, DeleteError> {
        match self.r.properties().await {
            Err(ReadError::NotFound) => Ok(Deletion::NotFound),
            Ok(_) => Ok(Deletion::Changed),
            // The blob is not the version asked for either way: kept.
            Err(ReadError::Changed) => Ok(Deletion::Changed),
            Err(ReadError::Storage(e)) => Err(DeleteError::Storage(e)),
            Err(_) => Err(DeleteError::Storage(refused)),
        }
    }
}
