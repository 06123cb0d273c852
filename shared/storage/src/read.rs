//! Reading blobs back (downloads): a blob's properties, its bytes in ranges
//! each read under `If-Match` on the version the reader started with (and,
//! when the caller asks, checked against storage's MD5 of that range before
//! it is used), and a container's listing one page at a time.
//!
//! A range is checked only when nothing checks the whole blob
//! ([`RangeCheck`]): a sealed blob's SHA-256 or a blob's Content-MD5 is
//! checked end to end by the client, and MD5 of every range would cost the
//! relay (and storage) as much CPU again as the rest of sending it.
//!
//! Ranges are checked with MD5 (`x-ms-range-get-content-md5`), not Azure's
//! CRC-64 (`x-ms-range-get-content-crc64`): Azurite, which the tests run
//! against, refuses that header, so a CRC-64 path could not be tested.
//!
//! The requests go through the account's pipeline and the writer's retry
//! schedule (`BlobWriter::with_retry`): a 5xx, a reset or a body cut short is
//! retried; 412 means the blob changed (`ReadError::Changed`), 404 that it is
//! gone (`ReadError::NotFound`). Every read is watched as a write is
//! (`watch.rs`): no answer within the stall timeout, or an answer whose body
//! stops for that long, is abandoned and sent again, however the connection
//! is kept alive meanwhile.

use std::time::Duration;

use azure_core::error::ErrorKind;
use azure_core::http::{AsyncResponseBody, Method, Request};
use azure_storage_blob::models::BlobClientGetPropertiesResultHeaders;
use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};
use relay_proto::blob_name::SHA256_METADATA_KEY;
use relay_proto::id_key::{IdKey, SEAL_METADATA_KEY};

use crate::blob::BlobWriter;
use crate::error::BlobError;

/// Largest range whose MD5 storage computes (`x-ms-range-get-content-md5`).
pub const MAX_CHECKED_RANGE: u64 = 4 << 20;

/// What a range read checks besides its length and its version (`If-Match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeCheck {
    /// Storage's MD5 of the range, asked for with the read and compared with
    /// the bytes: for a blob nothing else checks.
    StorageMd5,
    /// The length only: the whole blob's hash is checked at the end.
    LengthOnly,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No blob of this name (or it was deleted while being read).
    #[error("no such blob")]
    NotFound,
    /// The blob is not at the ETag the read started with any more.
    #[error("the blob changed while it was being read (its ETag moved)")]
    Changed,
    /// A caller asked for a range storage does not checksum.
    #[error("a checked range is at most {MAX_CHECKED_RANGE} bytes, not {0}")]
    RangeTooLarge(u64),
    /// Storage's answer for one name of a listing is larger than a page may
    /// hold.
    #[error("storage's listing answer for one name is larger than {0} bytes")]
    AnswerTooLarge(u64),
    /// Storage failed, after the retries, or refused the request.
    #[error(transparent)]
    Storage(BlobError),
}

impl From<BlobError> for ReadError {
    fn from(e: BlobError) -> Self {
        match e.status {
            Some(404) => ReadError::NotFound,
            Some(412) => ReadError::Changed,
            _ => ReadError::Storage(e),
        }
    }
}

/// An ETag in the form storage's headers write it (`"0x8D…"`, quoted):
/// Azure's List Blobs writes it bare, Get Blob Properties and `If-Match`
/// quoted, so every ETag a reader hands on is made this one form.
pub fn header_etag(etag: &str) -> String {
    if etag.is_empty() || (etag.len() >= 2 && etag.starts_with('"') && etag.ends_with('"')) {
        etag.to_string()
    } else {
        format!("\"{}\"", etag.trim_matches('"'))
    }
}

/// Whether two ETags name one version, quoted or not.
pub fn same_etag(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
}

/// A blob as a reader sees it before its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadProperties {
    pub etag: String,
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub last_modified: Option<u64>,
    /// The blob's Content-MD5, if storage holds one.
    pub content_md5: Option<[u8; 16]>,
    pub content_type: Option<String>,
    /// The relay's SHA-256 and seal from metadata, as found (not yet checked).
    pub sha256: Option<String>,
    pub seal: Option<String>,
}

impl ReadProperties {
    /// The SHA-256 (hex) the relay vouches for: the one in metadata, only if
    /// the seal over it, this blob's name and size verifies under `key` (any
    /// storage writer can set metadata; only a holder of the key can seal).
    pub fn sealed_sha256(&self, key: &IdKey, container: &str, blob: &str) -> Option<&str> {
        let sha = self.sha256.as_deref()?;
        let seal = self.seal.as_deref()?;
        crate::publish::seal_holds(key, container, blob, self.size, sha, seal).then_some(sha)
    }
}

/// Reads one blob. Cheap; counts its requests and retries like a writer.
pub struct BlobReader {
    pub(crate) w: BlobWriter,
}

impl BlobReader {
    /// Storage requests sent (retries included).
    pub fn requests(&self) -> u32 {
        self.w.requests()
    }

    pub fn retries(&self) -> u32 {
        self.w.retries()
    }

    /// Get Blob Properties.
    pub async fn properties(&self) -> Result<ReadProperties, ReadError> {
        let sdk = self.w.sdk()?;
        let resp = self
            .w
            .with_retry("Get Blob Properties", false, Duration::ZERO, || {
                sdk.blob.get_properties(None)
            })
            .await?;
        let bad = |e: azure_core::Error| BlobError::from_azure("Get Blob Properties", e);
        let metadata = resp.metadata().map_err(bad)?;
        let find = |key: &str| {
            metadata
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        Ok(ReadProperties {
            etag: resp
                .etag()
                .map_err(bad)?
                .map(|e| header_etag(e.as_ref()))
                .unwrap_or_default(),
            size: resp.content_length().map_err(bad)?.unwrap_or(0),
            last_modified: resp
                .last_modified()
                .map_err(bad)?
                .and_then(|t| u64::try_from(t.unix_timestamp()).ok()),
            content_md5: resp
                .content_md5()
                .map_err(bad)?
                .and_then(|m| <[u8; 16]>::try_from(m.as_slice()).ok()),
            content_type: resp.content_type().map_err(bad)?,
            sha256: find(SHA256_METADATA_KEY),
            seal: find(SEAL_METADATA_KEY),
        })
    }

    /// `len` bytes from `offset` of the version `etag`; with
    /// [`RangeCheck::StorageMd5`] their MD5 is checked against storage's
    /// before they are returned (a mismatch is retried, like a reset). `len`
    /// is at most `MAX_CHECKED_RANGE` and the range lies inside the blob.
    pub async fn range(
        &self,
        etag: &str,
        offset: u64,
        len: u64,
        check: RangeCheck,
    ) -> Result<Bytes, ReadError> {
        if let Some(answer) = without_storage(len) {
            return answer;
        }
        let url = self.w.url.clone();
        let version = self.w.account.version.clone();
        let range = format!("bytes={}-{}", offset, offset + len - 1);
        let body = self
            .w
            .with_retry("Get Blob", false, Duration::ZERO, || {
                let mut r = Request::new(url.clone(), Method::Get);
                r.insert_header("x-ms-range", range.clone());
                if check == RangeCheck::StorageMd5 {
                    r.insert_header("x-ms-range-get-content-md5", "true");
                }
                r.insert_header("if-match", etag.to_string());
                r.insert_header("x-ms-version", version.clone());
                async move {
                    let resp = self.w.answer(&mut r, &[200, 206]).await?;
                    let md5 = resp.headers().get_optional_string(
                        &azure_core::http::headers::HeaderName::from_static("content-md5"),
                    );
                    // Into one buffer of the range's size: what the budget
                    // granted, never more (an answer longer is sent again).
                    let body = collect_at_most(resp.into_body(), len)
                        .await?
                        .ok_or_else(|| {
                            azure_core::Error::with_message(
                                ErrorKind::Io,
                                format!("range body longer than the {len} bytes asked for"),
                            )
                        })?;
                    check_range(&body, len, check, md5.as_deref())
                        .map_err(|why| azure_core::Error::with_message(ErrorKind::Io, why))?;
                    Ok(body)
                }
            })
            .await;
        match body {
            Ok(body) => Ok(body),
            // A storage may answer a conditional read of a deleted blob with
            // 412 rather than 404 (Azurite does): ask which it is.
            Err(e) => match ReadError::from(e) {
                ReadError::Changed => match self.properties().await {
                    Err(ReadError::NotFound) => Err(ReadError::NotFound),
                    _ => Err(ReadError::Changed),
                },
                other => Err(other),
            },
        }
    }
}

/// A range read answered before any request (for Azure and its twin alike):
/// one larger than storage checksums is refused, an empty one is empty.
pub(crate) fn without_storage(len: u64) -> Option<Result<Bytes, ReadError>> {
    if len > MAX_CHECKED_RANGE {
        return Some(Err(ReadError::RangeTooLarge(len)));
    }
    (len == 0).then(|| Ok(Bytes::new()))
}

/// An answer's body in one buffer of at most `max` bytes, allocated once
/// (its pages become resident only as bytes arrive); `None` if the body is
/// longer, read no further.
pub(crate) async fn collect_at_most(
    mut body: AsyncResponseBody,
    max: u64,
) -> azure_core::Result<Option<Bytes>> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(max);
    while let Some(piece) = body.next().await {
        let piece = piece?;
        if piece.len() > max - out.len() {
            return Ok(None);
        }
        out.extend_from_slice(&piece);
    }
    Ok(Some(Bytes::from(out)))
}

/// Whether a range's body is whole and, when asked, matches storage's MD5
/// of it (base64). A failure is the transport's: the request is sent again.
pub(crate) fn check_range(
    body: &[u8],
    len: u64,
    check: RangeCheck,
    md5_b64: Option<&str>,
) -> Result<(), String> {
    if body.len() as u64 != len {
        return Err(format!(
            "range body has {} bytes, expected {len}",
            body.len()
        ));
    }
    if check == RangeCheck::LengthOnly {
        return Ok(());
    }
    let Some(md5_b64) = md5_b64 else {
        return Err("storage sent no Content-MD5 for the range".into());
    };
    let theirs = base64::engine::general_purpose::STANDARD
        .decode(md5_b64)
        .map_err(|_| "storage's range Content-MD5 is not base64".to_string())?;
    if Md5::digest(body).as_slice() != theirs.as_slice() {
        return Err("range MD5 mismatch: the bytes were corrupted in transit".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_used_only_whole_and_matching_its_md5() {
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(Md5::digest(d));
        let md5 = RangeCheck::StorageMd5;
        let body = b"some bytes of a blob";
        assert_eq!(check_range(body, 20, md5, Some(&b64(body))), Ok(()));
        assert!(check_range(body, 21, md5, Some(&b64(body))).is_err());
        assert!(check_range(body, 20, md5, None).is_err());
        assert!(check_range(body, 20, md5, Some("not base64!")).is_err());
        let e = check_range(
            b"some bytes of a blob",
            20,
            md5,
            Some(&b64(b"other bytes of blob!")),
        );
        assert!(e.is_err_and(|e| e.contains("MD5 mismatch")));
    }

    /// A range whose blob is checked whole is held to its length only: no
    /// MD5 needed, none compared, but a short body is still sent again.
    #[test]
    fn a_length_only_range_is_held_to_its_length() {
        let only = RangeCheck::LengthOnly;
        let body = b"some bytes of a blob";
        assert_eq!(check_range(body, 20, only, None), Ok(()));
        assert_eq!(check_range(body, 20, only, Some("not base64!")), Ok(()));
        assert!(check_range(body, 21, only, None).is_err());
    }

    #[test]
    fn etags_are_handed_on_in_the_headers_form() {
        assert_eq!(header_etag("0x8DC0FFEE"), "\"0x8DC0FFEE\"");
        assert_eq!(header_etag("\"0x8DC0FFEE\""), "\"0x8DC0FFEE\"");
        assert_eq!(header_etag(""), "");
        assert_eq!(header_etag("\""), "\"\"");
        assert!(same_etag("0x1", "\"0x1\""));
        assert!(!same_etag("0x1", "\"0x2\""));
    }

    #[test]
    fn status_codes_become_typed_errors() {
        let e = |status| BlobError {
            status: Some(status),
            code: None,
            message: String::new(),
        };
        assert!(matches!(ReadError::from(e(404)), ReadError::NotFound));
        assert!(matches!(ReadError::from(e(412)), ReadError::Changed));
        assert!(matches!(ReadError::from(e(503)), ReadError::Storage(_)));
    }
}
