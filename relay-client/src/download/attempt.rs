//! One attempt at one blob, the driver of `session`: it takes the partial
//! file's lock (one writer: `partial`), looks at what is on disk, performs
//! each action (hash the local file, open a `Fetch` stream, receive its
//! sections into the partial file, place it: `placing`) and feeds back what
//! happened; every decision is the session's. It records what it placed in
//! this machine's index, and removes a partial file that is worth nothing.

use indicatif::ProgressBar;
use relay_proto::protocol::{Check, Source};

use super::fetch::{Done, Target, Way, fs, hash_file, local, local_of, open, receive};
use super::partial::{self, Held, Sidecar};
use super::place::{partial_name, sidecar_name};
use super::placing;
use super::safe_fs::{Entry, FsError, Stat, set_mode, stat_file};
use super::stream::{Body, Stream};
use crate::index::{FileStat, Record};
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;
use relay_proto::session::download::{Action, Event, Failed, Hashes, Local, Session, same_etag};

/// Why an attempt ended without a file, and whether its partial file is
/// worth nothing.
struct Stop {
    error: FileError,
    discard: bool,
}

impl From<FileError> for Stop {
    fn from(error: FileError) -> Self {
        Stop {
            error,
            discard: false,
        }
    }
}

fn failed(f: Failed) -> Stop {
    Stop {
        discard: f.discard,
        // The session names its codes by word: every one of them is a report's code.
        error: FileError::new(
            ErrorCode::from_label(f.code).unwrap_or(ErrorCode::Internal),
            f.message,
            f.retryable,
        ),
    }
}

/// One blob, one attempt: under the partial file's lock from the first look
/// at the disk to the file placed (or the partial file removed).
pub async fn download(way: Way<'_>, t: &Target<'_>, bar: &ProgressBar) -> Result<Done, FileError> {
    let part = partial_name(t.container, t.blob);
    let held = match partial::lock(t.folder, &part, t.patience).await {
        // A folder that cannot be written (read-only, not ours) may still hold
        // the file identical: compared, and refused only if it must be fetched.
        Err(e) if e.code == ErrorCode::Permission => Err(e),
        r => Ok(r?),
    };
    let mut a = Attempt {
        t,
        side: sidecar_name(t.container, t.blob),
        part,
        held,
        seen: None,
        stream: None,
        ranges_checked: 0,
        last_etag: t.listed.etag.clone(),
        written: None,
        sidecar: true,
    };
    let end = a.run(way, bar).await;
    a.tidy(&end);
    end.map_err(|s| s.error)
}

/// One attempt at one blob: the partial file it holds and what it saw.
struct Attempt<'t, 'a> {
    t: &'t Target<'a>,
    part: String,
    side: String,
    /// The partial file, locked; or why none can be written in the folder.
    held: Result<Held, FileError>,
    /// The local file's version when it was looked at and compared: the only
    /// one `--overwrite` may replace (`None`: nothing was there).
    seen: Option<Stat>,
    stream: Option<Stream>,
    ranges_checked: u64,
    last_etag: String,
    written: Option<Hashes>,
    /// A sidecar may be beside the partial file (an earlier run's, or this
    /// attempt's): removed with it.
    sidecar: bool,
}

impl Attempt<'_, '_> {
    fn held(&self) -> Result<&Held, Stop> {
        self.held.as_ref().map_err(|e| Stop::from(e.clone()))
    }

    async fn run(&mut self, way: Way<'_>, bar: &ProgressBar) -> Result<Done, Stop> {
        partial::settled(self.t.folder, self.t.leaf, self.t.patience).await?;
        let here = self.look()?;
        let t = self.t;
        let earlier = match &self.held {
            Ok(held) => {
                partial::find(t.folder, held, &self.side, t.container, t.blob).map_err(fs)?
            }
            Err(_) => None,
        };
        let (mut session, mut action) =
            Session::new(t.listed.clone(), here, earlier, t.overwrite.into());
        loop {
            let event = match action {
                Action::HashLocal { md5 } => Event::LocalHashed(self.hash_local(md5).await?),
                Action::Fetch {
                    offset,
                    etag,
                    compare_only,
                } => self.fetch(way, offset, etag, compare_only).await?,
                Action::Receive { from, fresh } => self.receive(from, fresh, bar).await?,
                Action::Place { check, resumed } => return self.place(check, resumed).await,
                Action::Skip { reason, compared } => {
                    return Ok(Done::Skipped {
                        reason,
                        etag: self.last_etag.clone(),
                        compared,
                    });
                }
                Action::Fail(f) => return Err(failed(f)),
            };
            action = session.handle(event);
        }
    }

    /// What is at the final name, remembering the version seen, and whether
    /// this machine's index says it placed that very file from this version.
    fn look(&mut self) -> Result<Local, FileError> {
        let t = self.t;
        let st = match t.folder.entry(t.leaf).map_err(fs)? {
            Entry::File(st) => st,
            other => return Ok(local_of(other)),
        };
        self.seen = Some(st);
        let indexed = t.index.is_some_and(|idx| {
            let row = tokio::task::block_in_place(|| idx.get(&t.index_path));
            row.ok().flatten().is_some_and(|r| {
                r.container == t.container
                    && r.blob == t.blob
                    && same_etag(&r.etag, &t.listed.etag)
                    && r.unchanged(&fingerprint(&st))
            })
        });
        Ok(Local::File {
            size: st.size,
            mtime: st.mtime(),
            indexed,
        })
    }

    /// Hashes the local file; the version hashed is the one `--overwrite`
    /// may replace, and one that changes while it is hashed compares as
    /// nothing.
    async fn hash_local(&mut self, md5: bool) -> Result<Hashes, Stop> {
        let file = self.t.folder.open_file(self.t.leaf, false).map_err(fs)?;
        let path = self.t.folder.path().join(self.t.leaf);
        let io = |e| fs(FsError::of(&path, e));
        let before = stat_file(&file).map_err(io)?;
        let probe = file.try_clone().map_err(io)?;
        let hashes = hash_file(file, None, md5).await?;
        if stat_file(&probe).map_err(io)? != before {
            return Err(FileError::new(
                ErrorCode::Exists,
                "the local file changed while it was compared with the blob; not replaced (rerun to compare it again)",
                false,
            )
            .into());
        }
        self.seen = Some(before);
        Ok(hashes)
    }

    async fn fetch(
        &mut self,
        way: Way<'_>,
        offset: u64,
        etag: Option<String>,
        compare_only: bool,
    ) -> Result<Event, Stop> {
        let t = self.t;
        if !compare_only {
            // No byte is fetched that could not be written.
            self.held()?;
        }
        if let Some(mut old) = self.stream.take() {
            old.body.stop();
        }
        let opened = match way {
            Way::Relay {
                conn,
                turns,
                compress,
            } => open(conn, turns, t, offset, etag, compress).await?,
            Way::Direct(d) => {
                d.open(t.container, t.blob, offset, etag)
                    .await?
                    .map(|(source, ranges)| Stream {
                        body: Body::Direct(ranges),
                        source,
                    })
            }
        };
        Ok(match opened {
            Ok(mut s) => {
                let src = s.source.clone();
                self.last_etag = src.etag.clone();
                if compare_only {
                    s.body.stop();
                } else {
                    self.stream = Some(s);
                }
                Event::Source(src)
            }
            Err(refusal) => Event::Refused(refusal),
        })
    }

    async fn receive(&mut self, from: u64, fresh: bool, bar: &ProgressBar) -> Result<Event, Stop> {
        let t = self.t;
        let path = t.folder.path().join(&self.part);
        let file = self
            .held()?
            .file
            .try_clone()
            .map_err(|e| fs(FsError::of(&path, e)))?;
        let Some(s) = self.stream.as_mut() else {
            return Err(FileError::new(ErrorCode::Internal, "no stream to receive", false).into());
        };
        if fresh && partial::resumable(s.source.size) {
            let sidecar = Sidecar {
                container: t.container.to_string(),
                blob: t.blob.to_string(),
                etag: s.source.etag.clone(),
                size: s.source.size,
            };
            partial::record(t.folder, &self.side, &sidecar).map_err(fs)?;
            self.sidecar = true;
        } else if fresh {
            // Too small to be worth resuming: no sidecar, so a partial file
            // left behind is started over; an earlier one's goes first, so
            // it never names these bytes.
            t.folder.remove_file(&self.side).map_err(fs)?;
            self.sidecar = false;
        }
        Ok(
            match receive(s, file, from, &path, bar, &t.received).await? {
                Ok((len, hashes, ranges)) => {
                    self.ranges_checked = ranges;
                    self.written = Some(hashes.clone());
                    Event::Received { len, hashes }
                }
                Err(refusal) => Event::Refused(refusal),
            },
        )
    }

    /// The verified partial file under its final name: its blob's
    /// Last-Modified and the run's file mode first, then its one fsync (its
    /// bytes and those two), then a rename that never replaces a file nobody compared
    /// (`placing`), then the folder synced (an fsync shared with the files
    /// placed there meanwhile: `folder_sync`) and the file recorded in this
    /// machine's index.
    async fn place(&mut self, check: Check, resumed: u64) -> Result<Done, Stop> {
        let t = self.t;
        let Some(s) = self.stream.take() else {
            return Err(FileError::new(ErrorCode::Internal, "no stream to place", false).into());
        };
        let refused = |code: ErrorCode, message: &str| Stop {
            error: FileError::new(code, message, false),
            discard: true,
        };
        if matches!(
            local(t.folder, t.leaf)?,
            Local::Folder | Local::Symlink | Local::Other
        ) {
            return Err(refused(
                ErrorCode::InTheWay,
                "something other than a file appeared at the file's name; nothing placed, the download is discarded",
            ));
        }
        let path = t.folder.path().join(&self.part);
        let io = |e| fs(FsError::of(&path, e));
        let file = &self.held()?.file;
        set_mtime(file, s.source.last_modified).map_err(io)?;
        // A file replaced keeps its mode, as rsync keeps an updated file's:
        // a file made private stays private. A new one takes the run's.
        let mode = self.seen.map_or_else(|| t.folder.file_mode(), |v| v.mode);
        set_mode(file, mode).map_err(io)?;
        tokio::task::block_in_place(|| file.sync_all()).map_err(io)?;
        let placed = match &self.seen {
            None => placing::without_replacing(t.folder, &self.part, t.leaf),
            Some(v) => placing::replacing(t.folder, &self.part, t.leaf, v),
        }
        .map_err(fs)?;
        if let Err(r) = placed {
            return Err(refused(ErrorCode::Exists, r.message()));
        }
        if self.sidecar {
            t.folder.remove_file(&self.side).map_err(fs)?;
        }
        t.folder_syncs.sync(t.folder).await.map_err(fs)?;
        let h = self.written.take().unwrap_or(Hashes {
            sha256: String::new(),
            md5: String::new(),
        });
        self.remember(&s.source, &h.sha256);
        Ok(Done::Placed {
            size: s.source.size,
            sha256: h.sha256,
            md5: h.md5,
            etag: s.source.etag,
            check,
            ranges_checked: self.ranges_checked,
            resumed,
            received: t.received.load(std::sync::atomic::Ordering::Relaxed),
            wire: t.wire.compressed_total(),
        })
    }

    /// Records the placed file in this machine's index (best effort: without
    /// the row a rerun only compares by other means).
    fn remember(&self, source: &Source, sha256: &str) {
        let t = self.t;
        let Some(idx) = t.index else { return };
        let Ok(st) = self.held.as_ref().map(|h| stat_file(&h.file)) else {
            return;
        };
        let Ok(st) = st else { return };
        let row = Record {
            path: t.index_path.clone(),
            container: t.container.to_string(),
            blob: t.blob.to_string(),
            etag: source.etag.clone(),
            last_modified: source.last_modified,
            stat: fingerprint(&st),
            sha256: sha256.to_string(),
        };
        if let Err(e) = tokio::task::block_in_place(|| idx.put(&row)) {
            tracing::warn!(error = %e, "the index did not take the placed file");
        }
    }

    /// Removes the partial file when it is worth nothing: after a skip, a
    /// failure that discards it, or when it holds no byte or no sidecar
    /// names it (nothing would resume it).
    fn tidy(&self, end: &Result<Done, Stop>) {
        let Ok(held) = &self.held else { return };
        let remove = match end {
            Ok(Done::Placed { .. }) => false,
            Ok(Done::Skipped { .. }) => true,
            Err(stop) => {
                stop.discard || !self.sidecar || stat_file(&held.file).is_ok_and(|s| s.size == 0)
            }
        };
        if remove {
            let t = self.t;
            if let Err(e) = partial::remove(t.folder, &self.part, &self.side, held) {
                tracing::warn!(error = %e, "a partial file was left");
            }
        }
    }
}

/// A file's `stat` as the index keeps it.
fn fingerprint(st: &Stat) -> FileStat {
    FileStat {
        size: st.size,
        mtime_ns: st.mtime_ns,
        ctime_ns: st.ctime_ns,
        ino: st.ino,
        dev: st.dev,
    }
}

/// Gives the verified file its blob's Last-Modified as modification time, as
/// rclone and AzCopy do, so `--overwrite=if-newer` on a rerun compares the
/// blob with the version it was downloaded from, not with the download's time.
fn set_mtime(file: &std::fs::File, last_modified: Option<u64>) -> std::io::Result<()> {
    let Some(secs) = last_modified else {
        return Ok(());
    };
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}
