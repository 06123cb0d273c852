//! An in-memory twin of Azure Blob Storage for one account, implementing
//! `store::BlobStore` with Azure's rules for what an upload touches: Put Block
//! replaces the bytes under an ID, Put Block List takes each ID from the
//! uncommitted list (else the committed one) and clears the uncommitted list,
//! Put Blob replaces the blob and clears it too, `If-None-Match: *` fails with 409
//! and a stale `If-Match` with 412.
//!
//! A `Turnstile` lets several writers' requests through one at a time, in an
//! order the test chooses, so every interleaving of two uploads to one name can be
//! run and checked (see relay-pipeline's race tests).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use relay_proto::blob_name::SHA256_METADATA_KEY;
use relay_proto::id_key::{SEAL_METADATA_KEY, WRITER_METADATA_KEY};

use crate::error::BlobError;
use crate::store::{BlobProperties, BlobStore, Commit, Condition};

/// A committed blob: its blocks (for a later Put Block List that names them),
/// its metadata and etag.
#[derive(Debug, Clone)]
pub(crate) struct Committed {
    blocks: Vec<(Vec<u8>, Bytes)>,
    pub(crate) etag: String,
    pub(crate) metadata: HashMap<String, String>,
    /// The blob's Content-MD5 property, as the commit set it.
    pub(crate) content_md5: Option<[u8; 16]>,
    pub(crate) content_type: Option<String>,
    /// Seconds since the Unix epoch, as the service's Last-Modified.
    pub(crate) last_modified: u64,
}

impl Committed {
    pub(crate) fn data(&self) -> Bytes {
        let mut out = BytesMut::new();
        for (_, b) in &self.blocks {
            out.extend_from_slice(b);
        }
        out.freeze()
    }
}

#[derive(Debug, Default)]
pub(crate) struct BlobState {
    pub(crate) committed: Option<Committed>,
    uncommitted: Vec<(Vec<u8>, Bytes)>,
}

#[derive(Debug, Default)]
pub(crate) struct Account {
    /// By `container/blob`.
    pub(crate) blobs: HashMap<String, BlobState>,
    etags: u64,
    /// Per blob: Put Blocks still to keep before one is acknowledged and lost.
    lose_after: HashMap<String, u32>,
}

/// One storage account in memory; cheap to clone (clones share the blobs).
#[derive(Debug, Clone, Default)]
pub struct MemoryAccount {
    pub(crate) inner: Arc<Mutex<Account>>,
}

pub(crate) fn key(container: &str, blob: &str) -> String {
    format!("{container}/{blob}")
}

impl MemoryAccount {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer for one blob that sends each request at once.
    pub fn blob(&self, container: &str, blob: &str) -> MemoryBlob {
        MemoryBlob {
            account: self.inner.clone(),
            key: key(container, blob),
            turn: None,
            requests: AtomicU32::new(0),
        }
    }

    /// A writer that waits for its turn at `turnstile` (as writer `writer`)
    /// before each request.
    pub fn blob_in_turn(
        &self,
        container: &str,
        blob: &str,
        turnstile: Arc<Turnstile>,
        writer: usize,
    ) -> MemoryBlob {
        MemoryBlob {
            turn: Some((turnstile, writer)),
            ..self.blob(container, blob)
        }
    }

    /// The committed bytes and properties of a blob, if any.
    pub fn committed(&self, container: &str, blob: &str) -> Option<(Bytes, BlobProperties)> {
        let account = lock(&self.inner);
        let c = account
            .blobs
            .get(&key(container, blob))?
            .committed
            .as_ref()?;
        let data = c.data();
        Some((data.clone(), properties_of(c, data.len() as u64)))
    }

    /// The committed blob's Content-MD5 property, if it has one.
    pub fn content_md5(&self, container: &str, blob: &str) -> Option<[u8; 16]> {
        let account = lock(&self.inner);
        account
            .blobs
            .get(&key(container, blob))?
            .committed
            .as_ref()?
            .content_md5
    }

    /// Storage that lies: after `kept` more Put Blocks to this blob, the next
    /// one is answered with success and not kept (as a service losing a write).
    pub fn lose_put_block(&self, container: &str, blob: &str, kept: u32) {
        lock(&self.inner)
            .lose_after
            .insert(key(container, blob), kept);
    }

    /// Uncommitted block IDs of a blob, in staging order.
    pub fn uncommitted_ids(&self, container: &str, blob: &str) -> Vec<Vec<u8>> {
        let account = lock(&self.inner);
        account
            .blobs
            .get(&key(container, blob))
            .map(|b| b.uncommitted.iter().map(|(id, _)| id.clone()).collect())
            .unwrap_or_default()
    }
}

fn md5_of(data: &[u8]) -> [u8; 16] {
    use md5::{Digest, Md5};
    Md5::digest(data).into()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere in a test must not hide its own message behind a poison error.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn properties_of(c: &Committed, size: u64) -> BlobProperties {
    BlobProperties {
        etag: c.etag.clone(),
        size,
        sha256: c.metadata.get(SHA256_METADATA_KEY).cloned(),
        seal: c.metadata.get(SEAL_METADATA_KEY).cloned(),
        writer: c.metadata.get(WRITER_METADATA_KEY).cloned(),
        last_modified: Some(c.last_modified),
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn refused(status: u16, code: &str, op: &str) -> BlobError {
    BlobError {
        status: Some(status),
        code: Some(code.to_string()),
        message: format!("Azure {op} failed: {status} {code}"),
    }
}

/// Azure's answer to a commit's condition on the blob as it is now.
fn check_condition(
    existing: Option<&Committed>,
    condition: &Condition,
    op: &str,
) -> Result<(), BlobError> {
    match (condition, existing) {
        (Condition::IfAbsent, Some(_)) => Err(refused(409, "BlobAlreadyExists", op)),
        (Condition::IfMatch(etag), Some(c)) if &c.etag != etag => {
            Err(refused(412, "ConditionNotMet", op))
        }
        (Condition::IfMatch(_), None) => Err(refused(412, "ConditionNotMet", op)),
        _ => Ok(()),
    }
}

/// One blob of a `MemoryAccount`, as one writer sees it.
#[derive(Debug)]
pub struct MemoryBlob {
    account: Arc<Mutex<Account>>,
    key: String,
    turn: Option<(Arc<Turnstile>, usize)>,
    requests: AtomicU32,
}

impl MemoryBlob {
    /// Waits for this writer's turn (if it takes turns), then counts the request.
    async fn request(&self, op: &'static str) {
        if let Some((t, w)) = &self.turn {
            t.enter(*w, op).await;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn commit_with(
        &self,
        blocks: impl FnOnce(&BlobState) -> Result<Vec<(Vec<u8>, Bytes)>, BlobError>,
        commit: &Commit<'_>,
        op: &str,
    ) -> Result<String, BlobError> {
        let mut account = lock(&self.account);
        account.etags += 1;
        let etag = format!("\"0x{:X}\"", account.etags);
        let state = account.blobs.entry(self.key.clone()).or_default();
        check_condition(state.committed.as_ref(), commit.condition, op)?;
        let blocks = blocks(state)?;
        let mut metadata: HashMap<String, String> = commit.metadata.clone().into_iter().collect();
        metadata.insert(SHA256_METADATA_KEY.into(), commit.sha256_hex.into());
        metadata.insert(SEAL_METADATA_KEY.into(), commit.seal.into());
        state.committed = Some(Committed {
            blocks,
            etag: etag.clone(),
            metadata,
            content_md5: commit.content_md5,
            content_type: commit.content_type.map(str::to_string),
            last_modified: unix_now(),
        });
        state.uncommitted.clear();
        Ok(etag)
    }
}

impl MemoryBlob {
    /// Delete Blob, as any writer of the account could: the blob and its
    /// uncommitted blocks are gone (`false`: there was no blob).
    pub async fn delete(&self) -> bool {
        self.request("Delete Blob").await;
        lock(&self.account).blobs.remove(&self.key).is_some()
    }
}

#[async_trait]
impl BlobStore for MemoryBlob {
    async fn properties(&self) -> Result<Option<BlobProperties>, BlobError> {
        self.request("Get Blob Properties").await;
        let account = lock(&self.account);
        let c = account
            .blobs
            .get(&self.key)
            .and_then(|b| b.committed.as_ref());
        Ok(c.map(|c| properties_of(c, c.data().len() as u64)))
    }

    async fn uncommitted_blocks(&self) -> Result<Vec<(Vec<u8>, u64)>, BlobError> {
        self.request("Get Block List").await;
        let account = lock(&self.account);
        Ok(account
            .blobs
            .get(&self.key)
            .map(|b| {
                b.uncommitted
                    .iter()
                    .map(|(id, d)| (id.clone(), d.len() as u64))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn stage_block(&self, id: &[u8], data: Bytes) -> Result<(), BlobError> {
        self.request("Put Block").await;
        let mut account = lock(&self.account);
        if let Some(kept) = account.lose_after.get_mut(&self.key) {
            if *kept == 0 {
                account.lose_after.remove(&self.key);
                return Ok(());
            }
            *kept -= 1;
        }
        let state = account.blobs.entry(self.key.clone()).or_default();
        match state.uncommitted.iter_mut().find(|(i, _)| i == id) {
            Some(slot) => slot.1 = data,
            None => state.uncommitted.push((id.to_vec(), data)),
        }
        Ok(())
    }

    async fn commit_blocks(
        &self,
        ids: Vec<Vec<u8>>,
        commit: &Commit<'_>,
    ) -> Result<String, BlobError> {
        self.request("Put Block List").await;
        let pick = |state: &BlobState| {
            let committed = state.committed.as_ref().map(|c| &c.blocks[..]);
            ids.iter()
                .map(|id| {
                    let found = state
                        .uncommitted
                        .iter()
                        .find(|(i, _)| i == id)
                        .or_else(|| committed.and_then(|c| c.iter().find(|(i, _)| i == id)));
                    found
                        .cloned()
                        .ok_or_else(|| refused(400, "InvalidBlockList", "Put Block List"))
                })
                .collect()
        };
        self.commit_with(pick, commit, "Put Block List")
    }

    async fn put_blob(&self, data: Bytes, commit: &Commit<'_>) -> Result<String, BlobError> {
        self.request("Put Blob").await;
        // A Put Blob's blob always has its bytes' MD5: the writer's, or the one
        // the service computes when the request carried a CRC-64 instead
        // (`BlobWriter::put_blob`).
        let commit = Commit {
            content_md5: Some(md5_of(&data)),
            ..*commit
        };
        self.commit_with(|_| Ok(vec![(Vec::new(), data)]), &commit, "Put Blob")
    }

    fn retries(&self) -> u32 {
        0
    }

    fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Lets writers' requests through one at a time, in the order a test picks.
///
/// A writer may have several requests waiting at once (an upload asks for a
/// blob's properties and its block list together); the test sees each as its
/// own `Ticket`, so either order is an interleaving. The test loop:
/// `ready().await` waits until every writer still running has a request waiting
/// at the turnstile, and returns every waiting request (empty once all writers
/// are done); `grant(t)` lets one of them through.
#[derive(Debug)]
pub struct Turnstile {
    state: Mutex<TurnState>,
    changed: tokio::sync::Notify,
}

/// One request waiting at a `Turnstile`: its writer and the writer's count of
/// requests before it (so a writer's requests are told apart, in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket {
    pub writer: usize,
    pub seq: u32,
}

#[derive(Debug)]
struct TurnState {
    writers: usize,
    waiting: BTreeSet<Ticket>,
    granted: BTreeSet<Ticket>,
    done: BTreeSet<usize>,
    next_seq: HashMap<usize, u32>,
    /// Every request let through, in order: (writer, operation).
    log: Vec<(usize, &'static str)>,
    ops: HashMap<Ticket, &'static str>,
}

impl TurnState {
    fn writers_waiting(&self) -> usize {
        let mut writers: Vec<usize> = self.waiting.iter().map(|t| t.writer).collect();
        writers.dedup();
        writers.len()
    }
}

impl Turnstile {
    pub fn new(writers: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(TurnState {
                writers,
                waiting: BTreeSet::new(),
                granted: BTreeSet::new(),
                done: BTreeSet::new(),
                next_seq: HashMap::new(),
                log: Vec::new(),
                ops: HashMap::new(),
            }),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// Waits until the test grants this request of `writer`'s. The twin's
    /// requests call it; a test calls it for a participant's step that is
    /// no storage request (a reader taking its partial file's lock), so
    /// that step is interleaved with the others too.
    pub async fn enter(&self, writer: usize, op: &'static str) {
        let ticket = {
            let mut s = lock(&self.state);
            let seq = s.next_seq.entry(writer).or_insert(0);
            let ticket = Ticket { writer, seq: *seq };
            *seq += 1;
            s.waiting.insert(ticket);
            s.ops.insert(ticket, op);
            ticket
        };
        self.changed.notify_waiters();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&self.state).granted.remove(&ticket) {
                // `ready` waits for the grant to be taken: a writer whose next
                // request is already waiting sends no new one to wake it.
                self.changed.notify_waiters();
                return;
            }
            notified.await;
        }
    }

    /// Marks a writer finished: it sends no more requests.
    pub fn finish(&self, writer: usize) {
        lock(&self.state).done.insert(writer);
        self.changed.notify_waiters();
    }

    /// Waits until every unfinished writer has a request waiting (and the last
    /// one granted has gone through); returns every waiting request, in order.
    pub async fn ready(&self) -> Vec<Ticket> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = lock(&self.state);
                if s.writers_waiting() + s.done.len() >= s.writers && s.granted.is_empty() {
                    return s.waiting.iter().copied().collect();
                }
            }
            notified.await;
        }
    }

    /// Lets `ticket` (one that `ready` returned) send its request.
    pub fn grant(&self, ticket: Ticket) {
        {
            let mut s = lock(&self.state);
            assert!(s.waiting.remove(&ticket), "{ticket:?} is not waiting");
            let op = s.ops.remove(&ticket).unwrap_or("?");
            s.log.push((ticket.writer, op));
            s.granted.insert(ticket);
        }
        self.changed.notify_waiters();
    }

    /// The requests let through so far, in order.
    pub fn log(&self) -> Vec<(usize, &'static str)> {
        lock(&self.state).log.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn commit<'a>(
        sha: &'a str,
        meta: &'a BTreeMap<String, String>,
        c: &'a Condition,
    ) -> Commit<'a> {
        Commit {
            sha256_hex: sha,
            seal: "seal",
            content_type: None,
            content_md5: None,
            metadata: meta,
            condition: c,
        }
    }

    #[tokio::test]
    async fn behaves_like_azure_for_an_upload() {
        let account = MemoryAccount::new();
        let b = account.blob("c", "x");
        let meta = BTreeMap::new();
        assert!(b.properties().await.expect("props").is_none());
        b.stage_block(b"1", Bytes::from_static(b"ab"))
            .await
            .expect("stage");
        b.stage_block(b"2", Bytes::from_static(b"zz"))
            .await
            .expect("stage");
        // The same ID again replaces the bytes (latest wins).
        b.stage_block(b"2", Bytes::from_static(b"cd"))
            .await
            .expect("stage");
        assert_eq!(b.uncommitted_blocks().await.expect("list").len(), 2);
        let missing = b
            .commit_blocks(
                vec![b"3".to_vec()],
                &commit("h", &meta, &Condition::IfAbsent),
            )
            .await
            .expect_err("unknown ID");
        assert_eq!(missing.status, Some(400));
        let etag = b
            .commit_blocks(
                vec![b"1".to_vec(), b"2".to_vec()],
                &commit("h", &meta, &Condition::IfAbsent),
            )
            .await
            .expect("commit");
        let (data, props) = account.committed("c", "x").expect("committed");
        assert_eq!(&data[..], b"abcd");
        assert_eq!(props.etag, etag);
        assert_eq!(props.sha256.as_deref(), Some("h"));
        assert!(account.uncommitted_ids("c", "x").is_empty());
        let again = b
            .put_blob(
                Bytes::from_static(b"q"),
                &commit("h2", &meta, &Condition::IfAbsent),
            )
            .await
            .expect_err("exists");
        assert_eq!(again.status, Some(409));
        let stale = Condition::IfMatch("\"0xOLD\"".into());
        let e = b
            .put_blob(Bytes::from_static(b"q"), &commit("h2", &meta, &stale))
            .await
            .expect_err("stale etag");
        assert_eq!(e.status, Some(412));
        b.put_blob(
            Bytes::from_static(b"q"),
            &commit("h2", &meta, &Condition::IfMatch(etag)),
        )
        .await
        .expect("If-Match on the current etag");
        assert_eq!(&account.committed("c", "x").expect("blob").0[..], b"q");
        assert_eq!(b.requests(), 10);
    }

    #[tokio::test]
    async fn turnstile_lets_writers_through_in_the_chosen_order() {
        let account = MemoryAccount::new();
        let t = Turnstile::new(2);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..2usize {
            let b = account.blob_in_turn("c", "x", t.clone(), w);
            let t = t.clone();
            tasks.spawn(async move {
                for i in 0..2u8 {
                    b.stage_block(&[w as u8, i], Bytes::from_static(b"x"))
                        .await
                        .expect("stage");
                }
                t.finish(w);
            });
        }
        for pick in [1, 1, 0, 0] {
            let ready = t.ready().await;
            let ticket = ready.iter().find(|t| t.writer == pick);
            t.grant(*ticket.expect("the picked writer waits"));
        }
        assert!(t.ready().await.is_empty());
        while tasks.join_next().await.is_some() {}
        let order: Vec<Vec<u8>> = account.uncommitted_ids("c", "x");
        assert_eq!(order, vec![vec![1, 0], vec![1, 1], vec![0, 0], vec![0, 1]]);
        assert_eq!(t.log().len(), 4);
    }
}
