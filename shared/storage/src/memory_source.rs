//! The in-memory twin of `source::ContainerReader`: one container of a
//! `MemoryAccount` read with Azure's rules for what a download touches.
//! List Blobs returns committed blobs in name order, a page at a time, with a
//! marker naming where the next page starts; Get Blob Properties of a missing
//! blob is 404; a range read under `If-Match` of another version is 412
//! (`Changed`), of a deleted blob 404 (`NotFound`).
//!
//! The blobs are the account's, so any writer of the account (a `MemoryBlob`'s
//! Put Blob and Delete Blob) can replace or delete a blob between two
//! of a reader's requests. A reader given a `Turnstile` waits for its turn
//! before each request, so a test picks exactly where the writer's request
//! falls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use relay_proto::blob_name::SHA256_METADATA_KEY;
use relay_proto::id_key::SEAL_METADATA_KEY;

use crate::error::BlobError;
use crate::listing::{ListPage, ListedBlob, MAX_PAGE_NAMES};
use crate::memory::{Committed, MemoryAccount, Turnstile, key, lock};
use crate::read::{RangeCheck, ReadError, ReadProperties, same_etag, without_storage};
use crate::source::BlobSource;

/// One container of a `MemoryAccount`, as one reader sees it.
#[derive(Debug)]
pub struct MemorySource {
    account: MemoryAccount,
    container: String,
    turn: Option<(Arc<Turnstile>, usize)>,
    requests: AtomicU32,
}

impl MemoryAccount {
    /// A reader of `container` that sends each request at once.
    pub fn source(&self, container: &str) -> MemorySource {
        MemorySource {
            account: self.clone(),
            container: container.to_string(),
            turn: None,
            requests: AtomicU32::new(0),
        }
    }

    /// A reader of `container` that waits for its turn at `turnstile` (as
    /// participant `reader`) before each request.
    pub fn source_in_turn(
        &self,
        container: &str,
        turnstile: Arc<Turnstile>,
        reader: usize,
    ) -> MemorySource {
        MemorySource {
            turn: Some((turnstile, reader)),
            ..self.source(container)
        }
    }
}

fn read_properties(c: &Committed) -> ReadProperties {
    ReadProperties {
        etag: c.etag.clone(),
        size: c.data().len() as u64,
        last_modified: Some(c.last_modified),
        content_md5: c.content_md5,
        content_type: c.content_type.clone(),
        sha256: c.metadata.get(SHA256_METADATA_KEY).cloned(),
        seal: c.metadata.get(SEAL_METADATA_KEY).cloned(),
    }
}

impl MemorySource {
    /// Waits for this reader's turn (if it takes turns), then counts the request.
    async fn request(&self, op: &'static str) {
        if let Some((t, r)) = &self.turn {
            t.enter(*r, op).await;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The blob as committed now, if it is.
    fn committed(&self, blob: &str) -> Option<Committed> {
        let account = lock(&self.account.inner);
        let state = account.blobs.get(&key(&self.container, blob))?;
        state.committed.clone()
    }
}

#[async_trait]
impl BlobSource for MemorySource {
    async fn list_page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        names: u32,
    ) -> Result<ListPage, ReadError> {
        self.request("List Blobs").await;
        let account = lock(&self.account.inner);
        let under = key(&self.container, prefix);
        let mut found: Vec<(&str, &Committed)> = account
            .blobs
            .iter()
            .filter(|(k, _)| k.starts_with(&under))
            .filter_map(|(k, b)| Some((&k[self.container.len() + 1..], b.committed.as_ref()?)))
            .filter(|(name, _)| marker.is_none_or(|m| *name >= m))
            .collect();
        found.sort_by(|a, b| a.0.cmp(b.0));
        let page = usize::try_from(names.clamp(1, MAX_PAGE_NAMES)).unwrap_or(usize::MAX);
        let next_marker = found.get(page).map(|(name, _)| name.to_string());
        let blobs = found
            .into_iter()
            .take(page)
            .map(|(name, c)| ListedBlob {
                name: name.to_string(),
                size: c.data().len() as u64,
                // Azure's listing writes ETags bare, its headers quoted.
                etag: c.etag.trim_matches('"').to_string(),
                last_modified: Some(c.last_modified),
                sha256: None,
                seal: None,
            })
            .collect();
        Ok(ListPage { blobs, next_marker })
    }

    async fn properties(&self, blob: &str) -> Result<ReadProperties, ReadError> {
        self.request("Get Blob Properties").await;
        let c = self.committed(blob).ok_or(ReadError::NotFound)?;
        Ok(read_properties(&c))
    }

    async fn range(
        &self,
        blob: &str,
        etag: &str,
        offset: u64,
        len: u64,
        _check: RangeCheck,
    ) -> Result<Bytes, ReadError> {
        if let Some(answer) = without_storage(len) {
            return answer;
        }
        self.request("Get Blob").await;
        let c = self.committed(blob).ok_or(ReadError::NotFound)?;
        if !same_etag(&c.etag, etag) {
            return Err(ReadError::Changed);
        }
        let data = c.data();
        let inside = offset
            .checked_add(len)
            .filter(|end| *end <= data.len() as u64);
        let Some(end) = inside else {
            return Err(ReadError::Storage(BlobError {
                status: Some(416),
                code: Some("InvalidRange".into()),
                message: format!("Azure Get Blob failed: 416 InvalidRange ({offset}+{len})"),
            }));
        };
        // Within the blob's length, so within usize.
        Ok(data.slice(offset as usize..end as usize))
    }

    fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::MAX_CHECKED_RANGE;
    use crate::store::{BlobStore, Commit, Condition};
    use std::collections::BTreeMap;

    async fn put(account: &MemoryAccount, name: &str, data: &'static [u8]) -> String {
        let meta = BTreeMap::new();
        let commit = Commit {
            sha256_hex: "h",
            seal: "seal",
            content_type: Some("text/plain"),
            content_md5: None,
            metadata: &meta,
            condition: &Condition::Always,
        };
        let b = account.blob("c", name);
        b.put_blob(Bytes::from_static(data), &commit)
            .await
            .expect("put")
    }

    #[tokio::test]
    async fn behaves_like_azure_for_a_download() {
        let account = MemoryAccount::new();
        let etag = put(&account, "p/a", b"0123456789").await;
        put(&account, "p/b", b"b").await;
        put(&account, "q/x", b"x").await;
        let s = account.source("c");
        let props = s.properties("p/a").await.expect("props");
        assert_eq!((props.etag.as_str(), props.size), (etag.as_str(), 10));
        assert_eq!(props.content_type.as_deref(), Some("text/plain"));
        assert!(props.content_md5.is_some());
        let md5 = RangeCheck::StorageMd5;
        let got = s.range("p/a", &etag, 2, 3, md5).await.expect("range");
        assert_eq!(&got[..], b"234");
        // The listing's bare ETag names the same version.
        let bare = etag.trim_matches('"');
        assert!(s.range("p/a", bare, 0, 1, md5).await.is_ok());
        assert!(matches!(
            s.range("p/a", "\"0xOTHER\"", 0, 1, md5).await,
            Err(ReadError::Changed)
        ));
        assert!(matches!(
            s.range("p/a", &etag, 8, 3, md5).await,
            Err(ReadError::Storage(e)) if e.status == Some(416)
        ));
        assert!(matches!(
            s.range("p/a", &etag, 0, MAX_CHECKED_RANGE + 1, md5).await,
            Err(ReadError::RangeTooLarge(_))
        ));
        assert!(account.blob("c", "p/a").delete().await);
        assert!(matches!(
            s.range("p/a", &etag, 0, 1, md5).await,
            Err(ReadError::NotFound)
        ));
        assert!(matches!(
            s.properties("p/a").await,
            Err(ReadError::NotFound)
        ));
        // Every call but the oversized range was a request.
        assert_eq!(s.requests(), 7);
    }

    /// The trait's default first range: the properties, then the range
    /// (two requests), only as much as the blob holds.
    #[tokio::test]
    async fn a_first_range_names_its_version_and_stops_at_the_blobs_end() {
        let account = MemoryAccount::new();
        let etag = put(&account, "p/a", b"0123456789").await;
        put(&account, "p/empty", b"").await;
        let s = account.source("c");
        let only = |_: &ReadProperties| RangeCheck::LengthOnly;
        let first = s.first_range("p/a", 4, &only).await.expect("first");
        assert_eq!((&first.bytes[..], first.props.size), (&b"0123"[..], 10));
        assert_eq!(first.props.etag, etag);
        let whole = s.first_range("p/a", 64, &only).await.expect("whole");
        assert_eq!(&whole.bytes[..], b"0123456789");
        let empty = s.first_range("p/empty", 64, &only).await.expect("empty");
        assert_eq!((empty.bytes.len(), empty.props.size), (0, 0));
        assert!(matches!(
            s.first_range("p/none", 64, &only).await,
            Err(ReadError::NotFound)
        ));
        // Two requests a blob with bytes, one for the empty one (no range).
        assert_eq!(s.requests(), 2 + 2 + 1 + 1);
    }

    #[tokio::test]
    async fn a_listing_goes_page_by_page_from_its_marker() {
        let account = MemoryAccount::new();
        for name in ["p/c", "p/a", "p/b", "q/z", "p/d"] {
            put(&account, name, b"x").await;
        }
        let s = account.source("c");
        let mut marker: Option<String> = None;
        let mut pages = Vec::new();
        loop {
            let page = s.list_page("p/", marker.as_deref(), 2).await.expect("page");
            let names: Vec<String> = page.blobs.iter().map(|b| b.name.clone()).collect();
            pages.push(names);
            match page.next_marker {
                Some(m) => marker = Some(m),
                None => break,
            }
        }
        assert_eq!(pages, [vec!["p/a", "p/b"], vec!["p/c", "p/d"]]);
        let other = account.source("d");
        let empty = other.list_page("", None, 10).await.expect("page");
        assert!(empty.blobs.is_empty() && empty.next_marker.is_none());
    }
}
