//! The stand-in's state: one account's blobs in memory, with the service's rules
//! for what the relay and the bench touch. Put Block replaces the bytes under an
//! ID; Put Block List takes each `Latest` ID from the uncommitted list (else the
//! committed one) and clears the uncommitted list; Put Blob replaces the blob and
//! clears it too; `If-None-Match: *` on an existing blob fails with 409 and an
//! `If-Match` that does not hold with 412; a Content-MD5 that does not match the
//! bytes fails with 400. List Blobs pages through one container's committed
//! blobs in the service's order (UTF-16 code units, `NameOrder::Utf16`): the
//! blobs sit in a map ordered that way, so a page is a range scan from its
//! marker (the last name the previous page returned), its cost that of the
//! page, not of the container. No HTTP here: `http.rs` maps requests onto
//! these calls.
//!
//! Why not `relay_storage::memory`, which keeps the same rules: that twin sits
//! behind the relay's own `BlobStore` seam (typed commits, one writer's view,
//! a turnstile for race tests); this one serves the REST surface (raw
//! metadata headers, containers, deletes, committed block lists, the MD5
//! check on arrival), and a bench tool in the product's storage crate would
//! change the binaries the benches measure.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};
use relay_proto::sync::order::NameOrder;

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
    blobs: Mutex<BTreeMap<BlobKey, Entry>>,
    etags: std::sync::atomic::AtomicU64,
}

impl Account {
    /// Create Container: false if it already existed.
    pub fn create_container(&self, name: &str) -> bool {
        lock(&self.containers).insert(name.to_string())
    }

    /// Get Container Properties: whether it is there.
    pub fn has_container(&self, name: &str) -> Result<(), Refusal> {
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

/// One blob of a List Blobs page: what the listing shows of it.
#[derive(Debug, Clone)]
pub struct ListedBlob {
    pub name: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
    pub props: Properties,
}

/// One List Blobs page and the marker of the next (`None`: the last page).
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub blobs: Vec<ListedBlob>,
    pub next_marker: Option<String>,
}

/// Azure's most names a page (and its default `maxresults`).
pub const MAX_RESULTS: usize = 5000;

impl Account {
    /// List Blobs (flat): the committed blobs of `container` whose names
    /// start with `prefix`, after `marker` (the last name of the previous
    /// page: the service's marker is opaque, so any string the client hands
    /// back only says where to start), at most `max` of them (1 to
    /// `MAX_RESULTS`). A range scan: the names with one prefix are one run
    /// of the order, starting at the prefix itself. Staged-only blobs (no
    /// commit yet) are not listed, as the service lists them only when asked.
    pub fn list(
        &self,
        container: &str,
        prefix: &str,
        marker: Option<&str>,
        max: usize,
    ) -> Result<ListPage, Refusal> {
        self.has_container(container)?;
        let max = max.clamp(1, MAX_RESULTS);
        let from = match marker.filter(|m| !m.is_empty()) {
            Some(m) if NameOrder::Utf16.compare(m, prefix) != Ordering::Less => {
                Bound::Excluded(key(container, m))
            }
            _ => Bound::Included(key(container, prefix)),
        };
        let blobs = lock(&self.blobs);
        let mut run = blobs
            .range((from, Bound::Unbounded))
            .take_while(|(k, _)| k.0 == container && k.1.0.starts_with(prefix))
            .filter_map(|(k, e)| e.committed.as_ref().map(|c| (&k.1.0, c)));
        let mut page = ListPage::default();
        for (name, c) in run.by_ref().take(max) {
            page.blobs.push(ListedBlob {
                name: name.clone(),
                size: c.data.len() as u64,
                etag: c.etag.clone(),
                last_modified: c.last_modified,
                props: c.props.clone(),
            });
        }
        // A marker only when a blob follows: the last page says it is last.
        if run.next().is_some() {
            page.next_marker = page.blobs.last().map(|b| b.name.clone());
        }
        Ok(page)
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

/// A blob's place in the account: its container, then its name in the
/// service's listing order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BlobKey(String, Utf16Name);

/// A blob name ordered as Azure lists: by UTF-16 code units, so a name with
/// a character beyond U+FFFF (a surrogate pair, 0xD800–0xDBFF first) sorts
/// before one with a character from U+E000 to U+FFFF, unlike UTF-8 order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utf16Name(pub String);

impl Ord for Utf16Name {
    fn cmp(&self, other: &Self) -> Ordering {
        NameOrder::Utf16.compare(&self.0, &other.0)
    }
}

impl PartialOrd for Utf16Name {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn key(container: &str, blob: &str) -> BlobKey {
    BlobKey(container.to_string(), Utf16Name(blob.to_string()))
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

    fn names(page: &ListPage) -> Vec<&str> {
        page.blobs.iter().map(|b| b.name.as_str()).collect()
    }

    #[test]
    fn lists_in_utf16_order_an_emoji_before_a_fullwidth_character() {
        let a = account();
        // UTF-8 order would put U+FF01 (EF BC 81) before U+1F600 (F0 9F …);
        // UTF-16 puts the surrogate pair (D83D …) before FF01.
        for name in ["p/\u{FF01}", "p/\u{1F600}", "p/z", "p/A"] {
            put(&a, name, b"x", &Conditions::default()).expect("put");
        }
        let page = a.list("c", "p/", None, 10).expect("list");
        assert_eq!(names(&page), ["p/A", "p/z", "p/\u{1F600}", "p/\u{FF01}"]);
        assert_eq!(page.next_marker, None);
        // Paged one at a time, from each marker, the same order.
        let (mut marker, mut seen) = (None, Vec::new());
        loop {
            let page = a.list("c", "p/", marker.as_deref(), 1).expect("list");
            seen.extend(page.blobs.iter().map(|b| b.name.clone()));
            match page.next_marker {
                Some(m) => marker = Some(m),
                None => break,
            }
        }
        assert_eq!(seen, ["p/A", "p/z", "p/\u{1F600}", "p/\u{FF01}"]);
    }

    #[test]
    fn lists_by_prefix_and_marker_and_skips_staged_blobs() {
        let a = account();
        a.create_container("d");
        for name in ["a", "p", "p/1", "p/2", "p/3", "p0", "q"] {
            put(&a, name, b"xyz", &Conditions::default()).expect("put");
        }
        a.put_blob(
            "d",
            "p/other",
            Bytes::from_static(b"x"),
            Properties::default(),
            &Conditions::default(),
        )
        .expect("put");
        a.put_block("c", "p/staged", b"1".to_vec(), Bytes::from_static(b"s"))
            .expect("stage");
        let page = a.list("c", "p/", None, 2).expect("list");
        assert_eq!(names(&page), ["p/1", "p/2"]);
        assert_eq!(page.next_marker.as_deref(), Some("p/2"));
        let page = a.list("c", "p/", Some("p/2"), 2).expect("list");
        assert_eq!(names(&page), ["p/3"]);
        assert_eq!(page.next_marker, None, "no blob follows: the last page");
        assert_eq!(page.blobs[0].size, 3);
        // The whole container, one page; a marker before the prefix starts
        // at the prefix; one past every name yields nothing.
        let all = a.list("c", "", None, MAX_RESULTS + 1).expect("list");
        assert_eq!(names(&all), ["a", "p", "p/1", "p/2", "p/3", "p0", "q"]);
        let page = a.list("c", "p/", Some("a"), 10).expect("list");
        assert_eq!(names(&page), ["p/1", "p/2", "p/3"]);
        assert!(
            a.list("c", "p/", Some("zz"), 10)
                .expect("list")
                .blobs
                .is_empty()
        );
        assert_eq!(a.list("nope", "", None, 1).err(), Some(CONTAINER_NOT_FOUND));
    }

    #[test]
    fn listing_keeps_the_metadata_a_commit_set() {
        let a = account();
        let props = Properties {
            metadata: vec![("relay_seal".into(), "s".into())],
            ..Default::default()
        };
        a.put_block("c", "b", b"1".to_vec(), Bytes::from_static(b"ab"))
            .expect("stage");
        let list = [ListedBlock::Latest(b"1".to_vec())];
        let c = a
            .put_block_list("c", "b", &list, props, &Conditions::default())
            .expect("commit");
        let page = a.list("c", "", None, 10).expect("list");
        let b = &page.blobs[0];
        assert_eq!((b.size, &b.etag), (2, &c.etag));
        assert_eq!(b.props.metadata, [("relay_seal".into(), "s".into())]);
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
