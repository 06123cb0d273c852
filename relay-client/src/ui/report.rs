//! What the client tells people and scripts: a line per file as it finishes, and a
//! JSON summary whose shape is a stable contract (`--json`). Without `--json` no
//! per-file report is kept: the summary's totals are a running tally, so memory
//! does not grow with the number of files.

use relay_proto::protocol::{Code, ExistingBlob, Timings};
use serde::Serialize;

use crate::ui::error_code::ErrorCode;
use crate::ui::file_list::FileList;

/// The client's phase times for one file; the relay's own, from its Receipt,
/// are `relay_proto::protocol::Timings`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClientTimings {
    /// Waiting for a free slot (`--parallel`) and a connection.
    pub wait_ms: u64,
    /// Offer to last byte sent.
    pub transfer_ms: u64,
    /// Last byte to Receipt: staging the tail, hash check, commit, property read.
    pub commit_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub path: String,
    pub container: String,
    pub blob: String,
    pub status: Status,
    /// Why a file was skipped (`identical`, `not a regular file`, ...) or, in a
    /// dry run, what would happen to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The Content-MD5 (hex) this run's commit gave the blob (`--put-md5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_md5: Option<String>,
    pub bytes_resumed: u64,
    pub bytes_sent: u64,
    /// Relay mode, compressed on the wire (`--compress`): the bytes that
    /// carried `bytes_sent` of the file (chunk headers included). Absent when
    /// every byte went as it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_bytes: Option<u64>,
    pub retries: u32,
    /// Times this file went on over a new connection after the network went
    /// away (not counted in `attempts`).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub reconnects: u32,
    /// Storage requests the file cost (the relay's count from its Receipt, or
    /// direct mode's own), retries included.
    pub storage_requests: u32,
    /// Direct mode: storage requests given up for making no progress, by
    /// reason, and how many were ended while their body still moved (0 by
    /// design: docs/CLIENT.md, "Direct mode").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandoned: Option<Abandoned>,
    pub attempts: u32,
    /// The client's timings (`clocks_ms` in the JSON report, a stable name).
    #[serde(rename = "clocks_ms")]
    pub client_ms: ClientTimings,
    /// Relay mode: the relay's own timings from its Receipt (receive, staging the
    /// last blocks, hash check and commit), to tell the WAN from Azure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay_ms: Option<Timings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorReport>,
    /// `download`: how the file's bytes were checked end to end (`sealed`:
    /// its SHA-256 equals the relay's seal; `content_md5`: its MD5 equals the
    /// blob's Content-MD5; `ranges`: storage's checksum of every range read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<&'static str>,
    /// `download`, a skipped file: how it was found identical (`sha256`: its
    /// SHA-256 equals the seal's; `md5`: its MD5 the blob's Content-MD5;
    /// `index`: this machine placed it from this version and it is unchanged
    /// since; `mtime`: `--overwrite=if-newer` and modified after the blob).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compared: Option<&'static str>,
}

/// `relay_storage::retry::Abandoned`, as the JSON report shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Abandoned {
    /// No progress for the stall interval: no byte of the body accepted, or
    /// none more of an answer that had begun.
    pub stalled: u32,
    /// No answer within the interval after the body went.
    pub unanswered: u32,
    /// Ended by any timer while the body still moved.
    pub while_moving: u32,
}

impl From<relay_storage::retry::Abandoned> for Abandoned {
    fn from(a: relay_storage::retry::Abandoned) -> Self {
        Self {
            stalled: a.stalled,
            unanswered: a.unanswered,
            while_moving: a.while_moving,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Committed,
    /// `download`: written, verified and renamed into place.
    Downloaded,
    /// Not uploaded and nothing wrong: identical to the blob, or not a regular file.
    Skipped,
    /// `--dry-run`: `reason` says what an upload would do.
    Planned,
    /// `sync --delete`: removed from the destination (counted in the
    /// summary's `sync.deleted`).
    Deleted,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorReport {
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub ok: bool,
    /// A `download` run (its files are `downloaded`, not `committed`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub download: bool,
    pub mode: &'static str,
    /// Relay mode: whether the connection started warm from the path cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_start: Option<bool>,
    /// Stopped by Ctrl-C before every file was done.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// Every file's report with `--json`; empty otherwise (the totals still count all).
    pub files: FileList<FileReport>,
    pub totals: Totals,
    /// Relay mode: what QUIC saw on the (last) connection to the relay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicStats>,
    /// Relay mode: QUIC connections this run made (1 unless one was lost; a
    /// connection that migrated to a new address is still one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u64>,
    /// Why an interrupted run stopped: `interrupt` (Ctrl-C) or `patience`
    /// (the relay stayed unreachable for longer than `--patience`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<&'static str>,
    /// Direct mode: how it sized itself, and whether it was a fallback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<DirectReport>,
    /// `sync`: what the comparison decided, name by name, counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncReport>,
}

/// A sync's counts (`relay-client sync`): what moved, what was left alone
/// without a read, and what the deletes came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SyncReport {
    /// `upload` (a local folder to a prefix) or `download`.
    pub direction: &'static str,
    /// Files committed (upload).
    pub sent: u64,
    /// Files placed (download).
    pub fetched: u64,
    /// Unchanged by size, time and identity against the index: not read, not offered.
    pub skipped_unchanged: u64,
    /// Read and offered, or compared, and found identical (nothing moved).
    pub identical: u64,
    /// A new blob version holding the recorded bytes: the index took its ETag.
    pub adopted: u64,
    /// Local files changed since this machine placed them, left as they are.
    pub conflicts: u64,
    /// Parts of either side that could not be read (no delete follows).
    pub gaps: u64,
    /// Names on the destination and not on the source the rules admit.
    pub planned_deletes: u64,
    /// Local delete candidates kept: not placed by this machine, or changed since.
    pub kept_unknown: u64,
    /// Deletes made.
    pub deleted: u64,
    /// Why no delete was made, when some were planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletes_withheld: Option<String>,
    /// Bytes of local files this run read (sent, or hashed to compare).
    pub bytes_read: u64,
    pub source_complete: bool,
    pub dest_complete: bool,
}

/// Direct mode's sizing (`direct_sizing.rs`) as the JSON report shows it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DirectReport {
    pub block_size_bytes: u64,
    /// Put Block requests in flight per file.
    pub connections: usize,
    /// The measured storage round trip (absent when not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_rtt_ms: Option<f64>,
    /// `--fallback direct` took over because the relay was unreachable.
    pub fell_back: bool,
}

/// Round-trip time and packet loss of a QUIC connection, as quinn counted them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QuicStats {
    pub rtt_ms: f64,
    pub sent_packets: u64,
    pub lost_packets: u64,
    /// Cold start: the bottleneck rate the packet train after the handshake
    /// measured, Mbit/s (absent on a warm start or a short path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_mbit: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub files: usize,
    pub committed: usize,
    /// `download`: files written and verified.
    #[serde(skip_serializing_if = "is_zero")]
    pub downloaded: usize,
    pub skipped: usize,
    /// `--dry-run`: files that were looked at.
    #[serde(skip_serializing_if = "is_zero")]
    pub planned: usize,
    pub failed: usize,
    /// Bytes of the committed files (skipped files are left out).
    pub bytes: u64,
    /// Bytes this run actually sent (resumed and skipped bytes are not).
    pub bytes_sent: u64,
    pub seconds: f64,
    /// `bytes` over `seconds` (skipped files count neither bytes nor time of their own).
    pub mbit_per_s: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl FileReport {
    /// This report as failed with `e`: its code and message, and what the
    /// failed attempts cost.
    pub fn failed_with(mut self, e: FileError) -> Self {
        self.status = Status::Failed;
        self.bytes_sent = e.spent.bytes_sent;
        self.storage_requests = e.spent.storage_requests;
        self.error = Some(ErrorReport {
            code: e.code,
            message: e.message,
        });
        self
    }
}

impl Totals {
    /// Counts one finished file.
    pub fn add(&mut self, f: &FileReport) {
        self.files += 1;
        self.bytes_sent += f.bytes_sent;
        match f.status {
            Status::Committed => {
                self.committed += 1;
                self.bytes += f.bytes;
            }
            Status::Downloaded => {
                self.downloaded += 1;
                self.bytes += f.bytes;
            }
            Status::Skipped => self.skipped += 1,
            Status::Planned => self.planned += 1,
            Status::Deleted => {}
            Status::Failed => self.failed += 1,
        }
    }

    pub fn finish(mut self, seconds: f64) -> Self {
        self.seconds = seconds;
        self.mbit_per_s = if seconds > 0.0 {
            self.bytes as f64 * 8.0 / seconds / 1e6
        } else {
            0.0
        };
        self
    }
}

impl Summary {
    /// `files` is empty unless the caller kept the reports (`--json`).
    pub fn new(mode: &'static str, files: FileList<FileReport>, totals: Totals) -> Self {
        Self {
            ok: totals.failed == 0,
            download: false,
            mode,
            warm_start: None,
            interrupted: false,
            quic: None,
            connections: None,
            stopped_by: None,
            direct: None,
            sync: None,
            totals,
            files,
        }
    }
}

/// A per-file failure: a code for scripts and a sentence for people.
#[derive(Debug, Clone)]
pub struct FileError {
    pub code: ErrorCode,
    pub message: String,
    /// Worth another attempt (lost connection, relay busy, Azure 5xx).
    pub retryable: bool,
    /// With `exists`: the blob in the way, as storage reported it.
    pub existing: Option<ExistingBlob>,
    /// What the failed attempts cost, for the report (a retry adds its own).
    pub spent: Spent,
}

/// Bytes a file's attempts sent and storage requests they made, whether or
/// not they ended in a commit: the report counts what really went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub bytes_sent: u64,
    pub storage_requests: u32,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, other: Self) {
        self.bytes_sent += other.bytes_sent;
        self.storage_requests += other.storage_requests;
    }
}

impl FileError {
    pub fn new(code: ErrorCode, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            code,
            message: message.into(),
            retryable,
            existing: None,
            spent: Spent::default(),
        }
    }

    pub fn with_spent(mut self, spent: Spent) -> Self {
        self.spent = spent;
        self
    }

    pub fn with_existing(mut self, existing: Option<ExistingBlob>) -> Self {
        self.existing = existing;
        self
    }

    pub fn from_relay(code: Code, message: String) -> Self {
        let text = match code {
            Code::Exists
            | Code::Unauthorized
            | Code::Forbidden
            | Code::InvalidName
            | Code::TooLarge => {
                format!("refused: {message}")
            }
            _ => message,
        };
        Self {
            code: code.into(),
            message: text,
            retryable: code.is_retryable(),
            existing: None,
            spent: Spent::default(),
        }
    }
}
