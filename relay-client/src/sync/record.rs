//! The index's rows as the sync core reads them (`IndexRecord`), and the
//! rows a sync writes: after each verified send, each placed fetch, and
//! each adopted blob version. One row per file, keyed by its name below the
//! synced folder (= below the prefix); `lookup` is a point query,
//! `lookup_many` a batch (the plan's, read ahead: `lookahead`).

use relay_proto::sync::entry::{self, Identity, IndexRecord};

use super::lookahead::Records;
use crate::index::{FileStat, Index, Record};

/// The core's `stat` from the index's.
pub fn core_stat(s: &FileStat) -> entry::FileStat {
    entry::FileStat {
        size: s.size,
        mtime_ns: s.mtime_ns,
        identity: Some(Identity {
            ino: s.ino,
            dev: s.dev,
            ctime_ns: s.ctime_ns,
        }),
    }
}

/// The index's `stat` from the core's; none where the walk had no identity
/// (nothing to vouch for the file, so nothing is recorded).
pub fn index_stat(s: &entry::FileStat) -> Option<FileStat> {
    let id = s.identity?;
    Some(FileStat {
        size: s.size,
        mtime_ns: s.mtime_ns,
        ctime_ns: id.ctime_ns,
        ino: id.ino,
        dev: id.dev,
    })
}

/// The row for `name` as the core reads it. A failed lookup answers none:
/// the index is a cache, and a missing row only costs a read.
pub fn lookup(
    index: Option<&Index>,
    container: &str,
    blob: &str,
    name: &str,
) -> Option<IndexRecord> {
    let row = index?.get(name).ok().flatten()?;
    vouched(row, container, blob)
}

/// The core's record of `row`, if it is the row of `blob` in `container`.
fn vouched(row: Record, container: &str, blob: &str) -> Option<IndexRecord> {
    // A row of another destination (an index file given twice) vouches for nothing.
    if row.container != container || row.blob != blob {
        return None;
    }
    Some(IndexRecord {
        etag: row.etag,
        sha256: row.sha256,
        stat: core_stat(&row.stat),
    })
}

/// The rows for `names` as the core reads them, in one batch of the index
/// (`Index::get_many`); `blob` names each one's blob. A failed batch
/// answers none (as `lookup`: a missing row only costs a read).
pub fn lookup_many(
    index: Option<&Index>,
    container: &str,
    blob: impl Fn(&str) -> String,
    names: &[&str],
) -> Vec<(String, IndexRecord)> {
    let Some(index) = index else {
        return Vec::new();
    };
    let rows = match index.get_many(names) {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "the sync index did not answer a batch");
            return Vec::new();
        }
    };
    rows.into_iter()
        .filter_map(|row| {
            let name = row.path.clone();
            let b = blob(&name);
            vouched(row, container, &b).map(|r| (name, r))
        })
        .collect()
}

/// The plan's lookup: from the batch read ahead (`records`), else a point
/// query of its own.
pub fn lookup_ahead(
    records: &Records,
    index: Option<&Index>,
    container: &str,
    blob: &str,
    name: &str,
) -> Option<IndexRecord> {
    match records.take(name) {
        Some(record) => record,
        None => lookup(index, container, blob, name),
    }
}

/// What a sync records about one name.
pub struct Moved<'a> {
    pub name: &'a str,
    pub container: &'a str,
    pub blob: &'a str,
    pub etag: &'a str,
    pub last_modified: Option<u64>,
    pub sha256: &'a str,
    pub stat: &'a entry::FileStat,
}

/// Records `m` (best effort: without the row the next run only reads more).
pub fn remember(index: Option<&Index>, m: &Moved<'_>) {
    let (Some(index), Some(stat)) = (index, index_stat(m.stat)) else {
        return;
    };
    let row = Record {
        path: m.name.to_string(),
        container: m.container.to_string(),
        blob: m.blob.to_string(),
        etag: m.etag.to_string(),
        last_modified: m.last_modified,
        stat,
        sha256: m.sha256.to_string(),
    };
    if let Err(e) = index.put(&row) {
        tracing::warn!(error = %e, "the sync index did not take a row");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_the_core_s_record_and_only_for_its_blob() {
        let dir = std::env::temp_dir().join(format!("sync-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let idx = Index::open(&dir.join("i.sqlite")).expect("open");
        let stat = entry::FileStat {
            size: 3,
            mtime_ns: 7,
            identity: Some(Identity {
                ino: 1,
                dev: 2,
                ctime_ns: 8,
            }),
        };
        let m = Moved {
            name: "a/b",
            container: "c",
            blob: "p/a/b",
            etag: "\"e\"",
            last_modified: None,
            sha256: "ab",
            stat: &stat,
        };
        remember(Some(&idx), &m);
        let r = lookup(Some(&idx), "c", "p/a/b", "a/b").expect("row");
        assert_eq!(r.stat, stat);
        assert_eq!((r.etag.as_str(), r.sha256.as_str()), ("\"e\"", "ab"));
        assert!(lookup(Some(&idx), "c", "q/a/b", "a/b").is_none());
        assert!(lookup(None, "c", "p/a/b", "a/b").is_none());
        // A batch: the row of its blob, none for a name without a row, none
        // for a row of another blob (another prefix's index given).
        let blob = |n: &str| format!("p/{n}");
        let got = lookup_many(Some(&idx), "c", blob, &["a/b", "x"]);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0.as_str(), &got[0].1), ("a/b", &r));
        let other = |n: &str| format!("q/{n}");
        assert!(lookup_many(Some(&idx), "c", other, &["a/b"]).is_empty());
        assert!(lookup_many(None, "c", blob, &["a/b"]).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
