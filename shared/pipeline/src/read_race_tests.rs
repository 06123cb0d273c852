//! Downloads racing writers, in memory (as `race_tests` races two uploads): a
//! reader lists a container and downloads a blob through the read seam's
//! twin (`MemorySource`), driven by the pure download session, while a
//! writer replaces or deletes the blob between any two of the reader's
//! requests; and two readers of one destination share its partial file, one
//! at a time under its lock. Whatever the order, every file placed hashes to
//! the SHA-256 recorded for the version it was read from (never bytes of two
//! versions), a blob deleted mid-download fails `not_found` with its partial
//! file thrown away, and a blob replaced mid-download is read again from 0.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use md5::{Digest as _, Md5};
use relay_proto::protocol::{Check, Code, Failure, Source};
use relay_proto::session::download::{
    Action, Blob, Event, Hashes, Local, OverwriteMode, Partial, Session,
};
use relay_storage::listing::ListedBlob;
use relay_storage::memory::{MemoryAccount, Turnstile};
use relay_storage::memory_source::MemorySource;
use relay_storage::read::{RangeCheck, ReadError, ReadProperties, same_etag};
use relay_storage::source::BlobSource;
use relay_storage::store::{BlobStore, Commit, Condition};
use sha2::Sha256;

const CONTAINER: &str = "c";
const NAME: &str = "race.bin";
/// Bytes a range read asks for: small, so a blob is several ranges.
const RANGE: u64 = 4;
/// Bytes of each version: three ranges, the last one short.
const SIZE: usize = 10;

fn sha_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn version(n: u8) -> Bytes {
    Bytes::from(
        (0..SIZE)
            .map(|i| n.wrapping_mul(31) ^ i as u8)
            .collect::<Vec<u8>>(),
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every version written, by its ETag: the SHA-256 recorded with it, and
/// its bytes.
#[derive(Debug, Default, Clone)]
struct Recorded(Arc<Mutex<HashMap<String, (String, Bytes)>>>);

impl Recorded {
    fn version(&self, etag: &str) -> Option<(String, Bytes)> {
        let all = lock(&self.0);
        all.iter()
            .find(|(e, _)| same_etag(e, etag))
            .map(|(_, v)| v.clone())
    }
}

/// Publishes `data` as the blob's next version (Put Blob, unconditionally)
/// and records its SHA-256 under the ETag it got.
async fn put(store: &dyn BlobStore, data: Bytes, recorded: &Recorded) {
    let sha = sha_hex(&data);
    let meta = std::collections::BTreeMap::new();
    let commit = Commit {
        sha256_hex: &sha,
        seal: "unsealed",
        content_type: None,
        content_md5: None,
        metadata: &meta,
        condition: &Condition::Always,
    };
    let etag = store
        .put_blob(data.clone(), &commit)
        .await
        .expect("put blob");
    lock(&recorded.0).insert(etag, (sha, data));
}

/// What a writer does to the blob while readers read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    /// Nothing: the blob stays as it is.
    Nothing,
    /// One new version.
    ReplaceOnce,
    /// Two new versions, one after the other.
    ReplaceTwice,
    Delete,
}

/// The destination's files, as the client keeps them: the partial file (its
/// bytes and its sidecar's version), the placed file, and who holds the
/// partial file's lock.
#[derive(Debug, Default)]
struct Disk {
    partial: Option<PartialFile>,
    placed: Option<Placed>,
    locked_by: Option<usize>,
    /// Attempts that went on from a partial file's bytes.
    resumes: u32,
}

#[derive(Debug, Clone)]
struct PartialFile {
    etag: String,
    size: u64,
    bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Placed {
    etag: String,
    bytes: Vec<u8>,
}

/// How one attempt at the blob ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Placed,
    Skipped,
    Failed(&'static str),
    /// Stopped as a killed run stops: its partial file stays, its lock dies.
    Stopped,
    /// The listing did not name the blob.
    NotListed,
}

fn hashes(bytes: &[u8]) -> Hashes {
    Hashes {
        sha256: sha_hex(bytes),
        md5: hex::encode(Md5::digest(bytes)),
    }
}

/// A read's failure as the relay (or direct mode) reports it to the session.
fn refused(e: &ReadError) -> Event {
    let code = match e {
        ReadError::NotFound => Code::NotFound,
        ReadError::Changed => Code::Changed,
        _ => Code::Storage,
    };
    Event::Refused(Failure::new(code, e.to_string()))
}

/// The Source for a Fetch from `offset` of version `etag`: the offset holds
/// only for that very version, inside the blob.
fn source_of(p: &ReadProperties, offset: u64, etag: Option<&str>) -> Source {
    let same = etag.is_some_and(|e| same_etag(e, &p.etag)) && offset <= p.size;
    Source {
        etag: p.etag.clone(),
        size: p.size,
        offset: if same { offset } else { 0 },
        check: if p.content_md5.is_some() {
            Check::ContentMd5
        } else {
            Check::Ranges
        },
        sha256: None,
        content_md5: p.content_md5.map(hex::encode),
        content_type: p.content_type.clone(),
        last_modified: p.last_modified,
        encoding: None,
    }
}

/// One reader: its source, its place at the turnstile, and the shared disk.
struct Reader<'a> {
    source: &'a MemorySource,
    turnstile: &'a Turnstile,
    id: usize,
    disk: &'a Mutex<Disk>,
    /// Stops (as if killed) after its first range read.
    killed_after_a_range: bool,
}

impl Reader<'_> {
    /// Lists the container, then downloads the blob if it is listed.
    async fn run(&self) -> End {
        let page = match self.source.list_page("", None, 100).await {
            Ok(page) => page,
            Err(e) => panic!("listing: {e}"),
        };
        match page.blobs.into_iter().find(|b| b.name == NAME) {
            Some(listed) => self.attempt(&listed).await,
            None => End::NotListed,
        }
    }

    /// Takes the partial file's lock: one turn per try, as the client tries
    /// again while another holds it.
    async fn take_lock(&self) {
        loop {
            self.turnstile.enter(self.id, "lock partial").await;
            let mut disk = lock(self.disk);
            if disk.locked_by.is_none() {
                disk.locked_by = Some(self.id);
                return;
            }
        }
    }

    /// One attempt, as the client's: the lock first, then decisions from
    /// what is on disk, each action performed, the lock given back.
    async fn attempt(&self, listed: &ListedBlob) -> End {
        self.take_lock().await;
        let (local, partial) = {
            let disk = lock(self.disk);
            let local = match &disk.placed {
                Some(p) => Local::File {
                    size: p.bytes.len() as u64,
                    mtime: 0,
                    indexed: false,
                },
                None => Local::Absent,
            };
            let partial = disk.partial.as_ref().map(|p| Partial {
                len: p.bytes.len() as u64,
                etag: p.etag.clone(),
                size: p.size,
            });
            (local, partial)
        };
        let blob = Blob {
            size: listed.size,
            etag: listed.etag.clone(),
            last_modified: listed.last_modified,
        };
        let (mut session, first) = Session::new(blob, local, partial, OverwriteMode::IfDifferent);
        let end = self.drive(&mut session, first).await;
        lock(self.disk).locked_by = None;
        end
    }

    async fn drive(&self, session: &mut Session, mut action: Action) -> End {
        let mut source: Option<Source> = None;
        loop {
            let event = match action {
                Action::Fetch { offset, etag, .. } => match self.source.properties(NAME).await {
                    Ok(p) => {
                        let s = source_of(&p, offset, etag.as_deref());
                        source = Some(s.clone());
                        Event::Source(s)
                    }
                    Err(e) => refused(&e),
                },
                Action::HashLocal { .. } => {
                    let disk = lock(self.disk);
                    let placed = disk.placed.as_ref().expect("a placed file to hash");
                    Event::LocalHashed(hashes(&placed.bytes))
                }
                Action::Receive { from, fresh } => {
                    let s = source.clone().expect("a Source before Receive");
                    match self.receive(&s, from, fresh).await {
                        Some(event) => event,
                        None => return End::Stopped,
                    }
                }
                Action::Place { .. } => return self.place(),
                Action::Skip { .. } => return End::Skipped,
                Action::Fail(f) => {
                    if f.discard {
                        lock(self.disk).partial = None;
                    }
                    return End::Failed(f.code);
                }
            };
            action = session.handle(event);
        }
    }

    /// The Source's bytes from `from` into the partial file, a range at a
    /// time under `If-Match`; `None` if the reader was stopped.
    async fn receive(&self, s: &Source, from: u64, fresh: bool) -> Option<Event> {
        {
            let mut disk = lock(self.disk);
            let kept = disk.partial.get_or_insert_with(|| PartialFile {
                etag: s.etag.clone(),
                size: s.size,
                bytes: Vec::new(),
            });
            if fresh {
                kept.etag = s.etag.clone();
                kept.size = s.size;
            }
            kept.bytes.truncate(from as usize);
            if from > 0 {
                disk.resumes += 1;
            }
        }
        let mut at = from;
        while at < s.size {
            let len = RANGE.min(s.size - at);
            let check = RangeCheck::LengthOnly;
            let bytes = match self.source.range(NAME, &s.etag, at, len, check).await {
                Ok(bytes) => bytes,
                Err(e) => return Some(refused(&e)),
            };
            assert_eq!(bytes.len() as u64, len, "a range of the wrong length");
            let mut disk = lock(self.disk);
            let partial = disk.partial.as_mut().expect("the partial file");
            partial.bytes.extend_from_slice(&bytes);
            at += len;
            if self.killed_after_a_range {
                return None;
            }
        }
        let disk = lock(self.disk);
        let bytes = &disk.partial.as_ref().expect("the partial file").bytes;
        Some(Event::Received {
            len: bytes.len() as u64,
            hashes: hashes(bytes),
        })
    }

    /// Renames the partial file into place.
    fn place(&self) -> End {
        let mut disk = lock(self.disk);
        let partial = disk.partial.take().expect("the partial file to place");
        disk.placed = Some(Placed {
            etag: partial.etag,
            bytes: partial.bytes,
        });
        End::Placed
    }
}

/// A placed file's bytes hash to the SHA-256 recorded for the version it
/// was read from; a partial file's are a prefix of the version its sidecar
/// names.
fn check_disk(disk: &Disk, recorded: &Recorded, run: &str) {
    if let Some(p) = &disk.placed {
        let sha = recorded.version(&p.etag).map(|(sha, _)| sha);
        assert_eq!(
            Some(sha_hex(&p.bytes)),
            sha,
            "placed bytes are not the version {} they were read from ({run})",
            p.etag
        );
    }
    if let Some(p) = &disk.partial {
        let (_, bytes) = recorded.version(&p.etag).expect("a version written");
        assert!(
            bytes.starts_with(&p.bytes),
            "the partial file holds bytes of another version than {} ({run})",
            p.etag
        );
    }
}

/// Lets the ready requests through, picking with `pick(how many ready,
/// branching so far)` where several wait, until every participant is done;
/// returns how many were ready at each such turn.
async fn schedule(
    turnstile: &Turnstile,
    mut pick: impl FnMut(usize, usize) -> usize,
) -> Vec<usize> {
    let mut branching = Vec::new();
    for _ in 0..100_000 {
        let ready = turnstile.ready().await;
        match ready.len() {
            0 => return branching,
            1 => turnstile.grant(ready[0]),
            n => {
                let i = pick(n, branching.len());
                branching.push(n);
                turnstile.grant(ready[i]);
            }
        }
    }
    panic!("the participants never finished");
}

#[path = "read_race_cases.rs"]
mod cases;
