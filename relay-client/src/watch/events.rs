//! File-system events through `notify`: inotify (with close-after-write)
//! where the file system delivers events, its `PollWatcher` otherwise
//! (`--poll`, or chosen for NFS/SMB/FUSE mounts, whose remote writers raise
//! no local events). Events go into a bounded queue; when it is full, or the
//! kernel's own queue overflowed, a flag asks the driver for a reconcile scan
//! instead of holding more events in memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::settle::Seen;

/// Events waiting for the driver at most; beyond, a reconcile scan.
pub const EVENT_QUEUE: usize = 8192;

/// A change the driver acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    File(PathBuf, Seen),
    /// A directory created or moved in: its files raised no events of their own.
    Dir(PathBuf),
}

pub struct Events {
    pub rx: mpsc::Receiver<Change>,
    /// Set when events were lost: scan to catch up.
    pub lost: Arc<AtomicBool>,
    /// Close events come (inotify), so a written file waits for its close.
    pub close_events: bool,
    /// How the folder is watched, for the start line.
    pub how: String,
    /// Polling (no per-directory watches to add).
    polling: bool,
    watcher: Box<dyn Watcher + Send>,
}

impl Events {
    /// Makes sure `dir`, created or moved in while watching, is watched
    /// before anyone scans it. notify adds the watch itself, but only after
    /// it has handed the event on: a scan started at once could walk the
    /// directory before the watch exists, and a file created in between
    /// would then raise no event and be missed by the scan too. `watch`
    /// returns once the watch is in place, so a scan after it misses nothing.
    pub fn watch_new_dir(&mut self, dir: &std::path::Path) {
        if self.polling {
            return; // the poller walks every folder on each round
        }
        if let Err(e) = self.watcher.watch(dir, RecursiveMode::Recursive) {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot watch a new folder; a reconcile scan will catch up");
            self.lost.store(true, Ordering::Relaxed);
        }
    }
}

/// File systems whose writers may be remote: events are not to be trusted.
fn remote_fs(dir: &std::path::Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    match s.f_type as i64 {
        0x6969 => Some("nfs"),
        0xFF53_4D42 | 0xFE53_4D42 | 0x517B => Some("smb/cifs"),
        0x6573_5546 => Some("fuse"),
        _ => None,
    }
}

pub fn start(dirs: &[PathBuf], poll: Option<Duration>) -> Result<Events, notify::Error> {
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let lost = Arc::new(AtomicBool::new(false));
    let handler = {
        let lost = lost.clone();
        move |res: notify::Result<Event>| match res {
            Ok(ev) => {
                if ev.need_rescan() {
                    lost.store(true, Ordering::Relaxed);
                }
                for change in translate(ev) {
                    if tx.try_send(change).is_err() {
                        lost.store(true, Ordering::Relaxed);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "watch error; a reconcile scan will catch up");
                lost.store(true, Ordering::Relaxed);
            }
        }
    };
    let remote = dirs.iter().find_map(|d| remote_fs(d));
    let poll = poll.or(remote.map(|_| Duration::from_secs(30)));
    let polling = poll.is_some();
    let (mut watcher, close_events, how): (Box<dyn Watcher + Send>, bool, String) = match poll {
        Some(every) => {
            let config = notify::Config::default().with_poll_interval(every);
            let how = match remote {
                Some(fs) => format!("polling every {} s ({fs} mount)", every.as_secs_f64()),
                None => format!("polling every {} s", every.as_secs_f64()),
            };
            (
                Box::new(notify::PollWatcher::new(handler, config)?),
                false,
                how,
            )
        }
        None => (
            Box::new(notify::RecommendedWatcher::new(
                handler,
                notify::Config::default(),
            )?),
            cfg!(target_os = "linux"),
            "file-system events".to_string(),
        ),
    };
    for d in dirs {
        watcher.watch(d, RecursiveMode::Recursive)?;
    }
    Ok(Events {
        rx,
        lost,
        close_events,
        how,
        polling,
        watcher,
    })
}

/// The directory a change brings into the folder, if it is one: created
/// there, or a tree moved in (whose files raised no events of their own).
pub fn new_dir(change: &Change) -> Option<PathBuf> {
    match change {
        Change::Dir(dir) => Some(dir.clone()),
        Change::File(path, Seen::MovedIn) => std::fs::symlink_metadata(path)
            .is_ok_and(|m| m.is_dir())
            .then(|| path.clone()),
        Change::File(..) => None,
    }
}

/// Whether some process holds `path` open for writing (Linux: a read lease
/// cannot be taken on such a file). `false` where that cannot be asked (no
/// lease support, not the file's owner): the settle period then decides.
#[cfg(target_os = "linux")]
pub fn open_for_writing(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for as long as `file` lives; F_SETLEASE takes an
    // int argument and touches no memory of ours.
    if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } == 0 {
        // SAFETY: as above; gives back the lease just taken.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

#[cfg(not(target_os = "linux"))]
pub fn open_for_writing(_path: &std::path::Path) -> bool {
    false
}

/// One notify event as the driver's changes.
pub fn translate(ev: Event) -> Vec<Change> {
    let file = |seen| ev.paths.iter().map(move |p| Change::File(p.clone(), seen));
    match ev.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => file(Seen::Closed).collect(),
        EventKind::Create(CreateKind::Folder) => {
            ev.paths.iter().cloned().map(Change::Dir).collect()
        }
        EventKind::Create(_) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
            file(Seen::Changed).collect()
        }
        // chmod, touch: the time may have changed; the settle check compares it.
        EventKind::Modify(ModifyKind::Metadata(_)) => file(Seen::Changed).collect(),
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => file(Seen::Removed).collect(),
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => file(Seen::MovedIn).collect(),
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
            let mut out = Vec::new();
            if let [from, to, ..] = ev.paths.as_slice() {
                out.push(Change::File(from.clone(), Seen::Removed));
                out.push(Change::File(to.clone(), Seen::MovedIn));
            }
            out
        }
        EventKind::Modify(_) => file(Seen::Changed).collect(),
        EventKind::Remove(RemoveKind::Folder) => Vec::new(),
        EventKind::Remove(_) => file(Seen::Removed).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_map_to_what_the_settle_rules_need() {
        let ev = |kind, paths: &[&str]| Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        };
        let f = |p: &str, s| Change::File(p.into(), s);
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(translate(ev(close, &["a"])), vec![f("a", Seen::Closed)]);
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            translate(ev(both, &["x.part", "x"])),
            vec![f("x.part", Seen::Removed), f("x", Seen::MovedIn)]
        );
        let dir = EventKind::Create(CreateKind::Folder);
        assert_eq!(translate(ev(dir, &["d"])), vec![Change::Dir("d".into())]);
        let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert!(translate(ev(read, &["a"])).is_empty());
    }
}
