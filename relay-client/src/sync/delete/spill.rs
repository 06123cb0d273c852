//! The delete set's spill store in SQLite: a private file beside the index,
//! one transaction per appended batch, read back a page at a time in the
//! order appended, and removed when the store is dropped.
//!
//! Memory: a replay holds one page of candidates (`page`, set by the
//! caller) and SQLite its page cache (bounded below), whatever the number
//! of candidates; nothing is ever collected whole.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use relay_proto::sync::delete::{DeleteCandidate, Origin, SpillStore};
use relay_proto::sync::entry::{FileStat, Identity};
use rusqlite::{Connection, Row, params};

use crate::index::Index;

/// Candidates read back per query unless the caller says otherwise.
pub const DEFAULT_PAGE: usize = 512;

/// SQLite's page cache for the spill, in KiB (a negative `cache_size`).
const CACHE_KIB: i64 = 2048;

#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    #[error("delete list {file}: {source}")]
    Sqlite {
        file: PathBuf,
        source: rusqlite::Error,
    },
    #[error("delete list {file}: a row this client did not write (kind {kind})")]
    BadRow { file: PathBuf, kind: i64 },
}

/// A spill store in its own SQLite file, removed on drop.
pub struct SqliteSpill {
    // A mutex (never contended: one owner) so that a replay, which borrows
    // it, may be held across an await in a task that must be `Send`.
    db: Mutex<Connection>,
    file: PathBuf,
    page: usize,
}

impl SqliteSpill {
    /// A new, empty store in `folder` (the index's folder: the user's state
    /// directory, not a RAM-backed /tmp). The file's name is this process's
    /// and random, so two runs never share one.
    pub fn create_in(folder: &Path) -> Result<Self, SpillError> {
        let file = folder.join(format!(
            "sync-deletes-{}-{:016x}.sqlite",
            std::process::id(),
            rand::random::<u64>()
        ));
        let err = |source| SpillError::Sqlite {
            file: file.clone(),
            source,
        };
        let db = Connection::open(&file).map_err(err)?;
        let store = Self {
            db: Mutex::new(db),
            file: file.clone(),
            page: DEFAULT_PAGE,
        };
        // A scratch file: no journal to keep (it is never rolled back, and a
        // crash only leaves a file nobody reads), no fsync.
        store
            .conn()
            .execute_batch(&format!(
                "PRAGMA journal_mode = OFF;
                 PRAGMA synchronous = OFF;
                 PRAGMA cache_size = -{CACHE_KIB};
                 CREATE TABLE spill (
                    kind INTEGER NOT NULL,
                    name TEXT NOT NULL,
                    etag TEXT,
                    origin INTEGER,
                    size INTEGER,
                    mtime_ns INTEGER,
                    ino INTEGER,
                    dev INTEGER,
                    ctime_ns INTEGER
                 );"
            ))
            .map_err(err)?;
        Ok(store)
    }

    /// A new store in the folder of `index`'s file (where the index lives,
    /// a folder this client already writes).
    pub fn beside(index: &Index) -> Result<Self, SpillError> {
        let folder = index.file().parent().unwrap_or(Path::new("."));
        Self::create_in(folder)
    }

    /// Candidates read back per query (at least 1).
    pub fn with_page(mut self, page: usize) -> Self {
        self.page = page.max(1);
        self
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn err(&self, source: rusqlite::Error) -> SpillError {
        SpillError::Sqlite {
            file: self.file.clone(),
            source,
        }
    }
}

impl Drop for SqliteSpill {
    fn drop(&mut self) {
        // Unlinking a file SQLite still has open is safe here: no other
        // connection, no journal; the space is freed when it closes.
        let _ = std::fs::remove_file(&self.file);
    }
}

const REMOTE: i64 = 0;
const LOCAL: i64 = 1;

fn origin_code(origin: Origin) -> i64 {
    match origin {
        Origin::Placed => 0,
        Origin::ChangedSincePlaced => 1,
        Origin::Unknown => 2,
    }
}

fn origin_of(code: Option<i64>) -> Option<Origin> {
    match code {
        Some(0) => Some(Origin::Placed),
        Some(1) => Some(Origin::ChangedSincePlaced),
        Some(2) => Some(Origin::Unknown),
        _ => None,
    }
}

/// A local candidate's walk `stat` as columns. SQLite's integers are
/// signed 64-bit: sizes, inodes and devices are stored by their bits
/// (`as i64`, and back with `as u64`), which keeps every value exact.
struct StatColumns {
    size: Option<i64>,
    mtime_ns: Option<i64>,
    ino: Option<i64>,
    dev: Option<i64>,
    ctime_ns: Option<i64>,
}

impl StatColumns {
    fn of(stat: Option<&FileStat>) -> Self {
        let id = stat.and_then(|s| s.identity);
        Self {
            size: stat.map(|s| s.size as i64),
            mtime_ns: stat.map(|s| s.mtime_ns),
            ino: id.map(|i| i.ino as i64),
            dev: id.map(|i| i.dev as i64),
            ctime_ns: id.map(|i| i.ctime_ns),
        }
    }

    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            size: row.get(5)?,
            mtime_ns: row.get(6)?,
            ino: row.get(7)?,
            dev: row.get(8)?,
            ctime_ns: row.get(9)?,
        })
    }

    /// The stat back, or `None` if the row has no size or time (not a
    /// local candidate's row).
    fn stat(&self) -> Option<FileStat> {
        let identity = match (self.ino, self.dev, self.ctime_ns) {
            (Some(ino), Some(dev), Some(ctime_ns)) => Some(Identity {
                ino: ino as u64,
                dev: dev as u64,
                ctime_ns,
            }),
            _ => None,
        };
        Some(FileStat {
            size: self.size? as u64,
            mtime_ns: self.mtime_ns?,
            identity,
        })
    }
}

impl SpillStore for SqliteSpill {
    type Error = SpillError;
    type Replay<'a> = SpillReplay<'a>;

    fn append(&mut self, batch: &[DeleteCandidate]) -> Result<(), SpillError> {
        let mut db = self.conn();
        let tx = db.transaction().map_err(|e| self.err(e))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO spill (kind, name, etag, origin, size, mtime_ns, ino, dev, ctime_ns)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(|e| self.err(e))?;
            for c in batch {
                let (kind, name, etag, origin, stat) = match c {
                    DeleteCandidate::Remote { name, etag } => {
                        (REMOTE, name, Some(etag), None, None)
                    }
                    DeleteCandidate::Local { name, origin, stat } => {
                        (LOCAL, name, None, Some(origin_code(*origin)), Some(*stat))
                    }
                };
                let s = StatColumns::of(stat.as_ref());
                insert
                    .execute(params![
                        kind, name, etag, origin, s.size, s.mtime_ns, s.ino, s.dev, s.ctime_ns
                    ])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }

    fn replay(&mut self) -> Result<SpillReplay<'_>, SpillError> {
        Ok(SpillReplay {
            spill: self,
            after: 0,
            held: VecDeque::new(),
            done: false,
        })
    }
}

/// A [`SqliteSpill`] made only when a batch first spills: a sync that
/// deletes nothing, or fewer candidates than the set holds in memory (every
/// run with a count limit), makes no file at all.
pub struct LazySpill {
    folder: PathBuf,
    store: Option<SqliteSpill>,
}

impl LazySpill {
    /// A store to be made in `folder` if ever needed.
    pub fn new(folder: PathBuf) -> Self {
        Self {
            folder,
            store: None,
        }
    }
}

impl SpillStore for LazySpill {
    type Error = SpillError;
    type Replay<'a> = std::iter::Flatten<std::option::IntoIter<SpillReplay<'a>>>;

    fn append(&mut self, batch: &[DeleteCandidate]) -> Result<(), SpillError> {
        if self.store.is_none() {
            self.store = Some(SqliteSpill::create_in(&self.folder)?);
        }
        match self.store.as_mut() {
            Some(store) => store.append(batch),
            None => Ok(()),
        }
    }

    fn replay(&mut self) -> Result<Self::Replay<'_>, SpillError> {
        let replay = match self.store.as_mut() {
            Some(store) => Some(store.replay()?),
            None => None,
        };
        Ok(replay.into_iter().flatten())
    }
}

/// Everything appended, in append order (rowid), a page at a time.
pub struct SpillReplay<'a> {
    spill: &'a SqliteSpill,
    /// The last rowid handed out.
    after: i64,
    held: VecDeque<DeleteCandidate>,
    done: bool,
}

impl SpillReplay<'_> {
    /// Candidates read and not yet handed out: at most one page.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn fill(&mut self) -> Result<(), SpillError> {
        let spill = self.spill;
        let db = spill.conn();
        let mut stmt = db
            .prepare_cached(
                "SELECT rowid, kind, name, etag, origin, size, mtime_ns, ino, dev, ctime_ns FROM spill
                 WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
            )
            .map_err(|e| spill.err(e))?;
        let limit = i64::try_from(spill.page).unwrap_or(i64::MAX);
        let mut rows = stmt
            .query(params![self.after, limit])
            .map_err(|e| spill.err(e))?;
        let mut read = 0;
        while let Some(row) = rows.next().map_err(|e| spill.err(e))? {
            let rowid: i64 = row.get(0).map_err(|e| spill.err(e))?;
            let kind: i64 = row.get(1).map_err(|e| spill.err(e))?;
            let name: String = row.get(2).map_err(|e| spill.err(e))?;
            let etag: Option<String> = row.get(3).map_err(|e| spill.err(e))?;
            let origin = origin_of(row.get(4).map_err(|e| spill.err(e))?);
            let stat = StatColumns::read(row).map_err(|e| spill.err(e))?.stat();
            let bad = || SpillError::BadRow {
                file: spill.file.clone(),
                kind,
            };
            let candidate = match (kind, etag, origin, stat) {
                (REMOTE, Some(etag), None, None) => DeleteCandidate::Remote { name, etag },
                (LOCAL, None, Some(origin), Some(stat)) => {
                    DeleteCandidate::Local { name, origin, stat }
                }
                _ => return Err(bad()),
            };
            self.held.push_back(candidate);
            self.after = rowid;
            read += 1;
        }
        if read < spill.page {
            self.done = true;
        }
        Ok(())
    }
}

impl Iterator for SpillReplay<'_> {
    type Item = Result<DeleteCandidate, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.held.is_empty()
            && !self.done
            && let Err(e) = self.fill()
        {
            // One error ends the replay: what follows cannot be trusted.
            self.done = true;
            return Some(Err(e));
        }
        self.held.pop_front().map(Ok)
    }
}

#[cfg(test)]
#[path = "spill_tests.rs"]
mod tests;
