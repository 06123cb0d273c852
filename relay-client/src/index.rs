//! What this machine placed in a local folder, and from which blob version:
//! one row per file (its path below the folder, the container, blob, ETag
//! and Last-Modified it came from, its SHA-256 as this client computed it,
//! and the `stat` it had right after: size, modification and change times in
//! nanoseconds, inode and device), in SQLite, one index per folder.
//!
//! It answers one question, as git's index does: "is this file still the one
//! that was recorded?". A file whose `stat` is unchanged since holds what was
//! recorded; any write, rename over it, `touch` or copy changes its change
//! time or inode, and then the index knows nothing about it. `download` uses
//! it to compare a local file with a blob that carries no checksum; `sync`
//! (`sync/record.rs`) decides "unchanged" the same way without reading
//! the file, in either direction: one index per destination (a folder
//! downloaded to, kind `sync`; a relay or account, container and prefix
//! uploaded to, kind `sync-upload`), one row per file below it, asked a
//! batch of names at a time (`get_many`).
//!
//! The index is a cache and safe to delete: a missing row only makes a rerun
//! compare by other means (or refuse a file it cannot compare), never decide
//! wrongly. Each row is one transaction in write-ahead-log mode; two runs on
//! one folder share the file (SQLite's locking, with a busy timeout).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index {file}: {source}")]
    Sqlite {
        file: PathBuf,
        source: rusqlite::Error,
    },
    #[error("index {file}: cannot create its directory: {source}")]
    Dir {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// A file's `stat` as the index compares it: all of it must be equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
}

/// One file as it was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Below the indexed folder, `/`-separated.
    pub path: String,
    pub container: String,
    pub blob: String,
    pub etag: String,
    /// The blob's Last-Modified (seconds since the epoch), if storage said.
    pub last_modified: Option<u64>,
    pub stat: FileStat,
    /// SHA-256 (hex) of the file's bytes, computed by this client.
    pub sha256: String,
}

impl Record {
    /// Whether the file at this path is still the one recorded.
    pub fn unchanged(&self, now: &FileStat) -> bool {
        self.stat == *now
    }
}

pub struct Index {
    file: PathBuf,
    db: Mutex<Connection>,
}

/// How often a set-up that met another run's set-up is tried again (about
/// 10 s in all with the doubling pauses).
const OPEN_TRIES: u32 = 25;

/// Whether SQLite said another connection holds the file for now.
fn busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Names [`Index::get_many`] asks in one statement (SQLite allows 32,766
/// parameters; a batch is also what the caller holds in memory).
pub const MANY: usize = 512;

/// A row's columns, `path` first; `WHERE` follows.
const SELECT_ROW: &str = "SELECT path, container, blob, etag, last_modified, size, mtime_ns, \
     ctime_ns, ino, dev, sha256 FROM files";

/// A row of `SELECT_ROW` as a `Record`.
fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    Ok(Record {
        path: r.get(0)?,
        container: r.get(1)?,
        blob: r.get(2)?,
        etag: r.get(3)?,
        last_modified: r.get::<_, Option<i64>>(4)?.map(|v| v.max(0) as u64),
        stat: FileStat {
            size: r.get::<_, i64>(5)?.max(0) as u64,
            mtime_ns: r.get(6)?,
            ctime_ns: r.get(7)?,
            ino: r.get::<_, i64>(8)? as u64,
            dev: r.get::<_, i64>(9)? as u64,
        },
        sha256: r.get(10)?,
    })
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Index {
    /// `$XDG_STATE_HOME/blob-relay/KIND-index-HASH.sqlite` (else
    /// `~/.local/state/...`): one index per local folder (`folder` as given
    /// canonical; for an upload sync, the destination's name as a path) and
    /// kind of use (`download`, `sync`, `sync-upload`).
    pub fn default_file(kind: &str, folder: &Path) -> Option<PathBuf> {
        use sha2::Digest;
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))?;
        let id = sha2::Sha256::digest(folder.as_os_str().as_encoded_bytes());
        Some(state.join(format!(
            "blob-relay/{kind}-index-{}.sqlite",
            hex::encode(&id[..8])
        )))
    }

    pub fn open(file: &Path) -> Result<Self, IndexError> {
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| IndexError::Dir {
                file: file.to_path_buf(),
                source,
            })?;
        }
        let err = |source| IndexError::Sqlite {
            file: file.to_path_buf(),
            source,
        };
        // Two runs into one folder may create its index at the same moment:
        // switching a new file to write-ahead logging answers SQLITE_BUSY
        // without asking the busy handler, so the set-up is tried again.
        let mut delay = std::time::Duration::from_millis(10);
        let mut tries = 0;
        loop {
            match Self::set_up(file) {
                Ok(db) => {
                    return Ok(Self {
                        file: file.to_path_buf(),
                        db: Mutex::new(db),
                    });
                }
                Err(e) if busy(&e) && tries < OPEN_TRIES => {
                    tries += 1;
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(std::time::Duration::from_millis(500));
                }
                Err(e) => return Err(err(e)),
            }
        }
    }

    fn set_up(file: &Path) -> Result<Connection, rusqlite::Error> {
        let db = Connection::open(file)?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS files (
                path TEXT PRIMARY KEY,
                container TEXT NOT NULL,
                blob TEXT NOT NULL,
                etag TEXT NOT NULL,
                last_modified INTEGER,
                size INTEGER NOT NULL,
                mtime_ns INTEGER NOT NULL,
                ctime_ns INTEGER NOT NULL,
                ino INTEGER NOT NULL,
                dev INTEGER NOT NULL,
                sha256 TEXT NOT NULL,
                recorded_unix INTEGER NOT NULL
            );",
        )?;
        Ok(db)
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    fn err(&self, source: rusqlite::Error) -> IndexError {
        IndexError::Sqlite {
            file: self.file.clone(),
            source,
        }
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The row for `path`, if one was recorded.
    pub fn get(&self, path: &str) -> Result<Option<Record>, IndexError> {
        let db = self.db();
        let mut stmt = db
            .prepare_cached(&format!("{SELECT_ROW} WHERE path = ?1"))
            .map_err(|e| self.err(e))?;
        stmt.query_row(params![path], row)
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The rows recorded for `paths` (those it has, in no particular
    /// order), in one statement: one read transaction and one pass of
    /// SQLite's per-statement work for up to [`MANY`] names, where a `get`
    /// per name pays both each time (a sync's unchanged re-run asks for
    /// every file). More than `MANY` names are asked `MANY` at a time.
    pub fn get_many(&self, paths: &[&str]) -> Result<Vec<Record>, IndexError> {
        let mut rows = Vec::new();
        let db = self.db();
        // One statement of exactly MANY parameters, cached: a shorter batch
        // repeats its last name (an IN list ignores the repeat).
        let sql = format!(
            "{SELECT_ROW} WHERE path IN ({})",
            (1..=MANY)
                .map(|i| format!("?{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut stmt = db.prepare_cached(&sql).map_err(|e| self.err(e))?;
        for batch in paths.chunks(MANY) {
            let Some(last) = batch.last() else { continue };
            let padded = batch.iter().chain(std::iter::repeat(last)).take(MANY);
            let found = stmt
                .query_map(rusqlite::params_from_iter(padded), row)
                .map_err(|e| self.err(e))?;
            for r in found {
                rows.push(r.map_err(|e| self.err(e))?);
            }
        }
        Ok(rows)
    }

    /// Records (or replaces) the row of `r.path`, in its own transaction.
    pub fn put(&self, r: &Record) -> Result<(), IndexError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let db = self.db();
        // Cached: a download records one row per file, and the statement is
        // parsed once per run rather than once per row.
        let mut stmt = db
            .prepare_cached(
                "INSERT INTO files (path, container, blob, etag, last_modified, size, mtime_ns,
                    ctime_ns, ino, dev, sha256, recorded_unix)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 ON CONFLICT(path) DO UPDATE SET container = ?2, blob = ?3, etag = ?4,
                    last_modified = ?5, size = ?6, mtime_ns = ?7, ctime_ns = ?8, ino = ?9,
                    dev = ?10, sha256 = ?11, recorded_unix = ?12",
            )
            .map_err(|e| self.err(e))?;
        stmt.execute(params![
            r.path,
            r.container,
            r.blob,
            r.etag,
            r.last_modified.map(to_i64),
            to_i64(r.stat.size),
            r.stat.mtime_ns,
            r.stat.ctime_ns,
            r.stat.ino as i64,
            r.stat.dev as i64,
            r.sha256,
            now
        ])
        .map(|_| ())
        .map_err(|e| self.err(e))
    }

    /// Forgets `path` (a file replaced or removed by other means).
    pub fn forget(&self, path: &str) -> Result<(), IndexError> {
        self.db()
            .execute("DELETE FROM files WHERE path = ?1", params![path])
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &str) -> Record {
        Record {
            path: path.into(),
            container: "c".into(),
            blob: format!("p/{path}"),
            etag: "\"0x1\"".into(),
            last_modified: Some(1_700_000_000),
            stat: FileStat {
                size: 10,
                mtime_ns: 5,
                ctime_ns: 6,
                ino: u64::MAX - 1,
                dev: 3,
            },
            sha256: "ab".repeat(32),
        }
    }

    /// Two runs into one new folder create its index at the same moment:
    /// both must get it (and each see the other's rows), every round.
    #[test]
    fn two_runs_that_create_one_index_at_once_both_open_it() {
        let dir = std::env::temp_dir().join(format!("index-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for round in 0..40 {
            let file = dir.join(format!("{round}.sqlite"));
            let start = std::sync::Arc::new(std::sync::Barrier::new(2));
            let runs: Vec<_> = ["x", "y"]
                .into_iter()
                .map(|name| {
                    let (file, start) = (file.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        let idx = Index::open(&file)
                            .unwrap_or_else(|e| panic!("round {round}: {name}: {e}"));
                        idx.put(&record(name)).expect("put");
                        idx
                    })
                })
                .collect();
            let opened: Vec<Index> = runs
                .into_iter()
                .map(|run| run.join().expect("thread"))
                .collect();
            for idx in &opened {
                for name in ["x", "y"] {
                    assert_eq!(
                        idx.get(name).expect("get"),
                        Some(record(name)),
                        "round {round}"
                    );
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_row_says_a_file_is_unchanged_only_if_all_its_stat_is() {
        let dir = std::env::temp_dir().join(format!("index-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let file = dir.join("sub/i.sqlite");
        let idx = Index::open(&file).expect("open");
        assert_eq!(idx.get("a").expect("get"), None);
        let r = record("a");
        idx.put(&r).expect("put");
        let back = idx.get("a").expect("get").expect("row");
        assert_eq!(back, r, "every field round-trips (a 64-bit inode too)");
        assert!(back.unchanged(&r.stat));
        for changed in [
            FileStat { size: 11, ..r.stat },
            FileStat {
                mtime_ns: 7,
                ..r.stat
            },
            FileStat {
                ctime_ns: 7,
                ..r.stat
            },
            FileStat { ino: 9, ..r.stat },
            FileStat { dev: 9, ..r.stat },
        ] {
            assert!(!back.unchanged(&changed), "{changed:?}");
        }
        // A second writer (another run) on the same file, then a replaced row.
        let other = Index::open(&file).expect("second");
        let mut r2 = record("a");
        r2.etag = "\"0x2\"".into();
        other.put(&r2).expect("put");
        assert_eq!(idx.get("a").expect("get"), Some(r2));
        idx.forget("a").expect("forget");
        assert_eq!(other.get("a").expect("get"), None);
        // Deleting the file loses nothing but knowledge.
        drop((idx, other));
        std::fs::remove_dir_all(&dir).expect("rm");
        let idx = Index::open(&file).expect("reopen");
        assert_eq!(idx.get("a").expect("get"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A batch answers exactly the rows it has, whatever the names' order
    /// (`！` and `😀` are ordered otherwise in UTF-8 than in UTF-16), past
    /// `MANY` names too; an empty batch asks nothing.
    #[test]
    fn get_many_answers_the_rows_it_has_in_batches() {
        let dir = std::env::temp_dir().join(format!("index-many-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let idx = Index::open(&dir.join("i.sqlite")).expect("open");
        let names: Vec<String> = (0..MANY + 10)
            .map(|i| format!("d/{i:05}"))
            .chain(["p/😀".to_string(), "p/！".to_string()])
            .collect();
        // Every third name has a row.
        for n in names.iter().step_by(3) {
            idx.put(&record(n)).expect("put");
        }
        let asked: Vec<&str> = names.iter().rev().map(String::as_str).collect();
        let mut got = idx.get_many(&asked).expect("batch");
        got.sort_by(|a, b| a.path.cmp(&b.path));
        let mut want: Vec<Record> = names.iter().step_by(3).map(|n| record(n)).collect();
        want.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(got, want);
        assert_eq!(idx.get_many(&[]).expect("empty"), []);
        assert_eq!(idx.get_many(&["nope"]).expect("absent"), []);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_index_per_folder_and_kind() {
        let a = Index::default_file("download", Path::new("/data/a"));
        let b = Index::default_file("download", Path::new("/data/b"));
        let s = Index::default_file("sync", Path::new("/data/a"));
        if a.is_none() {
            return; // neither XDG_STATE_HOME nor HOME: no default
        }
        assert_ne!(a, b);
        assert_ne!(a, s);
        let a = a.unwrap_or_default();
        assert!(a.to_string_lossy().contains("blob-relay/download-index-"));
    }
}
