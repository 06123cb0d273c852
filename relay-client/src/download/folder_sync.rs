//! One folder fsync for the files placed in that folder at the same time.
//!
//! A placed file is durable only once its folder is fsynced after the rename
//! (docs/DOWNLOAD.md, "Modes and durability"). With many small files in
//! flight, one fsync of the folder per file costs a journal commit or a
//! device cache flush each, though a single fsync covers every rename done
//! before it started. So the files of one folder share them, as a database
//! shares its log flushes (group commit): a file takes a ticket after its
//! rename; an fsync covers every ticket taken before it started; a file
//! whose ticket an fsync in progress may not cover waits for it to end and
//! then, if no later one has started, starts the next. No file is reported
//! placed (or recorded in the index) before an fsync that started after its
//! rename has succeeded; an fsync that fails covers nobody, and each file it
//! would have covered tries its own.
//!
//! Folders are told apart by device and inode, never by path: a folder
//! renamed and remade under the same name is another folder. Memory: one
//! entry per folder with a file waiting on it, so at most `--parallel`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::safe_fs::{Folder, FsError};

/// The folder fsyncs of a run, shared by its files.
#[derive(Default)]
pub struct FolderSyncs {
    folders: Mutex<HashMap<(u64, u64), Users>>,
}

/// A folder's fsyncs and how many files wait on them.
struct Users {
    shared: Arc<Shared>,
    count: usize,
}

/// One folder's fsyncs.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ended: Notify,
}

#[derive(Default, Debug)]
struct State {
    /// Tickets handed out (each after its file's rename).
    taken: u64,
    /// Every ticket up to this one is covered by an fsync that succeeded.
    covered: u64,
    /// An fsync is under way.
    running: bool,
}

/// What a file with ticket `mine` does next, given the folder's state.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// An fsync that started after its rename succeeded.
    Done,
    /// An fsync is under way that may have started before its rename.
    Wait,
    /// None is under way: start one, covering every ticket up to this.
    Run(u64),
}

impl State {
    fn take(&mut self) -> u64 {
        self.taken += 1;
        self.taken
    }

    fn step(&mut self, mine: u64) -> Step {
        if self.covered >= mine {
            Step::Done
        } else if self.running {
            Step::Wait
        } else {
            self.running = true;
            Step::Run(self.taken)
        }
    }

    fn ended(&mut self, upto: u64, ok: bool) {
        self.running = false;
        if ok {
            self.covered = self.covered.max(upto);
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while the lock was held leaves counters that are
    // still consistent (each update is one assignment).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FolderSyncs {
    /// Returns once `folder`'s entries as they were when this was called
    /// (the caller's rename) are durable.
    pub async fn sync(&self, folder: &Folder) -> Result<(), FsError> {
        let key = folder.identity()?;
        let shared = {
            let mut folders = locked(&self.folders);
            let users = folders.entry(key).or_insert_with(|| Users {
                shared: Default::default(),
                count: 0,
            });
            users.count += 1;
            users.shared.clone()
        };
        let _leave = Leave { syncs: self, key };
        shared.sync(folder).await
    }

    /// Folders with a file waiting on them (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        locked(&self.folders).len()
    }
}

/// A file done waiting on a folder's fsyncs (or stopped meanwhile): the
/// folder's entry leaves the map with its last file.
struct Leave<'a> {
    syncs: &'a FolderSyncs,
    key: (u64, u64),
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut folders = locked(&self.syncs.folders);
        if let Some(users) = folders.get_mut(&self.key) {
            users.count = users.count.saturating_sub(1);
            if users.count == 0 {
                folders.remove(&self.key);
            }
        }
    }
}

impl Shared {
    async fn sync(&self, folder: &Folder) -> Result<(), FsError> {
        let mine = locked(&self.state).take();
        loop {
            // Registered before the state is read, so an fsync that ends in
            // between still wakes this file.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let step = locked(&self.state).step(mine);
            match step {
                Step::Done => return Ok(()),
                Step::Wait => ended.await,
                Step::Run(upto) => {
                    let r = tokio::task::block_in_place(|| folder.sync());
                    locked(&self.state).ended(upto, r.is_ok());
                    self.ended.notify_waiters();
                    return r;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::safe_fs::tests::Scratch;

    #[test]
    fn an_fsync_covers_the_tickets_taken_before_it_started_and_no_later_one() {
        let mut s = State::default();
        let a = s.take();
        let b = s.take();
        assert_eq!(s.step(a), Step::Run(2));
        // Taken while that fsync runs: its rename may be after the fsync began.
        let c = s.take();
        assert_eq!(s.step(b), Step::Wait);
        assert_eq!(s.step(c), Step::Wait);
        s.ended(2, true);
        assert_eq!(s.step(b), Step::Done);
        assert_eq!(s.step(c), Step::Run(3));
        s.ended(3, true);
        assert_eq!(s.step(c), Step::Done);
    }

    #[test]
    fn a_failed_fsync_covers_nobody() {
        let mut s = State::default();
        let a = s.take();
        let b = s.take();
        assert_eq!(s.step(a), Step::Run(2));
        s.ended(2, false);
        // Each file it would have covered runs its own.
        assert_eq!(s.step(b), Step::Run(2));
        s.ended(2, true);
        assert_eq!(s.step(a), Step::Done);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_of_one_folder_share_fsyncs_and_leave_no_entry_behind() {
        let s = Scratch::new("folder-sync");
        let syncs = Arc::new(FolderSyncs::default());
        let root = Arc::new(Folder::root(&s.0, None).expect("root"));
        let mut tasks = Vec::new();
        for i in 0..32 {
            let (syncs, root) = (syncs.clone(), root.clone());
            tasks.push(tokio::spawn(async move {
                // Each file its own descriptor of the folder, as `parent_of` gives.
                let folder = root.parent_of(&["x"], false).expect("folder");
                std::fs::write(folder.path().join(format!("f{i}")), b"x").expect("write");
                syncs.sync(&folder).await
            }));
        }
        for t in tasks {
            t.await.expect("task").expect("sync");
        }
        assert_eq!(syncs.waiting(), 0);
    }
}
