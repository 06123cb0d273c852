//! A download's first storage request: one Get Blob of the blob's first range
//! without `If-Match`, whose answer names the version it is of (ETag,
//! Last-Modified, Content-Type, the whole blob's Content-MD5, metadata and,
//! in `Content-Range`, the size). The properties then come with the bytes,
//! consistent with them because they are one answer, and a download of a
//! blob within one range is one request instead of Get Blob Properties and
//! a range (one storage request and one in-region round trip less a file).
//!
//! A blob of 0 bytes has no range to read: storage answers 416 (Azure and
//! Azurite alike) and its properties are asked for instead. A blob shorter
//! than the range comes back whole (`Content-Range: bytes 0-(size-1)/size`).

use std::time::Duration;

use azure_core::error::ErrorKind;
use azure_core::http::headers::Headers;
use azure_core::http::{Method, Request};
use base64::Engine as _;
use bytes::Bytes;
use relay_proto::blob_name::SHA256_METADATA_KEY;
use relay_proto::id_key::SEAL_METADATA_KEY;

use crate::read::{
    BlobReader, MAX_CHECKED_RANGE, RangeCheck, ReadError, ReadProperties, check_range,
    collect_at_most, header_etag,
};

/// A blob's first bytes and the properties of the version they are of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstRange {
    pub props: ReadProperties,
    /// The blob's bytes from 0: `min(len asked, size)` of them.
    pub bytes: Bytes,
}

/// How a first range is checked, once its answer says what the blob is: a
/// blob checked whole at the end (sealed, or with a Content-MD5) needs its
/// length only, one nothing else checks storage's MD5 of the range.
pub type CheckOf<'a> = &'a (dyn Fn(&ReadProperties) -> RangeCheck + Send + Sync);

impl BlobReader {
    /// One Get Blob of bytes `0..len` without `If-Match` (`len` at most
    /// `MAX_CHECKED_RANGE`, at least 1), the range checked as `check_of` says
    /// for the properties the answer names; a blob of 0 bytes (416) is
    /// answered by Get Blob Properties.
    pub async fn first_range(
        &self,
        len: u64,
        check_of: CheckOf<'_>,
    ) -> Result<FirstRange, ReadError> {
        if len > MAX_CHECKED_RANGE {
            return Err(ReadError::RangeTooLarge(len));
        }
        let len = len.max(1);
        let url = self.w.url.clone();
        let version = self.w.account.version.clone();
        let range = format!("bytes=0-{}", len - 1);
        let answer = self
            .w
            .with_retry("Get Blob", false, Duration::ZERO, || {
                let mut r = Request::new(url.clone(), Method::Get);
                r.insert_header("x-ms-range", range.clone());
                // Asked for every blob: whether the range must be checked is
                // known only from the answer.
                r.insert_header("x-ms-range-get-content-md5", "true");
                r.insert_header("x-ms-version", version.clone());
                async move {
                    let resp = self.w.answer(&mut r, &[200, 206]).await?;
                    let headers = lowercase(resp.headers());
                    let body = collect_at_most(resp.into_body(), len)
                        .await?
                        .ok_or_else(|| {
                            io(format!("first range longer than the {len} bytes asked for"))
                        })?;
                    let (props, range_md5) =
                        answered(&headers, body.len() as u64, len).map_err(io)?;
                    check_range(
                        &body,
                        body.len() as u64,
                        check_of(&props),
                        range_md5.as_deref(),
                    )
                    .map_err(io)?;
                    Ok(FirstRange { props, bytes: body })
                }
            })
            .await;
        match answer {
            Ok(first) => Ok(first),
            Err(e) if e.status == Some(416) => Ok(FirstRange {
                props: self.properties().await?,
                bytes: Bytes::new(),
            }),
            Err(e) => Err(ReadError::from(e)),
        }
    }
}

fn io(why: String) -> azure_core::Error {
    azure_core::Error::with_message(ErrorKind::Io, why)
}

/// An answer's headers, names lowercased (metadata names are
/// case-insensitive).
fn lowercase(h: &Headers) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), v.as_str().to_string()))
        .collect()
}

/// `Content-Range: bytes FIRST-LAST/TOTAL` as (first, last, total).
pub(crate) fn content_range(v: &str) -> Option<(u64, u64, u64)> {
    let (span, total) = v.trim().strip_prefix("bytes ")?.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    let (first, last, total) = (first.parse().ok()?, last.parse().ok()?, total.parse().ok()?);
    (first <= last && last < total).then_some((first, last, total))
}

/// The properties a first range's answer (`headers`, names lowercased; a
/// body of `got` bytes for `asked`) names, and storage's MD5 of the range.
/// An answer that does not hold together (a range not from 0, a body not
/// the range's length or shorter than asked of a longer blob) is the
/// transport's failure: the request is sent again.
pub(crate) fn answered(
    headers: &[(String, String)],
    got: u64,
    asked: u64,
) -> Result<(ReadProperties, Option<String>), String> {
    let find = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let size = match find("content-range") {
        Some(r) => {
            let (first, last, total) =
                content_range(&r).ok_or(format!("Content-Range {r:?} is not bytes a-b/size"))?;
            if first != 0 || last + 1 != got {
                return Err(format!(
                    "Content-Range {r:?} for a body of {got} bytes from 0"
                ));
            }
            total
        }
        // Storage ignored the range: the body is the whole blob (at most
        // `asked` bytes, or it was not read).
        None => got,
    };
    if got != asked.min(size) {
        return Err(format!(
            "first range has {got} bytes of a blob of {size}, asked {asked}"
        ));
    }
    let ranged = find("content-range").is_some();
    // On a ranged answer Content-MD5 is the range's, the blob's is
    // x-ms-blob-content-md5; on a whole answer Content-MD5 is both.
    let blob_md5 = if ranged {
        find("x-ms-blob-content-md5")
    } else {
        find("content-md5")
    };
    let meta = |k: &str| find(&format!("x-ms-meta-{k}"));
    let props = ReadProperties {
        etag: find("etag").map(|e| header_etag(&e)).unwrap_or_default(),
        size,
        last_modified: find("last-modified")
            .and_then(|t| azure_core::time::parse_rfc7231(&t).ok())
            .and_then(|t| u64::try_from(t.unix_timestamp()).ok()),
        content_md5: blob_md5
            .and_then(|m| {
                base64::engine::general_purpose::STANDARD
                    .decode(m.trim())
                    .ok()
            })
            .and_then(|m| <[u8; 16]>::try_from(m.as_slice()).ok()),
        content_type: find("content-type"),
        sha256: meta(&SHA256_METADATA_KEY.to_ascii_lowercase()),
        seal: meta(&SEAL_METADATA_KEY.to_ascii_lowercase()),
    };
    Ok((props, find("content-md5")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn content_range_is_first_last_and_total() {
        assert_eq!(content_range("bytes 0-9/100"), Some((0, 9, 100)));
        assert_eq!(content_range("bytes 0-0/1"), Some((0, 0, 1)));
        assert_eq!(content_range("bytes 0-9/5"), None);
        assert_eq!(content_range("bytes */0"), None);
        assert_eq!(content_range("bytes 9-0/100"), None);
        assert_eq!(content_range("0-9/100"), None);
        assert_eq!(content_range("bytes 0-9/x"), None);
    }

    #[test]
    fn a_ranged_answer_names_the_whole_blob() {
        let blob_md5 = base64::engine::general_purpose::STANDARD.encode([7u8; 16]);
        let headers = h(&[
            ("content-range", "bytes 0-9/25"),
            ("etag", "\"0x8D1\""),
            ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("content-type", "text/plain"),
            ("content-md5", "cmFuZ2U="),
            ("x-ms-blob-content-md5", &blob_md5),
            ("x-ms-meta-sha256", "ab"),
            ("x-ms-meta-relay_seal", "s"),
        ]);
        let (p, range_md5) = answered(&headers, 10, 10).expect("answer");
        assert_eq!(p.size, 25);
        assert_eq!(p.etag, "\"0x8D1\"");
        assert_eq!(p.last_modified, Some(784_111_777));
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            p.content_md5,
            Some([7u8; 16]),
            "the blob's, not the range's"
        );
        assert_eq!(
            (p.sha256.as_deref(), p.seal.as_deref()),
            (Some("ab"), Some("s"))
        );
        assert_eq!(range_md5.as_deref(), Some("cmFuZ2U="));
    }

    #[test]
    fn a_blob_shorter_than_the_range_comes_whole_and_a_short_body_is_refused() {
        let whole = h(&[("content-range", "bytes 0-4/5"), ("etag", "\"e\"")]);
        let (p, md5) = answered(&whole, 5, 4 << 20).expect("answer");
        assert_eq!((p.size, p.content_md5, md5), (5, None, None));
        // A body cut short, or a range not from 0, is sent again.
        assert!(answered(&whole, 4, 4 << 20).is_err());
        assert!(answered(&h(&[("content-range", "bytes 1-5/6")]), 5, 10).is_err());
        // Fewer bytes than asked of a longer blob.
        assert!(answered(&h(&[("content-range", "bytes 0-4/100")]), 5, 10).is_err());
        assert!(answered(&h(&[("content-range", "bytes 0-9/x")]), 10, 10).is_err());
    }

    #[test]
    fn an_answer_that_ignored_the_range_is_the_whole_blob_with_its_md5() {
        let md5 = base64::engine::general_purpose::STANDARD.encode([1u8; 16]);
        let (p, range_md5) = answered(&h(&[("content-md5", &md5)]), 3, 10).expect("answer");
        assert_eq!((p.size, p.content_md5), (3, Some([1u8; 16])));
        assert_eq!(range_md5, Some(md5));
    }
}
