//! Where a request's body progress is seen: the HTTP client pulling it.
//!
//! The Azure SDK hands its transport a request whose body is one `Bytes`. Our
//! transport (`WatchedClient`, what `Storage` gives the SDK) sends such a body
//! as a stream of slices of that same buffer (`Bytes::slice`: no copy), and
//! each time the HTTP client pulls the next slice, the previous ones have left
//! its buffers for the connection, so the time and byte count go into the
//! attempt's `BodyTracker`. `watch::RequestWatch` judges from them.
//!
//! The answer is watched the same way: when its status and headers arrive,
//! and as each piece of its body comes in, the transport notes it in the same
//! tracker, so a read whose answer stops halfway is seen as stuck while one
//! that moves slowly is not (`watch.rs`).
//!
//! The tracker reaches the transport through a task-local set around the SDK
//! call (`TRACKER.scope` in `blob.rs`): the SDK's pipeline runs the transport
//! inside that call, and offers no other way to pass a per-request value to
//! it. A request made outside any scope is sent unwatched, as a plain body.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use azure_core::error::{Error, ErrorKind};
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Method, Request};
use bytes::Bytes;
use futures::{Stream, TryStreamExt};

use crate::watch::BodyProgress;

const CONTENT_LENGTH: HeaderName = HeaderName::from_static("content-length");

/// Bytes per pull: fine enough that a body moving at a few hundred kbit/s
/// shows progress every second or two, coarse enough to cost nothing (256
/// pulls for a 16 MiB block).
pub const CHUNK_BYTES: usize = 64 * 1024;

tokio::task_local! {
    /// The tracker of the attempt the current task is making.
    pub static TRACKER: Arc<BodyTracker>;
}

/// One attempt's body progress, written by the stream the HTTP client polls
/// (possibly on another task) and read by the attempt's watch.
#[derive(Debug)]
pub struct BodyTracker {
    base: Instant,
    bytes: AtomicU64,
    /// Nanoseconds after `base` + 1 of the last progress; 0: none yet.
    at_ns: AtomicU64,
    /// Nanoseconds after `base` + 1 when the body was all handed over; 0: not yet.
    done_ns: AtomicU64,
    /// Nanoseconds after `base` + 1 when the answer's head came; 0: not yet.
    answered_ns: AtomicU64,
    /// Bytes of the answer's body received.
    received: AtomicU64,
    /// Nanoseconds after `base` + 1 when `received` last grew; 0: never.
    received_ns: AtomicU64,
}

impl BodyTracker {
    pub fn new(base: Instant) -> Self {
        Self {
            base,
            bytes: AtomicU64::new(0),
            at_ns: AtomicU64::new(0),
            done_ns: AtomicU64::new(0),
            answered_ns: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_ns: AtomicU64::new(0),
        }
    }

    fn stamp(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX - 1)
            + 1
    }

    fn unstamp(&self, ns: u64) -> Option<Instant> {
        (ns > 0).then(|| self.base + std::time::Duration::from_nanos(ns - 1))
    }

    /// `bytes` of the body handed over, at `now`. The time is stored before
    /// the count, and read after it, so a reader that sees a count sees a time
    /// at least as recent.
    pub fn record(&self, bytes: u64, now: Instant) {
        self.at_ns.store(self.stamp(now), Ordering::Release);
        self.bytes.fetch_max(bytes, Ordering::AcqRel);
    }

    pub fn done(&self, now: Instant) {
        self.done_ns.store(self.stamp(now), Ordering::Release);
    }

    /// The answer's status and headers came at `now`.
    pub fn answered(&self, now: Instant) {
        self.answered_ns.store(self.stamp(now), Ordering::Release);
    }

    /// `bytes` more of the answer's body came at `now` (time before count, as
    /// in `record`).
    pub fn received(&self, bytes: u64, now: Instant) {
        self.received_ns.store(self.stamp(now), Ordering::Release);
        self.received.fetch_add(bytes, Ordering::AcqRel);
    }

    pub fn snapshot(&self) -> BodyProgress {
        let bytes = self.bytes.load(Ordering::Acquire);
        let received = self.received.load(Ordering::Acquire);
        BodyProgress {
            bytes,
            at: self.unstamp(self.at_ns.load(Ordering::Acquire)),
            done_at: self.unstamp(self.done_ns.load(Ordering::Acquire)),
            answered_at: self.unstamp(self.answered_ns.load(Ordering::Acquire)),
            received,
            received_at: self.unstamp(self.received_ns.load(Ordering::Acquire)),
        }
    }
}

/// A body as slices of one buffer, recording each pull in a tracker.
pub struct TrackedBody {
    data: Bytes,
    offset: usize,
    chunk: usize,
    tracker: Arc<BodyTracker>,
}

impl TrackedBody {
    pub fn new(data: Bytes, chunk: usize, tracker: Arc<BodyTracker>) -> Self {
        Self {
            data,
            offset: 0,
            chunk: chunk.max(1),
            tracker,
        }
    }
}

impl Stream for TrackedBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.offset >= this.data.len() {
            return Poll::Ready(None);
        }
        let end = (this.offset + this.chunk).min(this.data.len());
        let slice = this.data.slice(this.offset..end);
        let now = Instant::now();
        // Pulling this slice means the ones before it left the client's buffers.
        this.tracker.record(end as u64, now);
        if end == this.data.len() {
            this.tracker.done(now);
        }
        this.offset = end;
        Poll::Ready(Some(Ok(slice)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.data.len() - self.offset).div_ceil(self.chunk);
        (left, Some(left))
    }
}

/// The SDK's transport: reqwest, with request bodies sent as `TrackedBody`
/// when an attempt is being watched. Otherwise what the SDK's own reqwest
/// transport does.
#[derive(Debug)]
pub struct WatchedClient {
    http: reqwest::Client,
}

impl WatchedClient {
    pub fn new(http: reqwest::Client) -> Self {
        Self { http }
    }
}

#[async_trait::async_trait]
impl HttpClient for WatchedClient {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let mut req = self
            .http
            .request(reqwest_method(request.method())?, request.url().clone());
        for (name, value) in request.headers().iter() {
            req = req.header(name.as_str(), value.as_str());
        }
        let body = match request.body().clone() {
            Body::Bytes(bytes) => match TRACKER.try_with(Arc::clone) {
                Ok(tracker) if !bytes.is_empty() => {
                    // A stream's length is unknown to the HTTP client, which
                    // would then send it chunked (Put Block List has no
                    // Content-Length of the SDK's own); a `Bytes` body gets
                    // one from the client, so this one gets it from us.
                    if request
                        .headers()
                        .get_optional_str(&CONTENT_LENGTH)
                        .is_none()
                    {
                        req = req.header(CONTENT_LENGTH.as_str(), bytes.len().to_string());
                    }
                    reqwest::Body::wrap_stream(TrackedBody::new(bytes, CHUNK_BYTES, tracker))
                }
                _ => reqwest::Body::from(bytes),
            },
            Body::SeekableStream(stream) => reqwest::Body::wrap_stream(stream),
        };
        let req = req
            .body(body)
            .build()
            .map_err(|e| Error::with_error(ErrorKind::Other, e, "cannot build the request"))?;
        let rsp = self.http.execute(req).await.map_err(|e| {
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            Error::with_error(kind, e, "request failed")
        })?;
        let status = rsp.status().as_u16().into();
        let headers = headers_of(rsp.headers());
        let answer = TRACKER.try_with(Arc::clone).ok();
        if let Some(t) = &answer {
            t.answered(Instant::now());
        }
        let body = Box::pin(
            rsp.bytes_stream()
                .inspect_ok(move |piece| {
                    // Each piece of the answer is progress of this attempt.
                    if let Some(t) = &answer {
                        t.received(piece.len() as u64, Instant::now());
                    }
                })
                .map_err(|e| Error::with_error(ErrorKind::Io, e, "reading the response failed")),
        );
        Ok(AsyncRawResponse::new(status, headers, body))
    }
}

fn reqwest_method(m: Method) -> Result<reqwest::Method, Error> {
    reqwest::Method::from_bytes(m.as_ref().as_bytes())
        .map_err(|e| Error::with_error(ErrorKind::Other, e, "unknown HTTP method"))
}

/// Response headers for the SDK; a value that is not UTF-8 is left out (the
/// SDK's own transport does the same).
fn headers_of(map: &reqwest::header::HeaderMap) -> Headers {
    let mut headers = Headers::new();
    for (k, v) in map {
        if let Ok(value) = v.to_str() {
            headers.insert(
                HeaderName::from(k.as_str().to_owned()),
                HeaderValue::from(value.to_owned()),
            );
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn slices_share_the_buffer_and_record_each_pull() {
        let data = Bytes::from(vec![7u8; 200_000]);
        let t0 = Instant::now();
        let tracker = Arc::new(BodyTracker::new(t0));
        let mut body = TrackedBody::new(data.clone(), CHUNK_BYTES, tracker.clone());
        assert_eq!(tracker.snapshot(), BodyProgress::default());
        let first = body.next().await.expect("a chunk").expect("no error");
        assert_eq!(first.len(), CHUNK_BYTES);
        // A slice of the same allocation, not a copy.
        assert_eq!(first.as_ptr(), data.as_ptr());
        let s = tracker.snapshot();
        assert_eq!(s.bytes, CHUNK_BYTES as u64);
        assert!(s.at.is_some_and(|at| at >= t0));
        assert_eq!(s.done_at, None);
        let mut total = first.len();
        while let Some(chunk) = body.next().await {
            total += chunk.expect("no error").len();
        }
        assert_eq!(total, data.len());
        let s = tracker.snapshot();
        assert_eq!(s.bytes, data.len() as u64);
        assert!(s.done_at.is_some());
    }
}
