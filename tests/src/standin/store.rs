//! The stand-in's state: one account's blobs in memory, with the service's rules
//! for what the relay and the bench touch. Put Block replaces the bytes under an
//! ID; Put Block List takes each `Latest` ID from the uncommitted list (else the
//! committed one) and clears the uncommitted list; Put Blob replaces the blob and
//! clears it too; `If-None-Match: *` on an existing blob fails with 409 and an
//! `If-Match` that does not hold with 412; a Content-MD5 that does not match the
//! bytes fails with 400. No HTTP here: `http.rs` maps requests onto these calls.
//!
//! Why not `relay_storage::memory`, which keeps the same rules: that twin sits
//! behind the relay's own `BlobStore` seam (typed commits, one writer's view,
//! a turnstile for race tests); this one serves the REST surface (raw
//! metadata headers, containers, deletes, committed block lists, the MD5
//! check on arrival), and a bench tool in the product's storage crate would
//! change the binaries the benches measure.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};

/// A refusal, as the service words it (status and `x-ms-error-code`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub code: &'static str,
}

const fn refusal(status: u16, code: &'static str) -> Refusal {
    Refusal { status, code }
}

pub const BLOB_NOT_FOUND: Refusal = refusal(404, "BlobNotFound");
pub const CONTAINER_NOT_FOUND: Refusal = refusal(404, "ContainerNotFound");

/// The write conditions of a request.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// `If-None-Match: *`.
    pub if_absent: bool,
    pub if_match: Option<String>,
}

/// What a commit (Put Blob or Put Block List) sets besides the bytes.
#[derive(Debug, Clone, Default)]
pub struct Properties {
    pub content_type: Option<String>,
    pub content_md5: Option<Vec<u8>>,
    /// `x-ms-meta-*`, names without the prefix.
    pub metadata: Vec<(String, String)>,
}

/// A committed blob.
#[derive(Debug, Clone)]
pub struct Committed {
    pub data: Bytes,
    /// (ID, size) of each block, in order; empty for a Put Blob.
    pub blocks: Vec<(Vec<u8>, Bytes)>,
    pub etag: String,
    pub last_modified: SystemTime,
    pub props: Properties,
}

#[derive(Default)]
struct Entry {
    committed: Option<Committed>,
    uncommitted: Vec<(Vec<u8>, Bytes)>,
}

/// Which IDs a block list names, and from which list each is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListedBlock {
    Latest(Vec<u8>),
    Committed(Vec<u8>),
    Uncommitted(Vec<u8>),
}

/// One account.
#[derive(Default)]
pub struct Account {
    containers: Mutex<HashSet<String>>,
    blobs: Mutex<HashMap<(String, String), Entry>>,
    etags: std::sync::atomic::AtomicU64,
}

impl Account {
    /// Create Container: false if it already existed.
    pub fn create_container(&self, name: &str) -> bool {
        lock(&self.containers).insert(name.to_string())
    }

    fn has_container(&self, name: &str) -> Result<(), Refusal> {
        if lock(&self.containers).contains(name) {
            Ok(())
        } else {
            Err(CONTAINER_NOT_FOUND)
        }
    }

    fn next_etag(&self) -> String {
        let n = self
            .etags
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("\"0x8DD{n:012X}\"")
    }

    pub fn committed(&self, container: &str, blob: &str) -> Result<Committed, Refusal> {
        self.has_container(container)?;
        lock(&self.blobs)
            .get(&key(container, blob))
            .and_then(|e| e.committed.clone())
            .ok_or(BLOB_NOT_FOUND)
    }

    /// Both block lists: (committed, uncommitted), each (ID, size).
    pub fn block_lists(&self, container: &str, blob: &str) -> Result<BlockLists, Refusal> {
        self.has_container(container)?;
        let blobs = lock(&self.blobs);
        let entry = blobs.get(&key(container, blob)).ok_or(BLOB_NOT_FOUND)?;
        let sizes = |l: &[(Vec<u8>, Bytes)]| {
            l.iter()
                .map(|(id, b)| (id.clone(), b.len() as u64))
                .collect()
        };
        Ok(BlockLists {
            committed: entry
                .committed
                .as_ref()
                .map(|c| sizes(&c.blocks))
                .unwrap_or_default(),
            uncommitted: sizes(&entry.uncommitted),
        })
    }

    pub fn put_block(
        &self,
        container: &str,
        blob: &str,
        id: Vec<u8>,
        data: Bytes,
    ) -> Result<(), Refusal> {
        self.has_container(container)?;
        let mut blobs = lock(&self.blobs);
        let entry = blobs.entry(key(container, blob)).or_default();
        entry.uncommitted.retain(|(i, _)| *i != id);
        entry.uncommitted.push((id, data));
        Ok(())
    }

    pub fn put_blob(
        &self,
        container: &str,
        blob: &str,
        data: Bytes,
        props: Properties,
        cond: &Conditions,
    ) -> Result<Committed, Refusal> {
        self.has_container(container)?;
        // Before the lock: hashing a large body must not hold up other blobs.
        md5_matches(&props, &data)?;
        // A Put Blob that sent no MD5 gets the one the service computes.
        let props = Properties {
            content_md5: props
                .content_md5
                .or_else(|| Some(Md5::digest(&data).to_vec())),
            ..props
        };
        let mut blobs = lock(&self.blobs);
        let entry = blobs.entry(key(container, blob)).or_default();
        check(cond, entry.committed.as_ref())?;
        Ok(self.publish(entry, data, Vec::new(), props))
    }

    pub fn put_block_list(
        &self,
        container: &str,
        blob: &str,
        list: &[ListedBlock],
        props: Properties,
        cond: &Conditions,
    ) -> Result<Committed, Refusal> {
        self.has_container(container)?;
        let mut blobs = lock(&self.blobs);
        let entry = blobs.entry(key(container, blob)).or_default();
        check(cond, entry.committed.as_ref())?;
        let find = |l: &[(Vec<u8>, Bytes)], id: &[u8]| {
            l.iter().find(|(i, _)| i == id).map(|(_, b)| b.clone())
        };
        let committed_blocks: &[(Vec<u8>, Bytes)] = entry
            .committed
            .as_ref()
            .map(|c| c.blocks.as_slice())
            .unwrap_or(&[]);
        let mut blocks = Vec::with_capacity(list.len());
        for listed in list {
            let (id, found) = match listed {
                ListedBlock::Latest(id) => (
                    id,
                    find(&entry.uncommitted, id).or_else(|| find(committed_blocks, id)),
                ),
                ListedBlock::Committed(id) => (id, find(committed_blocks, id)),
                ListedBlock::Uncommitted(id) => (id, find(&entry.uncommitted, id)),
            };
            blocks.push((id.clone(), found.ok_or(refusal(400, "InvalidBlockList"))?));
        }
        let mut data = BytesMut::with_capacity(blocks.iter().map(|(_, b)| b.len()).sum());
        for (_, b) in &blocks {
            data.extend_from_slice(b);
        }
        let data = data.freeze();
        md5_matches(&props, &data)?;
        Ok(self.publish(entry, data, blocks, props))
    }

    /// Replaces the committed blob, clearing the uncommitted list (both
    /// commits do, as the service does).
    fn publish(
        &self,
        entry: &mut Entry,
        data: Bytes,
        blocks: Vec<(Vec<u8>, Bytes)>,
        props: Properties,
    ) -> Committed {
        let committed = Committed {
            data,
            blocks,
            etag: self.next_etag(),
            last_modified: SystemTime::now(),
            props,
        };
        entry.committed = Some(committed.clone());
        entry.uncommitted.clear();
        committed
    }

    pub fn delete(&self, container: &str, blob: &str) -> Result<(), Refusal> {
        self.has_container(container)?;
        let mut blobs = lock(&self.blobs);
        match blobs.get(&key(container, blob)) {
            Some(e) if e.committed.is_some() => {
                blobs.remove(&key(container, blob));
                Ok(())
            }
            _ => Err(BLOB_NOT_FOUND),
        }
    }
}

/// (committed, uncommitted) block lists, each (ID, size).
#[derive(Debug, Default)]
pub struct BlockLists {
    pub committed: Vec<(Vec<u8>, u64)>,
    pub uncommitted: Vec<(Vec<u8>, u64)>,
}

/// The blob's Content-MD5, when the commit sets one, is that of its bytes.
fn md5_matches(props: &Properties, data: &[u8]) -> Result<(), Refusal> {
    match &props.content_md5 {
        Some(md5) if Md5::digest(data).as_slice() != md5.as_slice() => {
            Err(refusal(400, "Md5Mismatch"))
        }
        _ => Ok(()),
    }
}

fn check(cond: &Conditions, existing: Option<&Committed>) -> Result<(), Refusal> {
    if cond.if_absent && existing.is_some() {
        return Err(refusal(409, "BlobAlreadyExists"));
    }
    if let Some(want) = &cond.if_match
        && want != "*"
        && existing.is_none_or(|c| &c.etag != want)
    {
        return Err(refusal(412, "ConditionNotMet"));
    }
    Ok(())
}

fn key(container: &str, blob: &str) -> (String, String) {
    (container.to_string(), blob.to_string())
}

/// A poisoned lock only means another request panicked mid-update of plain
/// maps; the stand-in keeps serving (it is a bench tool, not the product).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> Account {
        let a = Account::default();
        a.create_container("c");
        a
    }

    /// Put Blob of `body` at c/`blob`, no properties: the refusal's status.
    fn put(
        a: &Account,
        blob: &str,
        body: &'static [u8],
        cond: &Conditions,
    ) -> Result<Committed, u16> {
        a.put_blob(
            "c",
            blob,
            Bytes::from_static(body),
            Properties::default(),
            cond,
        )
        .map_err(|r| r.status)
    }

    fn if_match(etag: &str) -> Conditions {
        Conditions {
            if_absent: false,
            if_match: Some(etag.into()),
        }
    }

    #[test]
    fn put_blob_honours_conditions_and_md5() {
        let a = account();
        let absent = Conditions {
            if_absent: true,
            if_match: None,
        };
        let first = put(&a, "b", b"one", &absent).expect("first");
        assert_eq!(put(&a, "b", b"two", &absent).err(), Some(409));
        assert_eq!(
            put(&a, "b", b"two", &if_match("\"0xOLD\"")).err(),
            Some(412)
        );
        assert_eq!(
            put(&a, "new", b"two", &if_match(&first.etag)).err(),
            Some(412)
        );
        let bad_md5 = Properties {
            content_md5: Some(vec![0; 16]),
            ..Default::default()
        };
        let e = a.put_blob(
            "c",
            "x",
            Bytes::from_static(b"two"),
            bad_md5,
            &Conditions::default(),
        );
        assert_eq!(e.err().map(|r| r.code), Some("Md5Mismatch"));
        // Without an MD5 the blob gets the one of its bytes, as Azure sets it.
        let md5 = a.committed("c", "b").expect("blob").props.content_md5;
        assert_eq!(md5, Some(Md5::digest(b"one").to_vec()));
        put(&a, "b", b"two", &if_match(&first.etag)).expect("at the current etag");
        assert_eq!(a.committed("c", "b").expect("blob").data.as_ref(), b"two");
        assert_eq!(a.committed("nope", "b").err(), Some(CONTAINER_NOT_FOUND));
    }

    #[test]
    fn block_list_takes_latest_then_clears_uncommitted() {
        let a = account();
        let stage = |id: &[u8], body: &'static [u8]| {
            a.put_block("c", "b", id.to_vec(), Bytes::from_static(body))
                .expect("stage")
        };
        let commit = |list: &[ListedBlock]| {
            a.put_block_list(
                "c",
                "b",
                list,
                Properties::default(),
                &Conditions::default(),
            )
            .map(|c| c.data)
            .map_err(|r| r.code)
        };
        stage(b"1", b"aa");
        stage(b"2", b"bb");
        stage(b"1", b"AA");
        let list = [
            ListedBlock::Latest(b"1".to_vec()),
            ListedBlock::Latest(b"2".to_vec()),
        ];
        assert_eq!(commit(&list).expect("commit").as_ref(), b"AAbb");
        let lists = a.block_lists("c", "b").expect("lists");
        assert!(lists.uncommitted.is_empty());
        assert_eq!(lists.committed.len(), 2);
        // The committed blocks can be named again; an unknown ID cannot.
        let relist = [ListedBlock::Committed(b"2".to_vec())];
        assert_eq!(commit(&relist).expect("recommit").as_ref(), b"bb");
        let unknown = [ListedBlock::Latest(b"9".to_vec())];
        assert_eq!(commit(&unknown).err(), Some("InvalidBlockList"));
    }

    #[test]
    fn delete_removes_only_committed_blobs() {
        let a = account();
        assert_eq!(a.delete("c", "b").err(), Some(BLOB_NOT_FOUND));
        put(&a, "b", b"x", &Conditions::default()).expect("put");
        a.delete("c", "b").expect("delete");
        assert_eq!(a.committed("c", "b").err(), Some(BLOB_NOT_FOUND));
    }
}
