//! The relay protocol's messages. One QUIC stream per file:
//!
//! ```text
//! client: Offer ─────────────▶ relay
//! client ◀──────── Plan | Reject
//! client: Start{offset} + raw bytes [offset, size) + Trailer ─▶ relay
//! client ◀──────── Receipt | Error
//! ```
//! Control messages are length-prefixed JSON frames (see `codec`); the file's bytes
//! follow `Start` unframed, because their count is known from the Offer and Start.
//!
//! An **eager** Offer (`eager: true`) is followed at once by `Start{0}` and the
//! bytes, without waiting for the Plan: a round trip less per file, which on a
//! 200 ms path is worth more than the rare resume it complicates. If the relay has
//! staged blocks to offer (`Plan.resume_offset > 0`), it stops the stream with
//! `app_error::RESUME_ON_NEW_STREAM` and takes none of its bytes; the client then
//! offers again, not eagerly, on a new stream and resumes as usual. A Reject also
//! stops the stream, so an eager client wastes at most one round trip of bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The wire's tokens are secrets (the type lives below the protocol, so
/// storage can hold its keys in it without knowing the wire).
pub use crate::secret::Secret;

/// What to do when the destination blob exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Overwrite {
    /// Commit with `If-None-Match: *`.
    #[default]
    Never,
    /// Commit with `If-Match: etag` (the version the user saw).
    IfMatch { etag: String },
    /// Commit unconditionally (explicit user choice).
    Always,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub version: u32,
    pub token: Secret,
    pub container: String,
    pub blob: String,
    pub size: u64,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub overwrite: Overwrite,
    /// Pre-computed SHA-256 (hex) from a manifest, if the client has one.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Block size the client asks for; the relay may grow it (see `plan`).
    #[serde(default)]
    pub block_size: Option<u64>,
    /// `Start{0}` and the bytes follow this Offer without waiting for the Plan.
    #[serde(default)]
    pub eager: bool,
    /// Give the committed blob a Content-MD5 of every byte (`--put-md5`),
    /// computed by the relay from the bytes it hashed, across resumes.
    #[serde(default)]
    pub put_md5: bool,
    /// Send `Progress` frames between Start and the Receipt (the client's
    /// bars count what the relay staged, not what it queued).
    #[serde(default)]
    pub progress: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Transfer tag (hex): destination, size and block size.
    pub tag: String,
    pub block_size: u64,
    /// Bytes already staged and reusable; the client may start here.
    pub resume_offset: u64,
    /// SHA-256 checkpoint (hex) at `resume_offset`, for the client's same-source check.
    pub checkpoint: String,
    /// The relay's build (`0.1.0 (abc1234)`), which the client logs at `-v`.
    /// Absent from older relays; a client does nothing with it but log it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_version: Option<String>,
}

/// Sent by the client after a Plan: where its bytes start (the Plan's resume offset
/// if its own prefix hashes to the checkpoint, otherwise 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub offset: u64,
    /// How the bytes after this Start travel: absent, as they are; `zstd`, in
    /// chunks (`chunk`). A client sets it only on a connection whose ALPN is
    /// `limits::ALPN_ZSTD` (both ends announced it), so an older relay never
    /// sees it and an older client never sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
}

impl Start {
    /// The file's bytes from `offset`, as they are.
    pub fn plain(offset: u64) -> Self {
        Self {
            offset,
            encoding: None,
        }
    }
}

/// How a stream's file bytes travel after its Start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// Chunks, each plain or one zstd frame (`chunk`).
    Zstd,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// SHA-256 (hex) of the whole source file as the client read it.
    pub sha256: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// Unknown or expired token.
    Unauthorized,
    /// The token may not write (or, for a Fetch or List, read; for a Delete,
    /// delete) this container.
    Forbidden,
    InvalidName,
    InvalidOffer,
    UnsupportedVersion,
    TooLarge,
    /// The blob exists and the Offer did not ask to overwrite.
    Exists,
    /// The relay is shutting down or over capacity; retry later.
    Busy,
    /// The relay's SHA-256 differs from the client's: nothing was committed.
    HashMismatch,
    /// The stream ended before all bytes and the Trailer arrived.
    Truncated,
    /// Another upload to this blob committed first, or the etag changed.
    Conflict,
    /// Azure Storage failed transiently (after the relay's own retries); the
    /// message carries its reason.
    Storage,
    /// Azure Storage refused the request (a 4xx other than throttling or a
    /// conflict, e.g. 403 or a missing container): trying again will not help.
    StorageRefused,
    /// The client's compressed chunks were refused (a decompression bomb, a
    /// frame that lies about its length, a corrupt frame, a window or
    /// dictionary beyond the relay's limit): nothing committed. Only a client
    /// that sends `encoding: zstd` can meet it.
    BadEncoding,
    /// Download: no blob of this name (or it was deleted while being read).
    NotFound,
    /// Download: the blob changed (its ETag moved) while it was being read;
    /// nothing of the new version was mixed in. Fetch it again from 0.
    Changed,
    Internal,
}

impl Code {
    /// The code's wire name (as serde writes it): the report's `code` and
    /// the `reason` label of the relay's refusal metrics.
    pub fn label(self) -> &'static str {
        match self {
            Code::Unauthorized => "unauthorized",
            Code::Forbidden => "forbidden",
            Code::InvalidName => "invalid_name",
            Code::InvalidOffer => "invalid_offer",
            Code::UnsupportedVersion => "unsupported_version",
            Code::TooLarge => "too_large",
            Code::Exists => "exists",
            Code::Busy => "busy",
            Code::HashMismatch => "hash_mismatch",
            Code::Truncated => "truncated",
            Code::Conflict => "conflict",
            Code::Storage => "storage",
            Code::StorageRefused => "storage_refused",
            Code::BadEncoding => "bad_encoding",
            Code::NotFound => "not_found",
            Code::Changed => "changed",
            Code::Internal => "internal",
        }
    }

    /// Whether the client should try again later (possibly resuming).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Code::Busy | Code::Storage | Code::Internal | Code::Truncated | Code::Changed
        )
    }

    /// Whether the refusal is of the caller (its token or its grant) rather
    /// than of one request: the relay then closes a connection that has not
    /// authenticated, so it holds no pending slot until the deadline.
    pub fn refuses_the_caller(self) -> bool {
        matches!(self, Code::Unauthorized | Code::Forbidden)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: Code,
    pub message: String,
    /// With `exists`: the blob that is in the way, so the client can decide
    /// (`--overwrite=if-newer`) and replace only that version (`IfMatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing: Option<ExistingBlob>,
    /// With an Error: the storage requests the relay made for the file before it
    /// failed (retries included), so the client's report counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u32>,
    /// With an Error: a commit request went unanswered, so the blob may have
    /// been published; the next attempt finds out by its seal. Absent (false)
    /// from relays that predate it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
}

impl Failure {
    /// A refusal or error with its code and message, nothing else attached:
    /// the one constructor the relay, its session and the pipeline share.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            existing: None,
            requests: None,
            outcome_unknown: false,
        }
    }
}

/// A committed blob as the relay saw it when it refused to replace it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExistingBlob {
    pub etag: String,
    /// The service's Last-Modified, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<u64>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The relay's phase times for one transfer, carried in its Receipt (the
/// client's own are `relay_client::report::ClientTimings`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// From the Start to the last byte received.
    pub receive_ms: u64,
    /// From the last byte to the last block staged.
    pub stage_wait_ms: u64,
    /// Hash check, Put Block List and the property read.
    pub commit_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub container: String,
    pub blob: String,
    pub etag: String,
    pub size: u64,
    pub sha256: String,
    pub block_size: u64,
    pub blocks: u64,
    pub bytes_resumed: u64,
    pub bytes_received: u64,
    /// Azure requests retried while staging and committing.
    pub retries: u32,
    /// Storage requests this file cost the relay (retries included): 2 for a
    /// file that fits in one block (existence check, Put Blob).
    #[serde(default)]
    pub requests: u32,
    /// The blob already held exactly this file under the relay's seal, from an
    /// earlier commit (a re-run's), and this transfer wrote nothing: the client
    /// reports the file as identical, not committed.
    #[serde(default)]
    pub earlier_commit: bool,
    /// The blob's Content-MD5 (hex), when the Offer asked for one
    /// (`put_md5`) and the file was staged as blocks; a Put Blob always
    /// carries its body's MD5.
    #[serde(default)]
    pub content_md5: Option<String>,
    pub timings: Timings,
}

/// Relay → client, after Start and before the Receipt, when the Offer asked
/// (`progress`): bytes of the file staged in storage so far, the resumed prefix
/// included. Informational: nothing depends on it but the client's display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub staged: u64,
}

// ---- Download -------------------------------------------------------------
//
// One QUIC stream per blob, opened by the client, like an upload's:
//
// ```text
// client: Fetch ──────────────▶ relay
// client ◀── Source | Reject
// client ◀── (Data{len} + len raw bytes)* ── Sent | Error
// ```
// (or, when the Fetch asked for compression and the Source says
// `encoding: zstd`, each section's bytes are whole chunks: `chunk`)
// and one stream per listing:
//
// ```text
// client: List ───────────────▶ relay
// client ◀── Listing* ── ListEnd | Error     (or Reject at once)
// ```
// A page's last Listing carries storage's continuation marker; a listing lost
// midway is taken up by a List that carries it back (never by comparing
// names: storage's order is its own, e.g. UTF-16 code units).
// A stream's first frame (Offer, Fetch, List or Delete) carries the token and is what
// admits a connection. Reading is a grant of its own (docs/SECURITY.md).

/// Client → relay, the first frame of a download stream: one blob's bytes from
/// `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetch {
    pub version: u32,
    pub token: Secret,
    pub container: String,
    pub blob: String,
    /// Where the client's bytes start: the length of the verified prefix of its
    /// partial file (0 for a new download). Honoured only with `etag`.
    #[serde(default)]
    pub offset: u64,
    /// The ETag of the version the partial file holds. The relay sends from
    /// `offset` only if the blob still has this ETag; otherwise its `Source`
    /// says `offset: 0` and the new ETag, and the client starts the file over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The client inflates compressed chunks (`chunk`) and asks for them as
    /// `--compress` says: `auto` where they pay, `zstd` every chunk that
    /// shrinks. Set only on a connection whose ALPN is `limits::ALPN_ZSTD`
    /// and only when the client has a decoder free; the relay's `Source`
    /// says whether it compresses (`Source.encoding`). Absent (or `off`):
    /// plain sections, as every relay sends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<crate::compress::Mode>,
}

/// How the bytes of a download are checked end to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The blob carries the relay's seal (its MAC checked by this relay): the
    /// client's SHA-256 of the whole file must equal `Source.sha256`.
    Sealed,
    /// No seal, but a Content-MD5: the client's MD5 of the whole file must
    /// equal `Source.content_md5`.
    ContentMd5,
    /// Neither: the relay checked storage's transactional checksum of every
    /// range it read (`Sent.ranges_checked`), and that is all there is.
    Ranges,
}

/// Relay → client: the blob whose bytes follow, as the relay will read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub etag: String,
    pub size: u64,
    /// Where the bytes that follow start: the Fetch's offset when its ETag is
    /// still the blob's, else 0.
    pub offset: u64,
    pub check: Check,
    /// Hex SHA-256 of the whole blob, from a seal whose MAC this relay verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Hex MD5 of the whole blob (its Content-MD5), if storage holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_md5: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The service's Last-Modified, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<u64>,
    /// How the sections' bytes travel: absent, as they are; `zstd`, as chunks
    /// (`chunk`) of the blob's bytes `[offset, size)`, each section holding
    /// whole chunks. Only for a Fetch that asked (`Fetch.compress`) on a
    /// connection that agreed on compression; offsets and sizes count the
    /// blob's bytes either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
}

/// Relay → client: `len` bytes follow this frame, continuing where the
/// previous section ended: the blob's own bytes, or, after a Source with
/// `encoding: zstd`, whole chunks that carry them (`len` counts the chunks'
/// bytes, headers included). A section never passes the blob's end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Data {
    pub len: u64,
}

/// Relay → client, after the last section: every byte of `[offset, size)` was
/// sent, each range read under `If-Match` on the Source's ETag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// Ranges whose transactional checksum (MD5 or CRC-64) the relay checked.
    pub ranges_checked: u64,
    /// Storage requests this blob cost the relay, retries included.
    #[serde(default)]
    pub requests: u32,
}

/// Client → relay, the first frame of a listing stream: the blobs of
/// `container` whose names start with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct List {
    pub version: u32,
    pub token: Secret,
    pub container: String,
    #[serde(default)]
    pub prefix: String,
    /// Where to take the listing up: the marker of the last page's last
    /// frame received (`Listing::marker`), opaque, at most
    /// `MAX_LIST_MARKER_BYTES`. The relay answers such a List with `resumed`
    /// set; a relay that leaves it unset (one from before markers) started
    /// over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
}

/// Longest continuation marker a List may carry back: storage's markers
/// name a blob (at most 1,024 characters) and a little more.
pub const MAX_LIST_MARKER_BYTES: usize = 8 * 1024;

/// One blob of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub name: String,
    pub size: u64,
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<u64>,
    /// Hex SHA-256 of the blob's bytes, set only when the blob's seal verified
    /// under the relay's key: the relay vouches that this version holds these
    /// bytes. Absent from older relays, from direct mode (no key) and for a
    /// blob without a seal that holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Relay → client: the next blobs of a listing, in storage's order. Each frame
/// stays under the frame limit; the relay holds at most one of storage's pages.
/// A listing not taken up at a marker opens with a frame of no names, sent
/// once the List was admitted and storage said the container is there: the
/// listing is answered for before storage's first page (older relays send
/// the first page first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub blobs: Vec<Listed>,
    /// On a page's last frame, when more pages follow: storage's continuation
    /// marker after this page, for a `List` that takes the listing up here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
    /// This stream began at the List's `marker` (on every frame of it).
    #[serde(default, skip_serializing_if = "is_false")]
    pub resumed: bool,
}

/// Relay → client: the listing is complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEnd {
    pub blobs: u64,
    /// This stream began at the List's `marker`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub resumed: bool,
}

// ---- Delete ---------------------------------------------------------------
//
// One QUIC stream per blob, opened by the client:
//
// ```text
// client: Delete ─────────────▶ relay
// client ◀── Deleted | Reject | Error
// ```
// One blob a stream, as a Fetch is: each is admitted on its own frame, its
// outcome is its own (no half-done batch to describe), and the relay's stream
// credit bounds how many are in flight. Deleting is a grant of its own,
// implied by neither writing nor reading (docs/SECURITY.md).

/// Client → relay, the first frame of a delete stream: remove `container/name`
/// only if it is still the version `etag` (the one the client listed). The
/// relay deletes with `If-Match: etag`, never without one, so a blob written
/// after the listing is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delete {
    pub version: u32,
    pub token: Secret,
    pub container: String,
    pub name: String,
    /// The ETag of the listed version; required, at most `MAX_ETAG_BYTES`.
    pub etag: String,
}

/// Longest ETag a Delete may carry (storage's are some twenty characters).
pub const MAX_ETAG_BYTES: usize = 256;

/// What became of a Delete's blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Removal {
    /// The listed version was deleted.
    Deleted,
    /// No blob of the name: gone already (storage's 404).
    AlreadyGone,
    /// The blob is no longer the listed version (storage's 412): it was kept.
    Changed,
}

/// Relay → client: the Delete's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub outcome: Removal,
    /// Storage requests the delete cost the relay, retries included.
    #[serde(default)]
    pub requests: u32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Offer(Offer),
    Plan(Plan),
    Reject(Failure),
    Start(Start),
    Trailer(Trailer),
    Receipt(Receipt),
    Error(Failure),
    Progress(Progress),
    Fetch(Fetch),
    Source(Source),
    Data(Data),
    Sent(Sent),
    List(List),
    Listing(Listing),
    ListEnd(ListEnd),
    Delete(Delete),
    Deleted(Deleted),
}

impl Message {
    pub fn name(&self) -> &'static str {
        match self {
            Message::Offer(_) => "Offer",
            Message::Plan(_) => "Plan",
            Message::Reject(_) => "Reject",
            Message::Start(_) => "Start",
            Message::Trailer(_) => "Trailer",
            Message::Receipt(_) => "Receipt",
            Message::Error(_) => "Error",
            Message::Progress(_) => "Progress",
            Message::Fetch(_) => "Fetch",
            Message::Source(_) => "Source",
            Message::Data(_) => "Data",
            Message::Sent(_) => "Sent",
            Message::List(_) => "List",
            Message::Listing(_) => "Listing",
            Message::ListEnd(_) => "ListEnd",
            Message::Delete(_) => "Delete",
            Message::Deleted(_) => "Deleted",
        }
    }
}

/// QUIC application error codes used when a stream or connection is abandoned.
pub mod app_error {
    /// The client gave up on this file (e.g. its source changed while reading).
    pub const CLIENT_ABORT: u32 = 1;
    /// The relay refused the stream's framing.
    pub const PROTOCOL: u32 = 2;
    /// Normal close of a connection.
    pub const DONE: u32 = 0;
    /// The relay is shutting down.
    pub const SHUTDOWN: u32 = 3;
    /// An eager stream the relay does not read: it has staged blocks to offer, so
    /// the client re-offers (not eagerly) on a new stream and resumes there.
    pub const RESUME_ON_NEW_STREAM: u32 = 4;
    /// The relay refused the Offer (its Reject frame says why) and reads no bytes.
    pub const REJECTED: u32 = 5;
    /// Connection closed: no valid Offer within the relay's deadline.
    pub const UNAUTHENTICATED: u32 = 6;
    /// Connection closed: the relay is at its connection limit; retry later.
    pub const BUSY: u32 = 7;
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
