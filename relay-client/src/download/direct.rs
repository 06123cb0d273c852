//! `download --direct`: the same files, straight from storage over HTTPS (the
//! baseline, and the way where UDP is blocked). The blob's properties stand in
//! for the relay's `Source`; its bytes come as ranges of at most 4 MiB, as
//! many in flight per file as the path needs (`direct_sizing::ranges`: each
//! range is a request on a TCP connection of its own, and far from storage a
//! loss-based controller needs many of them), each read under `If-Match` on
//! the version the download started with and checked against storage's MD5
//! of the range before it is used (`relay_storage::read`). A range takes its
//! memory from the run's budget (`--memory-budget`) before it is asked for and
//! gives it back once its bytes are written. A blob sealed with this user's
//! direct-mode key is checked by its SHA-256, one with a Content-MD5 by its MD5.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use relay_pipeline::failure::range_check;
use relay_proto::id_key::IdKey;
use relay_proto::protocol::{Check, Code, Failure, Listed, Source};
use relay_storage::account::Storage;
use relay_storage::read::{MAX_CHECKED_RANGE, RangeCheck, ReadError};
use relay_storage::source::{BlobSource, ContainerReader};
use relay_storage::staging::Budget;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::task::JoinHandle;

use super::cursor::Cursor;
use super::piece::Next;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// Blobs per List Blobs page: 10.7 MiB at most (`PageSize::bytes`).
const PAGE: u32 = relay_storage::listing::DEFAULT_PAGE_NAMES;

pub struct DirectReads {
    pub storage: Storage,
    pub id_key: IdKey,
    /// Ranges one file has in flight (`direct_sizing::ranges`).
    pub ranges_in_flight: usize,
    /// Memory for ranges read and not yet written, shared by every file.
    pub budget: Budget,
}

/// A storage error as this file's: gone, changed, or (retryable) failed.
fn read_error(e: ReadError) -> Result<Failure, FileError> {
    match e {
        ReadError::NotFound => Ok(Failure::new(Code::NotFound, "no such blob")),
        ReadError::Changed => Ok(Failure::new(
            Code::Changed,
            "the blob changed while it was read",
        )),
        ReadError::RangeTooLarge(_) | ReadError::AnswerTooLarge(_) => {
            Err(FileError::new(ErrorCode::Internal, e.to_string(), false))
        }
        ReadError::Storage(e) => {
            let retry = e.status.is_none_or(|s| s >= 500 || s == 408 || s == 429);
            Err(FileError::new(ErrorCode::Storage, e.to_string(), retry))
        }
    }
}

impl DirectReads {
    /// The blob's properties as a `Source` from `offset` (if `etag` is still
    /// the blob's), and its ranges.
    pub(super) async fn open(
        &self,
        container: &str,
        blob: &str,
        offset: u64,
        etag: Option<String>,
    ) -> Result<Result<(Source, Ranges), Failure>, FileError> {
        let reader = ContainerReader::new(&self.storage, container)
            .map_err(|e| FileError::new(ErrorCode::Storage, e.to_string(), false))?;
        let props = match reader.properties(blob).await {
            Ok(p) => p,
            Err(e) => return read_error(e).map(Err),
        };
        let sealed = props
            .sealed_sha256(&self.id_key, container, blob)
            .map(str::to_string);
        let md5 = props.content_md5.map(hex::encode);
        let check = match (&sealed, &md5) {
            (Some(_), _) => Check::Sealed,
            (None, Some(_)) => Check::ContentMd5,
            (None, None) => Check::Ranges,
        };
        let from = match etag {
            Some(e) if relay_storage::read::same_etag(&e, &props.etag) && offset <= props.size => {
                offset
            }
            _ => 0,
        };
        let source = Source {
            etag: props.etag.clone(),
            size: props.size,
            offset: from,
            check,
            sha256: sealed,
            content_md5: md5,
            content_type: props.content_type.clone(),
            last_modified: props.last_modified,
            encoding: None,
        };
        let ranges = Ranges {
            reader: Arc::new(reader),
            blob: blob.to_string(),
            etag: props.etag,
            next: from,
            size: props.size,
            in_flight: self.ranges_in_flight.max(1),
            budget: self.budget.clone(),
            inflight: VecDeque::new(),
            held: None,
            check: range_check(check),
            checked: 0,
        };
        Ok(Ok((source, ranges)))
    }
}

/// A range read, with the memory it holds; or storage's refusal (the blob
/// gone or changed), or a failure.
type RangeRead = Result<(Bytes, OwnedSemaphorePermit), Result<Failure, FileError>>;

/// A blob's bytes as checked ranges, read a few ahead, handed out in order.
pub struct Ranges {
    reader: Arc<dyn BlobSource>,
    blob: String,
    etag: String,
    next: u64,
    size: u64,
    /// Ranges read ahead at most.
    in_flight: usize,
    budget: Budget,
    inflight: VecDeque<JoinHandle<RangeRead>>,
    /// The memory of the range handed out last, until its bytes are written
    /// (the next call).
    held: Option<OwnedSemaphorePermit>,
    check: RangeCheck,
    checked: u64,
}

impl Drop for Ranges {
    fn drop(&mut self) {
        for h in &self.inflight {
            h.abort();
        }
    }
}

impl Ranges {
    pub(super) async fn next(&mut self) -> Result<Next, FileError> {
        // The last range's bytes are written by now.
        self.held = None;
        while self.inflight.len() < self.in_flight && self.next < self.size {
            let len = (self.size - self.next).min(MAX_CHECKED_RANGE);
            // A file waits for memory only with nothing in flight (and so
            // holding none): one that waited with ranges in hand could hold
            // memory others wait for while it waits for theirs.
            let memory = if self.inflight.is_empty() {
                self.budget
                    .take(len)
                    .await
                    .map_err(|e| FileError::new(ErrorCode::Internal, e.to_string(), false))?
            } else {
                match self.budget.try_take(len) {
                    Some(memory) => memory,
                    None => break,
                }
            };
            let (reader, blob, etag, at, check) = (
                self.reader.clone(),
                self.blob.clone(),
                self.etag.clone(),
                self.next,
                self.check,
            );
            self.inflight.push_back(tokio::spawn(async move {
                match reader.range(&blob, &etag, at, len, check).await {
                    Ok(bytes) => Ok((bytes, memory)),
                    Err(e) => Err(read_error(e)),
                }
            }));
            self.next += len;
        }
        let Some(h) = self.inflight.pop_front() else {
            return Ok(Next::End {
                ranges_checked: self.checked,
            });
        };
        match h.await {
            Ok(Ok((bytes, memory))) => {
                if self.check == RangeCheck::StorageMd5 {
                    self.checked += 1;
                }
                self.held = Some(memory);
                Ok(Next::Bytes(bytes))
            }
            Ok(Err(refused)) => refused.map(Next::Refused),
            Err(e) => Err(FileError::new(ErrorCode::Internal, e.to_string(), false)),
        }
    }
}

/// Lists `container` under `prefix` into `tx`, a page at a time, from
/// `cursor`'s marker and past the names it has handed on already.
pub async fn list(
    storage: &Storage,
    container: &str,
    prefix: &str,
    tx: &mpsc::Sender<Listed>,
    cursor: &mut Cursor,
) -> Result<(), FileError> {
    let lister = ContainerReader::new(storage, container)
        .map_err(|e| FileError::new(ErrorCode::Storage, e.to_string(), false))?;
    loop {
        let page = match lister.list_page(prefix, cursor.marker(), PAGE).await {
            Ok(p) => p,
            Err(ReadError::NotFound) => {
                return Err(FileError::new(
                    ErrorCode::StorageRefused,
                    format!("ContainerNotFound: container {container:?} does not exist"),
                    false,
                ));
            }
            Err(e) => {
                return Err(read_error(e).map_or_else(
                    |e| FileError::new(e.code, format!("listing: {}", e.message), e.retryable),
                    |f| {
                        FileError::new(ErrorCode::Storage, format!("listing: {}", f.message), false)
                    },
                ));
            }
        };
        cursor.answered();
        for b in page.blobs {
            if cursor.passed(&b.name) {
                continue;
            }
            let name = b.name.clone();
            let listed = Listed {
                name: b.name,
                size: b.size,
                etag: b.etag,
                last_modified: b.last_modified,
                // Direct mode holds no relay key: it vouches for nothing.
                sha256: None,
            };
            if tx.send(listed).await.is_err() {
                return Ok(());
            }
            cursor.hand(&name);
        }
        match page.next_marker {
            Some(m) if !m.is_empty() => cursor.page_ended(m),
            _ => return Ok(()),
        }
    }
}
