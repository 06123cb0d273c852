//! What the watcher committed: one row per file (path, destination, size,
//! modification time, SHA-256, ETag), in SQLite, written only after the
//! blob's commit was confirmed. A restart looks files up here and sends
//! nothing for one whose size and time match, with no storage request.
//!
//! Crash safety: each row is one transaction in write-ahead-log mode, so a
//! kill -9 keeps every row written before it and never leaves a row for an
//! uncommitted file (the row is written after the commit). `synchronous =
//! NORMAL` may lose the last rows on power loss; those files are then looked
//! up by the skip rules again (the relay finds them identical): slower,
//! never wrong. Deleting the journal is always safe for the same reason.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::settle::Stat;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {file}: {source}")]
    Sqlite {
        file: PathBuf,
        source: rusqlite::Error,
    },
    #[error("journal {file}: cannot create its directory: {source}")]
    Dir {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// One committed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub container: String,
    pub blob: String,
    pub stat: Stat,
    pub sha256: String,
    pub etag: String,
}

pub struct Journal {
    file: PathBuf,
    db: Mutex<Connection>,
}

impl Journal {
    pub fn open(file: &Path) -> Result<Self, JournalError> {
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| JournalError::Dir {
                file: file.to_path_buf(),
                source,
            })?;
        }
        let err = |source| JournalError::Sqlite {
            file: file.to_path_buf(),
            source,
        };
        let db = Connection::open(file).map_err(err)?;
        db.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))
            .map_err(err)?;
        db.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        db.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS committed (
                path TEXT PRIMARY KEY,
                container TEXT NOT NULL,
                blob TEXT NOT NULL,
                size INTEGER NOT NULL,
                mtime_ns INTEGER NOT NULL,
                sha256 TEXT NOT NULL,
                etag TEXT NOT NULL,
                committed_unix INTEGER NOT NULL
            );",
        )
        .map_err(err)?;
        Ok(Self {
            file: file.to_path_buf(),
            db: Mutex::new(db),
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    fn err(&self, source: rusqlite::Error) -> JournalError {
        JournalError::Sqlite {
            file: self.file.clone(),
            source,
        }
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this file, with this size and time, was committed to this blob.
    pub fn has(
        &self,
        path: &str,
        container: &str,
        blob: &str,
        stat: Stat,
    ) -> Result<bool, JournalError> {
        // A cached statement: a start scan asks this once per file.
        let db = self.db();
        let mut stmt = db
            .prepare_cached("SELECT container, blob, size, mtime_ns FROM committed WHERE path = ?1")
            .map_err(|e| self.err(e))?;
        let row: Option<(String, String, i64, i64)> = stmt
            .query_row(params![path], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(row.is_some_and(|(c, b, size, mtime)| {
            c == container
                && b == blob
                && u64::try_from(size).is_ok_and(|s| s == stat.size)
                && mtime == stat.mtime_ns
        }))
    }

    /// Records a commit (after it was confirmed), in its own transaction.
    pub fn record(&self, e: &Entry) -> Result<(), JournalError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let size = i64::try_from(e.stat.size).unwrap_or(i64::MAX);
        self.db()
            .execute(
                "INSERT INTO committed (path, container, blob, size, mtime_ns, sha256, etag, committed_unix)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(path) DO UPDATE SET container = ?2, blob = ?3, size = ?4,
                   mtime_ns = ?5, sha256 = ?6, etag = ?7, committed_unix = ?8",
                params![e.path, e.container, e.blob, size, e.stat.mtime_ns, e.sha256, e.etag, now],
            )
            .map(|_| ())
            .map_err(|err| self.err(err))
    }

    /// Rows kept (for tests and the status line).
    pub fn len(&self) -> Result<u64, JournalError> {
        self.db()
            .query_row("SELECT COUNT(*) FROM committed", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }

    pub fn is_empty(&self) -> Result<bool, JournalError> {
        self.len().map(|n| n == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, size: u64, t: i64) -> Entry {
        Entry {
            path: path.into(),
            container: "c".into(),
            blob: format!("p/{path}"),
            stat: Stat { size, mtime_ns: t },
            sha256: "ab".repeat(32),
            etag: "\"0x1\"".into(),
        }
    }

    #[test]
    fn a_row_matches_only_the_same_file_destination_size_and_time() {
        let dir = std::env::temp_dir().join(format!("journal-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let file = dir.join("sub/j.sqlite");
        let j = Journal::open(&file).expect("open");
        assert!(j.is_empty().expect("len"));
        let e = entry("a", 10, 5);
        j.record(&e).expect("record");
        let has = |p: &str, c: &str, b: &str, s, t| {
            j.has(
                p,
                c,
                b,
                Stat {
                    size: s,
                    mtime_ns: t,
                },
            )
            .expect("has")
        };
        assert!(has("a", "c", "p/a", 10, 5));
        assert!(!has("a", "c", "p/a", 11, 5), "size differs");
        assert!(!has("a", "c", "p/a", 10, 6), "time differs");
        assert!(!has("a", "d", "p/a", 10, 5), "another container");
        assert!(!has("a", "c", "q/a", 10, 5), "another blob");
        assert!(!has("b", "c", "p/b", 10, 5), "never committed");
        // A later commit of the same path replaces the row; reopening keeps it.
        j.record(&entry("a", 11, 6)).expect("record");
        drop(j);
        let j = Journal::open(&file).expect("reopen");
        assert_eq!(j.len().expect("len"), 1);
        assert!(
            j.has(
                "a",
                "c",
                "p/a",
                Stat {
                    size: 11,
                    mtime_ns: 6
                }
            )
            .expect("has")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
