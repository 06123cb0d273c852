//! One blob back to a client on one QUIC stream:
//! Fetch → Source | Reject → (Data{len} + len bytes)* → Sent | Error.
//!
//! The relay reads the blob from storage in ranges, several in flight, each
//! checked against storage's MD5 of that range (`relay_storage::read`), and
//! writes them to the client in order. The first range is read without
//! `If-Match`, and its answer names the version the Source names (one request
//! for both: `relay_storage::first_range`); every later one is under
//! `If-Match` on that ETag. A resume reads the properties first instead: its
//! offset holds only for the version its partial file has. A range's memory comes from the same budget as upload
//! blocks (the caller's share first, then the relay's), and is given back
//! once its bytes are in the connection's send buffer, itself bounded by the
//! connection window. A write that does not go through within
//! `DownloadLimits::write_timeout` (a client that stopped reading) ends the
//! stream and frees what it held.
//!
//! A client that asked for compressed chunks on a connection that agreed on
//! them gets each range as one section of chunks (`deflating`), the blob's
//! bytes inflated on its side; offsets and sizes count the blob's bytes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quinn::{RecvStream, SendStream};
use relay_pipeline::failure::{range_check, storage_failure};
use relay_proto::blob_name::validate_blob_name;
use relay_proto::id_key::Owner;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{
    Check, Code, Data, Encoding, Failure, Fetch, Message, Sent, Source, app_error,
};
use relay_storage::read::{MAX_CHECKED_RANGE, RangeCheck, ReadError, ReadProperties};
use relay_storage::source::{BlobSource, ContainerReader};
use relay_storage::staging::Budget;
use relay_transport::frames::write_frame;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::connection::link::Link;
use crate::connection::stream_credit::StreamTicket;
use crate::state::DownloadLimits;
use crate::state::Shared;
use crate::state::shares::Held;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::rejections::Reason;
use crate::transfer::admit::{Request, admit, admitted};
use crate::transfer::deflating::{Compressing, Section};
use crate::transfer::{refuse, reject};

/// Serves one Fetch (its frame already read).
pub(crate) async fn handle(
    shared: &Shared,
    link: &Link,
    ticket: &mut StreamTicket,
    send: &mut SendStream,
    recv: &mut RecvStream,
    fetch: Fetch,
) {
    let caller = match admit(shared, Request::fetch(&fetch)).await {
        Ok(c) => c,
        Err(r) => return refuse(shared, link, send, recv, r.into()).await,
    };
    if let Err(e) = validate_blob_name(&fetch.blob) {
        let f = Failure::new(Code::InvalidName, e.to_string());
        return reject(shared, send, recv, Reason::Code(f.code), f).await;
    }
    admitted(link, ticket);
    let span = tracing::info_span!(
        "fetch",
        container = %safe(&fetch.container),
        blob = %safe(&fetch.blob),
    );
    let owner = caller.owner(&fetch.token.0);
    serve(shared, link, &owner, send, recv, &fetch)
        .instrument(span)
        .await;
}

async fn serve(
    shared: &Shared,
    link: &Link,
    owner: &Owner,
    send: &mut SendStream,
    recv: &mut RecvStream,
    fetch: &Fetch,
) {
    let m = &shared.metrics;
    Metrics::add(&m.fetches_started, 1);
    let reader: Arc<dyn BlobSource> =
        match ContainerReader::new(&shared.storage.account, &fetch.container) {
            Ok(r) => Arc::new(r),
            Err(e) => {
                let f = storage_failure(&e);
                return reject(shared, send, recv, Reason::Code(f.code), f).await;
            }
        };
    let limits = shared.storage.download;
    let share = shared.share_of(owner);
    let range = range_len(&limits, shared.max_block_bytes());
    let (props, first) = match answer_first(shared, &share, &*reader, fetch, range).await {
        Ok(answer) => answer,
        Err(f) => {
            Metrics::add(&m.fetches_failed, 1);
            return reject(shared, send, recv, Reason::Code(f.code), f).await;
        }
    };
    let vouched = props.sealed_sha256(&shared.storage.id_key, &fetch.container, &fetch.blob);
    let mut source = source(&props, vouched, fetch);
    let (offset, size, check) = (source.offset, source.size, source.check);
    let remaining = size - offset;
    let compressing = Compressing::for_fetch(shared, link, &share, fetch, &props, remaining, range);
    let compressing = compressing.await;
    source.encoding = compressing.as_ref().map(|_| Encoding::Zstd);
    tracing::info!(etag = %source.etag, size, offset, check = ?source.check, encoding = ?source.encoding, "sending");
    if write_within(
        limits.write_timeout,
        send,
        &Message::Source(source),
        &mut [],
    )
    .await
    .is_err()
    {
        Metrics::add(&m.fetches_failed, 1);
        let _ = send.reset(app_error::PROTOCOL.into());
        return;
    }
    let sending = Sending {
        shared,
        share,
        reader: reader.clone(),
        blob: fetch.blob.clone(),
        etag: props.etag.clone(),
        range,
        check: range_check(check),
    };
    // The first range's bytes are the first section sent (a Fetch that reads
    // first starts at 0).
    let first = first.filter(|(bytes, _)| offset == 0 && !bytes.is_empty());
    let result = sending.run(offset, size, send, compressing, first).await;
    ended(shared, send, reader.requests(), result).await;
}

/// The blob's properties and, unless the Fetch resumes, its first range's
/// bytes with the memory they hold: one Get Blob answers for both.
async fn answer_first(
    shared: &Shared,
    share: &Budget,
    reader: &dyn BlobSource,
    fetch: &Fetch,
    range: u64,
) -> Result<(ReadProperties, Option<(Bytes, Held)>), Failure> {
    if !reads_first(fetch) {
        let props = reader.properties(&fetch.blob).await.map_err(read_failure)?;
        return Ok((props, None));
    }
    // The first range's memory before its request, as every range's.
    let mut held = hold_within(shared, share, range, None)
        .await
        .ok_or_else(|| no_memory(shared))?;
    let key = &shared.storage.id_key;
    let check_of = |p: &ReadProperties| {
        range_check(check_of(
            p,
            p.sealed_sha256(key, &fetch.container, &fetch.blob),
        ))
    };
    let first = reader
        .first_range(&fetch.blob, range, &check_of)
        .await
        .map_err(read_failure)?;
    // A blob shorter than the range needs only its bytes.
    let n = first.bytes.len() as u64;
    Budget::keep_only(&mut held.0, n);
    Budget::keep_only(&mut held.1, n);
    Ok((first.props, Some((first.bytes, held))))
}

/// Tells the client how the sending ended (`Sent`, or the `Error`), counts it
/// and ends the stream.
async fn ended(shared: &Shared, send: &mut SendStream, requests: u32, result: Result<u64, Stop>) {
    let m = &shared.metrics;
    let limits = shared.storage.download;
    match result {
        Ok(ranges_checked) => {
            let sent = Sent {
                ranges_checked,
                requests,
            };
            if write_within(limits.write_timeout, send, &Message::Sent(sent), &mut [])
                .await
                .is_ok()
            {
                Metrics::add(&m.fetches_completed, 1);
                tracing::info!(ranges_checked, "sent");
                finish(send, limits.write_timeout).await;
            } else {
                Metrics::add(&m.fetches_failed, 1);
                let _ = send.reset(app_error::PROTOCOL.into());
            }
        }
        Err(Stop::Failed(f)) => {
            Metrics::add(&m.fetches_failed, 1);
            shared.metrics.failures.record(Reason::Code(f.code));
            tracing::warn!(code = Reason::Code(f.code).label(), reason = %safe(&f.message), "download failed");
            let frame = Message::Error(f);
            if write_within(limits.write_timeout, send, &frame, &mut [])
                .await
                .is_ok()
            {
                finish(send, limits.write_timeout).await;
            } else {
                let _ = send.reset(app_error::PROTOCOL.into());
            }
        }
        Err(Stop::Gone) => {
            Metrics::add(&m.fetches_failed, 1);
            tracing::debug!("client stopped the download");
        }
        Err(Stop::Stalled) => {
            Metrics::add(&m.fetches_failed, 1);
            Metrics::add(&m.fetches_stalled, 1);
            tracing::warn!(
                timeout_s = limits.write_timeout.as_secs(),
                "client stopped reading; download dropped"
            );
            let _ = send.reset(app_error::PROTOCOL.into());
        }
    }
}

/// The Source a Fetch gets for a blob with these properties: how its bytes
/// are checked and where they start.
pub fn source(props: &ReadProperties, vouched_sha256: Option<&str>, fetch: &Fetch) -> Source {
    let check = check_of(props, vouched_sha256);
    // A resume only of the very version the partial file holds.
    let offset = match &fetch.etag {
        Some(etag)
            if relay_storage::read::same_etag(etag, &props.etag) && fetch.offset <= props.size =>
        {
            fetch.offset
        }
        _ => 0,
    };
    Source {
        etag: props.etag.clone(),
        size: props.size,
        offset,
        check,
        sha256: vouched_sha256.map(str::to_string),
        content_md5: props.content_md5.map(hex::encode),
        content_type: props.content_type.clone(),
        last_modified: props.last_modified,
        encoding: None,
    }
}

/// How a blob with these properties is checked: its seal, else its
/// Content-MD5, else every range.
fn check_of(props: &ReadProperties, vouched_sha256: Option<&str>) -> Check {
    match (vouched_sha256, props.content_md5) {
        (Some(_), _) => Check::Sealed,
        (None, Some(_)) => Check::ContentMd5,
        (None, None) => Check::Ranges,
    }
}

/// Whether a Fetch starts with one Get Blob of the first range, whose answer
/// names the properties too: every Fetch but a resume, which needs the
/// properties (is the partial file's version still there?) before it reads.
fn reads_first(fetch: &Fetch) -> bool {
    fetch.etag.is_none() || fetch.offset == 0
}

/// Budget for `len` bytes of a download, within the budget wait from `since`
/// (now, if `None`); `None`: the wait ran out.
async fn hold_within(
    shared: &Shared,
    share: &Budget,
    len: u64,
    since: Option<tokio::time::Instant>,
) -> Option<Held> {
    let deadline = since.unwrap_or_else(tokio::time::Instant::now) + shared.limits.budget_wait;
    tokio::time::timeout_at(deadline, shared.hold(share, len))
        .await
        .ok()
        .flatten()
}

/// No memory for a range within the budget wait.
fn no_memory(shared: &Shared) -> Failure {
    Failure::new(
        Code::Busy,
        format!(
            "no memory for a download range within {} s; retry later",
            shared.limits.budget_wait.as_secs()
        ),
    )
}

/// One range's length: the configured one, within storage's checked range
/// and one caller's share of the budget, never under 64 KiB.
fn range_len(limits: &DownloadLimits, max_block_bytes: u64) -> u64 {
    limits
        .range_bytes
        .min(MAX_CHECKED_RANGE)
        .min(max_block_bytes)
        .max(64 << 10)
}

/// A storage read's failure as the client hears it.
fn read_failure(e: ReadError) -> Failure {
    match e {
        ReadError::NotFound => Failure::new(Code::NotFound, "no such blob (or it was deleted)"),
        ReadError::Changed => Failure::new(
            Code::Changed,
            "the blob changed while it was being read (its ETag moved); fetch it again from 0",
        ),
        ReadError::RangeTooLarge(_) | ReadError::AnswerTooLarge(_) => {
            Failure::new(Code::Internal, e.to_string())
        }
        ReadError::Storage(e) => storage_failure(&e),
    }
}

/// Why the bytes stopped.
enum Stop {
    /// Told to the client in an Error frame.
    Failed(Failure),
    /// The client stopped reading: nothing more can be told.
    Stalled,
    /// The client stopped the stream or went away.
    Gone,
}

/// Ends the stream and waits (at most `timeout`) until the client has every
/// byte of it: a stream dropped sooner, then its connection closed (as at
/// shutdown), would lose what quinn had not sent yet, such as the last frame.
pub(crate) async fn finish(send: &mut SendStream, timeout: Duration) {
    if send.finish().is_ok() {
        let _ = tokio::time::timeout(timeout, send.stopped()).await;
    }
}

/// Writes one frame within `timeout`.
pub(crate) async fn write_frame_within(
    timeout: Duration,
    send: &mut SendStream,
    frame: &Message,
) -> Result<(), WriteFail> {
    write_within(timeout, send, frame, &mut []).await
}

/// Why a write to the client did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteFail {
    /// No room in the client's window for the write timeout: it stopped reading.
    TimedOut,
    /// The client stopped the stream or the connection is gone (a client that
    /// only wanted the Source, e.g. to compare a SHA-256, stops the stream).
    Gone,
}

/// Writes `frame` (and `body` after it) within `timeout`.
async fn write_within(
    timeout: Duration,
    send: &mut SendStream,
    frame: &Message,
    body: &mut [Bytes],
) -> Result<(), WriteFail> {
    let write = async {
        write_frame(send, frame)
            .await
            .map_err(|_| WriteFail::Gone)?;
        send.write_all_chunks(body)
            .await
            .map_err(|_| WriteFail::Gone)
    };
    tokio::time::timeout(timeout, write)
        .await
        .unwrap_or(Err(WriteFail::TimedOut))
}

/// Writes a section: its `Data` frame, then its pieces.
async fn write_section(
    timeout: Duration,
    send: &mut SendStream,
    mut section: Section,
) -> Result<(), WriteFail> {
    let frame = Message::Data(Data {
        len: section.wire_len,
    });
    write_within(timeout, send, &frame, &mut section.pieces).await
}

/// A range read in its own task, so reads go on while the driver writes;
/// dropped (the download ended) it is aborted and its memory returned.
struct RangeTask(JoinHandle<Result<Bytes, ReadError>>, Option<Held>, u64);

impl Drop for RangeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Sending<'a> {
    shared: &'a Shared,
    share: Budget,
    reader: Arc<dyn BlobSource>,
    blob: String,
    etag: String,
    range: u64,
    check: RangeCheck,
}

impl Sending<'_> {
    /// Sends `[offset, size)` in order (as chunks, `compressing` them); the
    /// ranges checked.
    async fn run(
        &self,
        offset: u64,
        size: u64,
        send: &mut SendStream,
        mut compressing: Option<Compressing>,
        first: Option<(Bytes, Held)>,
    ) -> Result<u64, Stop> {
        let limits = self.shared.storage.download;
        let mut pending: VecDeque<RangeTask> = VecDeque::new();
        let mut next = offset;
        if let Some((bytes, held)) = first {
            // Read already (with the properties): sent as a range whose
            // read is done, keeping its memory until its bytes are sent.
            let len = bytes.len() as u64;
            let read = tokio::spawn(async move { Ok(bytes) });
            pending.push_back(RangeTask(read, Some(held), len));
            next += len;
        }
        let mut checked = 0u64;
        // Where the next range sent starts (for the test hook).
        let mut sent_to = offset;
        let mut stopping = self.shared.stopping.clone();
        // Memory for the next range is waited for at most the budget wait,
        // counted from when the driver first wanted it.
        let mut waiting_since: Option<tokio::time::Instant> = None;
        loop {
            let want = pending.len() < limits.ranges_in_flight.max(1) && next < size;
            if want && waiting_since.is_none() {
                waiting_since = Some(tokio::time::Instant::now());
            }
            if !want && pending.is_empty() {
                return Ok(checked);
            }
            let len = self.range.min(size.saturating_sub(next));
            tokio::select! {
                biased;
                // A relay whose shutdown signal is gone is not stopping.
                _ = async {
                    if stopping.wait_for(|s| *s).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                } => {
                    return Err(Stop::Failed(Failure::new(Code::Busy, "the relay is shutting down; fetch again to resume")));
                }
                done = async { (&mut pending.front_mut()?.0).await.ok() }, if !pending.is_empty() => {
                    let Some(mut task) = pending.pop_front() else { continue };
                    let bytes = match done {
                        Some(Ok(bytes)) => bytes,
                        Some(Err(e)) => return Err(Stop::Failed(read_failure(e))),
                        None => return Err(Stop::Failed(Failure::new(Code::Internal, "a range read ended abnormally"))),
                    };
                    let n = bytes.len() as u64;
                    if n != task.2 {
                        return Err(Stop::Failed(Failure::new(Code::Internal, "a range read returned the wrong length")));
                    }
                    self.send_range(send, bytes, compressing.as_mut()).await?;
                    // Its bytes are in the send buffer: the budget has them back.
                    task.1 = None;
                    if let Some(pace) = self.shared.fetch_pace() {
                        tokio::time::sleep(pace(sent_to, n as usize)).await;
                    }
                    sent_to += n;
                    if self.check == RangeCheck::StorageMd5 {
                        checked += 1;
                    }
                }
                held = self.take(len, waiting_since), if want => {
                    let Some(held) = held else {
                        if pending.is_empty() {
                            return Err(Stop::Failed(no_memory(self.shared)));
                        }
                        // Ranges are in flight: send those, then wait again.
                        waiting_since = None;
                        continue;
                    };
                    waiting_since = None;
                    let (reader, blob, etag, at, check) = (self.reader.clone(), self.blob.clone(), self.etag.clone(), next, self.check);
                    let task = tokio::spawn(async move { reader.range(&blob, &etag, at, len, check).await });
                    pending.push_back(RangeTask(task, Some(held), len));
                    next += len;
                }
            }
        }
    }

    /// Writes one range read (as chunks, when `compressing`), and counts it.
    async fn send_range(
        &self,
        send: &mut SendStream,
        bytes: Bytes,
        compressing: Option<&mut Compressing>,
    ) -> Result<(), Stop> {
        let n = bytes.len() as u64;
        let section = match compressing {
            Some(c) => c.section(bytes).await.map_err(Stop::Failed)?,
            None => Section::plain(bytes),
        };
        let wire = section.wire_len;
        match write_section(self.shared.storage.download.write_timeout, send, section).await {
            Ok(()) => {}
            Err(WriteFail::TimedOut) => return Err(Stop::Stalled),
            Err(WriteFail::Gone) => return Err(Stop::Gone),
        }
        Metrics::add(&self.shared.metrics.bytes_sent, n);
        Metrics::add(&self.shared.metrics.wire_bytes_sent, wire);
        Ok(())
    }

    /// Budget for one range, within the budget wait from `since` (`None`: the
    /// wait ran out).
    async fn take(&self, len: u64, since: Option<tokio::time::Instant>) -> Option<Held> {
        hold_within(self.shared, &self.share, len, since).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::limits::PROTOCOL_VERSION;
    use relay_proto::protocol::Secret;

    fn props(md5: Option<[u8; 16]>) -> ReadProperties {
        ReadProperties {
            etag: "\"0x1\"".into(),
            size: 100,
            last_modified: Some(7),
            content_md5: md5,
            content_type: Some("text/plain".into()),
            sha256: None,
            seal: None,
        }
    }

    fn fetch(offset: u64, etag: Option<&str>) -> Fetch {
        Fetch {
            version: PROTOCOL_VERSION,
            token: Secret("t".into()),
            container: "data".into(),
            blob: "b".into(),
            offset,
            etag: etag.map(str::to_string),
            compress: None,
        }
    }

    #[test]
    fn the_check_is_the_seal_then_the_content_md5_then_the_ranges() {
        let sha = "ab".repeat(32);
        let s = source(&props(Some([1; 16])), Some(&sha), &fetch(0, None));
        assert_eq!(
            (s.check, s.sha256.as_deref()),
            (Check::Sealed, Some(sha.as_str()))
        );
        let s = source(&props(Some([1; 16])), None, &fetch(0, None));
        assert_eq!(s.check, Check::ContentMd5);
        assert_eq!(s.content_md5, Some("01".repeat(16)));
        assert_eq!(s.sha256, None);
        let s = source(&props(None), None, &fetch(0, None));
        assert_eq!((s.check, s.content_md5), (Check::Ranges, None));
    }

    #[test]
    fn an_offset_is_honoured_only_for_the_same_etag_and_inside_the_blob() {
        let p = props(None);
        assert_eq!(source(&p, None, &fetch(40, Some("\"0x1\""))).offset, 40);
        assert_eq!(source(&p, None, &fetch(100, Some("\"0x1\""))).offset, 100);
        assert_eq!(source(&p, None, &fetch(101, Some("\"0x1\""))).offset, 0);
        assert_eq!(source(&p, None, &fetch(40, Some("\"0x2\""))).offset, 0);
        // The same version, as a listing writes it (unquoted).
        assert_eq!(source(&p, None, &fetch(40, Some("0x1"))).offset, 40);
        assert_eq!(source(&p, None, &fetch(40, None)).offset, 0);
    }

    #[test]
    fn only_a_resume_asks_for_the_properties_before_reading() {
        assert!(reads_first(&fetch(0, None)));
        assert!(reads_first(&fetch(0, Some("\"0x1\""))));
        // An offset without the version it was of starts over from 0.
        assert!(reads_first(&fetch(40, None)));
        assert!(!reads_first(&fetch(40, Some("\"0x1\""))));
    }

    #[test]
    fn a_range_stays_within_storage_checks_and_a_share() {
        let l = DownloadLimits::default();
        assert_eq!(range_len(&l, 1 << 30), MAX_CHECKED_RANGE);
        assert_eq!(range_len(&l, 1 << 20), 1 << 20);
        assert_eq!(range_len(&l, 1), 64 << 10);
        let big = DownloadLimits {
            range_bytes: 64 << 20,
            ..l
        };
        assert_eq!(range_len(&big, 1 << 30), MAX_CHECKED_RANGE);
    }
}
