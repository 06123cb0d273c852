//! Put Blob, the request a small file is published with, built here and sent
//! through one pipeline per storage account (`Storage`), not through the
//! SDK's per-blob client.
//!
//! Why: a relay publishes thousands of small files a second, and a
//! `BlobClient` built per file (a pipeline of its own) plus the SDK's
//! partitioned upload cost more CPU than the request itself
//! (docs/PERFORMANCE.md, "CPU per small file"). The request is the one the
//! SDK's `BlockBlobClient::upload` sends for a body of one partition, the
//! pipeline the same policies (the SAS or the Entra ID bearer token, request
//! ID, user agent) over the same transport (`WatchedClient`), so the watch,
//! the retries and Azure's error codes are unchanged.

use std::collections::HashMap;

use azure_core::http::{Method, Request, Url};
use base64::Engine as _;
use bytes::Bytes;

/// The service's answer to a Put Blob that stored the blob.
pub(crate) const CREATED: &[u16] = &[201];

/// The checksum a Put Blob carries; the service recomputes it over what
/// arrived and refuses the request on a mismatch, so a body corrupted on its
/// way to storage is never published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyChecksum<'a> {
    /// `x-ms-blob-content-md5`: checked, and stored as the blob's Content-MD5.
    Md5(&'a [u8]),
    /// `x-ms-content-crc64` (its 8 bytes little-endian): checked, not stored.
    /// For a Put Blob without an MD5 the service computes the Content-MD5
    /// itself, so the blob carries one all the same.
    Crc64([u8; 8]),
}

/// What one Put Blob sends besides its body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PutBlob<'a> {
    /// The blob's URL, without its SAS (the pipeline adds it).
    pub url: &'a Url,
    /// `x-ms-version`: the SDK's own REST API version.
    pub version: &'a str,
    pub checksum: BodyChecksum<'a>,
    pub content_type: Option<&'a str>,
    /// The user's metadata with the SHA-256 and the seal (`commit_metadata`).
    pub metadata: &'a HashMap<String, String>,
    pub if_match: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
}

impl PutBlob<'_> {
    /// The request for `body`, headers as the SDK's generated `upload` sets them.
    pub(crate) fn request(&self, body: Bytes) -> Request {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut r = Request::new(self.url.clone(), Method::Put);
        r.insert_header("content-length", body.len().to_string());
        r.insert_header("content-type", "application/octet-stream");
        if let Some(etag) = self.if_match {
            r.insert_header("if-match", etag.to_string());
        }
        if let Some(etag) = self.if_none_match {
            r.insert_header("if-none-match", etag.to_string());
        }
        match self.checksum {
            BodyChecksum::Md5(md5) => r.insert_header("x-ms-blob-content-md5", b64.encode(md5)),
            BodyChecksum::Crc64(crc) => r.insert_header("x-ms-content-crc64", b64.encode(crc)),
        }
        if let Some(ct) = self.content_type {
            r.insert_header("x-ms-blob-content-type", ct.to_string());
        }
        r.insert_header("x-ms-blob-type", "BlockBlob");
        for (k, v) in self.metadata {
            r.insert_header(format!("x-ms-meta-{k}"), v.clone());
        }
        r.insert_header("x-ms-version", self.version.to_string());
        r.set_body(body);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(r: &Request, name: &'static str) -> Option<String> {
        r.headers()
            .get_optional_string(&azure_core::http::headers::HeaderName::from_static(name))
    }

    #[test]
    fn sends_what_the_sdk_sends_for_a_one_partition_upload() {
        let url = Url::parse("https://acct.blob.core.windows.net/c/dir/a%20b.bin").expect("url");
        let meta: HashMap<String, String> = [("sha256".to_string(), "ab".repeat(32))].into();
        let put = PutBlob {
            url: &url,
            version: "2026-04-06",
            checksum: BodyChecksum::Md5(&[0u8; 16]),
            content_type: Some("text/plain"),
            metadata: &meta,
            if_match: None,
            if_none_match: Some("*"),
        };
        let r = put.request(Bytes::from_static(b"hello"));
        assert_eq!(r.method(), Method::Put);
        assert_eq!(r.url(), &url);
        let expect = [
            ("content-length", "5"),
            ("content-type", "application/octet-stream"),
            ("if-none-match", "*"),
            ("x-ms-blob-content-md5", "AAAAAAAAAAAAAAAAAAAAAA=="),
            ("x-ms-blob-content-type", "text/plain"),
            ("x-ms-blob-type", "BlockBlob"),
            ("x-ms-version", "2026-04-06"),
        ];
        for (name, value) in expect {
            assert_eq!(header(&r, name).as_deref(), Some(value), "{name}");
        }
        assert_eq!(
            header(&r, "x-ms-meta-sha256").as_deref(),
            Some("ab".repeat(32).as_str())
        );
        assert_eq!(header(&r, "if-match"), None);
        assert_eq!(header(&r, "x-ms-content-crc64"), None);
    }

    #[test]
    fn an_overwrite_of_a_known_version_sends_if_match_only() {
        let url = Url::parse("http://127.0.0.1:10000/devstoreaccount1/c/b").expect("url");
        let meta = HashMap::new();
        let put = PutBlob {
            url: &url,
            version: "v",
            checksum: BodyChecksum::Crc64([1, 0, 0, 0, 0, 0, 0, 0]),
            content_type: None,
            metadata: &meta,
            if_match: Some("\"0x8D\""),
            if_none_match: None,
        };
        let r = put.request(Bytes::new());
        assert_eq!(header(&r, "if-match").as_deref(), Some("\"0x8D\""));
        assert_eq!(header(&r, "if-none-match"), None);
        assert_eq!(header(&r, "x-ms-blob-content-type"), None);
        assert_eq!(header(&r, "content-length").as_deref(), Some("0"));
        assert_eq!(
            header(&r, "x-ms-content-crc64").as_deref(),
            Some("AQAAAAAAAAA=")
        );
        assert_eq!(header(&r, "x-ms-blob-content-md5"), None);
    }
}
