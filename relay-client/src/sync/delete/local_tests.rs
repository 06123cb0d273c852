//! Local deletes on real files: every guard, with a sentinel tree outside
//! DEST hashed before and after to show nothing there was touched.
use super::*;
use crate::download::safe_fs::tests::Scratch;
use crate::index::Record;
use sha2::Digest;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::PathBuf;

/// DEST, a sentinel tree beside it (`outside/`), and a real index.
pub(crate) struct Fixture {
    pub s: Scratch,
    pub dest: PathBuf,
    pub outside: PathBuf,
    pub index: Index,
}

impl Fixture {
    pub fn new(tag: &str) -> Self {
        let s = Scratch::new(tag);
        let dest = s.0.join("dest");
        let outside = s.0.join("outside");
        for (name, body) in [
            ("secret.txt", "keep me"),
            ("d/f.txt", "not DEST's"),
            ("sub/x.txt", "not DEST's either"),
        ] {
            let p = outside.join(name);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, body).expect("sentinel");
        }
        std::fs::create_dir_all(&dest).expect("dest");
        let index = Index::open(&s.0.join("state/index.sqlite")).expect("index");
        Self {
            s,
            dest,
            outside,
            index,
        }
    }

    /// A file under DEST that this machine did not place.
    pub fn unknown(&self, name: &str, body: &str) -> PathBuf {
        let p = self.dest.join(name);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, body).expect("write");
        p
    }

    /// A file under DEST recorded in the index as placed, as a download does.
    pub fn place(&self, name: &str, body: &str) -> PathBuf {
        let p = self.unknown(name, body);
        let m = std::fs::symlink_metadata(&p).expect("stat");
        let stat = FileStat {
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
            dev: m.dev(),
        };
        let record = Record {
            path: name.into(),
            container: "c".into(),
            blob: format!("p/{name}"),
            etag: "\"0x1\"".into(),
            last_modified: None,
            stat,
            sha256: hex::encode(sha2::Sha256::digest(body)),
        };
        self.index.put(&record).expect("record");
        p
    }

    /// `name`'s `stat` as the walk records it (`sync::tree::file_stat`, the
    /// walk's own function), or a made-up one where no file is: the seam
    /// between the walk and the delete, so a test may change the file in
    /// between.
    pub fn walked(&self, name: &str) -> entry::FileStat {
        match std::fs::symlink_metadata(self.dest.join(name)) {
            Ok(m) => crate::sync::tree::file_stat(&m),
            Err(_) => entry::FileStat {
                size: 0,
                mtime_ns: 0,
                identity: None,
            },
        }
    }

    pub fn outside_hash(&self) -> String {
        hash_tree(&self.outside)
    }
}

/// A hash of a tree's names, kinds, contents and link targets, never
/// following a link.
pub(crate) fn hash_tree(root: &Path) -> String {
    let mut h = sha2::Sha256::new();
    for e in walkdir::WalkDir::new(root).sort_by_file_name() {
        let e = e.expect("walk");
        let rel = e.path().strip_prefix(root).expect("below");
        h.update(rel.as_os_str().as_encoded_bytes());
        let kind = e.file_type();
        if kind.is_symlink() {
            let to = std::fs::read_link(e.path()).expect("link");
            h.update(b"L");
            h.update(to.as_os_str().as_encoded_bytes());
        } else if kind.is_file() {
            h.update(b"F");
            h.update(std::fs::read(e.path()).expect("read"));
        } else {
            h.update(b"D");
        }
    }
    hex::encode(h.finalize())
}

fn deleter(f: &Fixture) -> LocalDeleter<'_> {
    LocalDeleter::open(&f.dest, &f.index).expect("open DEST")
}

#[test]
fn a_placed_file_is_deleted_and_its_record_forgotten() {
    let f = Fixture::new("del-placed");
    let p = f.place("a/b/c.txt", "hello");
    let before = f.outside_hash();
    let out = deleter(&f)
        .delete("a/b/c.txt", Origin::Placed, &f.walked("a/b/c.txt"))
        .expect("delete");
    assert_eq!(out, LocalOutcome::Deleted);
    assert!(!p.exists());
    assert!(f.index.get("a/b/c.txt").expect("get").is_none());
    assert_eq!(f.outside_hash(), before);
}

#[test]
fn a_file_changed_since_placed_is_kept() {
    let f = Fixture::new("del-changed");
    let p = f.place("c.txt", "hello");
    std::fs::write(&p, "someone's work").expect("edit");
    let out = deleter(&f)
        .delete("c.txt", Origin::Placed, &f.walked("c.txt"))
        .expect("delete");
    assert!(matches!(out, LocalOutcome::Kept(_)), "{out:?}");
    assert_eq!(std::fs::read_to_string(&p).expect("read"), "someone's work");
}

#[test]
fn a_placed_file_the_index_forgot_is_kept() {
    let f = Fixture::new("del-forgot");
    let p = f.place("c.txt", "hello");
    f.index.forget("c.txt").expect("forget");
    let out = deleter(&f)
        .delete("c.txt", Origin::Placed, &f.walked("c.txt"))
        .expect("delete");
    assert!(matches!(out, LocalOutcome::Kept(_)), "{out:?}");
    assert!(p.exists());
}

#[test]
fn an_unknown_file_is_deleted_when_admitted() {
    // The set admits it only with --delete-unknown (carry_out's tests).
    let f = Fixture::new("del-unknown");
    let p = f.unknown("u.txt", "theirs");
    let out = deleter(&f)
        .delete("u.txt", Origin::Unknown, &f.walked("u.txt"))
        .expect("delete");
    assert_eq!(out, LocalOutcome::Deleted);
    assert!(!p.exists());
}

#[test]
fn a_symbolic_link_at_the_leaf_is_kept_and_not_followed() {
    let f = Fixture::new("del-leaf-link");
    let p = f.place("a.txt", "mine");
    let before = f.outside_hash();
    std::fs::remove_file(&p).expect("rm");
    symlink(f.outside.join("secret.txt"), &p).expect("link");
    for origin in [Origin::Placed, Origin::Unknown] {
        let out = deleter(&f)
            .delete("a.txt", origin, &f.walked("a.txt"))
            .expect("delete");
        assert!(matches!(out, LocalOutcome::Kept(_)), "{out:?}");
    }
    assert!(std::fs::symlink_metadata(&p).expect("link").is_symlink());
    assert_eq!(f.outside_hash(), before);
}

#[test]
fn a_symbolic_link_in_a_middle_component_is_refused() {
    let f = Fixture::new("del-mid-link");
    f.place("sub/x.txt", "mine");
    let before = f.outside_hash();
    std::fs::rename(f.dest.join("sub"), f.dest.join("sub.real")).expect("mv");
    symlink(f.outside.join("sub"), f.dest.join("sub")).expect("link");
    for origin in [Origin::Placed, Origin::Unknown] {
        let err = deleter(&f)
            .delete("sub/x.txt", origin, &f.walked("sub/x.txt"))
            .expect_err("refused");
        assert!(
            matches!(err, LocalDeleteError::Fs(FsError::Symlink { .. })),
            "{err}"
        );
    }
    assert!(f.dest.join("sub.real/x.txt").exists());
    assert_eq!(f.outside_hash(), before);
}

#[test]
fn names_that_are_not_plain_and_relative_are_refused() {
    let f = Fixture::new("del-names");
    f.unknown("a/b.txt", "x");
    let before = f.outside_hash();
    let secret = f.outside.join("secret.txt").display().to_string();
    let names = [
        "",
        "/etc/passwd",
        secret.as_str(),
        "..",
        "../outside/secret.txt",
        "a/../../outside/secret.txt",
        "a/..",
        "./a/b.txt",
        "a/./b.txt",
        "a//b.txt",
        "a/b.txt/",
        "a/b\0.txt",
    ];
    for name in names {
        assert_eq!(components(name), None, "{name:?}");
        let err = deleter(&f)
            .delete(name, Origin::Unknown, &f.walked("a/b.txt"))
            .expect_err(name);
        assert!(
            matches!(err, LocalDeleteError::BadName { .. }),
            "{name:?}: {err}"
        );
    }
    assert_eq!(components("a/b.txt"), Some(vec!["a", "b.txt"]));
    assert!(f.dest.join("a/b.txt").exists());
    assert_eq!(f.outside_hash(), before);
}

#[test]
fn what_is_gone_or_not_a_file_is_left_alone() {
    let f = Fixture::new("del-shapes");
    f.place("file", "x");
    std::fs::create_dir_all(f.dest.join("folder/inner")).expect("mkdir");
    let fifo =
        std::ffi::CString::new(f.dest.join("fifo").as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid path string; the result is checked.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let d = deleter(&f);
    assert_eq!(
        d.delete("gone", Origin::Placed, &f.walked("gone"))
            .expect("gone"),
        LocalOutcome::AlreadyGone
    );
    assert_eq!(
        d.delete("no/such/x", Origin::Placed, &f.walked("no/such/x"))
            .expect("gone"),
        LocalOutcome::AlreadyGone
    );
    assert_eq!(
        d.delete("file/x", Origin::Placed, &f.walked("file/x"))
            .expect("gone"),
        LocalOutcome::AlreadyGone
    );
    for name in ["folder", "fifo"] {
        let out = d
            .delete(name, Origin::Unknown, &f.walked(name))
            .expect(name);
        assert!(matches!(out, LocalOutcome::Kept(_)), "{name}: {out:?}");
    }
    assert!(f.dest.join("folder/inner").is_dir());
    assert!(f.dest.join("fifo").exists());
    assert!(d.delete("..", Origin::Unknown, &f.walked("file")).is_err());
    assert!(LocalDeleter::open(&f.dest.join("file"), &f.index).is_err());
    assert!(LocalDeleter::open(&f.dest.join("missing"), &f.index).is_err());
    assert!(!f.dest.join("missing").exists());
}

/// Another process swaps a folder on the path for a link to outside DEST
/// while the delete runs, over and over: whatever the interleaving, the
/// delete either removes DEST's own file or refuses, and the tree outside
/// is untouched. `Unknown` origin: no `stat` check, only the descriptors
/// guard (the attacker's best case). 40 rounds.
#[test]
fn a_folder_swapped_for_a_link_during_the_delete_never_leads_outside() {
    let f = Fixture::new("del-race");
    let before = f.outside_hash();
    let (d_path, real, link_to) = (f.dest.join("d"), f.dest.join("d.real"), f.outside.join("d"));
    for round in 0..40 {
        f.unknown("d/f.txt", "DEST's own");
        let walked = f.walked("d/f.txt");
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let swapper = {
            let (d_path, real, link_to, start) =
                (d_path.clone(), real.clone(), link_to.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..50 {
                    std::fs::rename(&d_path, &real).expect("aside");
                    symlink(&link_to, &d_path).expect("link");
                    std::thread::yield_now();
                    std::fs::remove_file(&d_path).expect("unlink");
                    std::fs::rename(&real, &d_path).expect("back");
                }
            })
        };
        start.wait();
        let d = deleter(&f);
        let mut outcomes = Vec::new();
        for _ in 0..20 {
            outcomes.push(d.delete("d/f.txt", Origin::Unknown, &walked));
        }
        swapper.join().expect("swapper");
        for out in &outcomes {
            match out {
                Ok(LocalOutcome::Deleted | LocalOutcome::AlreadyGone) => {}
                // Refused on the way (a link met, or what was there a
                // moment later named as the refusal): never followed.
                Err(LocalDeleteError::Fs(_)) => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert!(d_path.is_dir() && !d_path.is_symlink(), "round {round}");
        assert_eq!(f.outside_hash(), before, "round {round}");
    }
}

fn strays(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".relay-deleting-"))
        .collect()
}

fn seen(folder: &Folder, leaf: &str) -> Stat {
    match folder.entry(leaf).expect("entry") {
        Entry::File(stat) => stat,
        other => panic!("{leaf}: {other:?}"),
    }
}

/// The window between the last check and the unlink: a file saved over
/// (a new inode at the name) or written in place after the check is put
/// back under its name, whole, and nothing is left aside.
#[test]
fn a_file_replaced_after_the_last_check_is_put_back_not_deleted() {
    let f = Fixture::new("del-window");
    let root = Folder::root(&f.dest, None).expect("root");

    let p = f.unknown("saved.txt", "old");
    let before = seen(&root, "saved.txt");
    std::fs::write(f.dest.join("new.tmp"), "saved by an editor").expect("tmp");
    std::fs::rename(f.dest.join("new.tmp"), &p).expect("save over");
    let out = unlink_if_still(&root, "saved.txt", &before).expect("unlink");
    assert!(matches!(out, LocalOutcome::Kept(_)), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&p).expect("read"),
        "saved by an editor"
    );

    let q = f.unknown("edited.txt", "old");
    let before = seen(&root, "edited.txt");
    std::fs::write(&q, "edited in place, longer").expect("edit");
    let out = unlink_if_still(&root, "edited.txt", &before).expect("unlink");
    assert!(matches!(out, LocalOutcome::Kept(_)), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&q).expect("read"),
        "edited in place, longer"
    );

    let r = f.unknown("same.txt", "old");
    let before = seen(&root, "same.txt");
    assert_eq!(
        unlink_if_still(&root, "same.txt", &before).expect("unlink"),
        LocalOutcome::Deleted
    );
    assert!(!r.exists());
    assert_eq!(
        unlink_if_still(&root, "same.txt", &before).expect("gone"),
        LocalOutcome::AlreadyGone
    );
    assert!(strays(&f.dest).is_empty(), "{:?}", strays(&f.dest));
}

/// Writes `body` over `p` in place and puts its modification time back to
/// the walk's, again until the change time has moved on (the clock's tick):
/// then only the change time tells the edit.
fn edit_keeping_size_and_time(p: &Path, walked: &entry::FileStat) {
    let ctime = |p: &Path| crate::sync::tree::file_stat(&std::fs::metadata(p).expect("stat"));
    let walked_ctime = walked.identity.map(|i| i.ctime_ns);
    loop {
        std::fs::write(p, "WALKED").expect("edit");
        set_mtime(p, walked.mtime_ns);
        if ctime(p).identity.map(|i| i.ctime_ns) != walked_ctime {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Saves a new file over `p` (an editor's write-and-rename) with the same
/// size and modification time: only the inode tells.
fn save_over_keeping_size_and_time(p: &Path, walked: &entry::FileStat) {
    let tmp = p.with_extension("saving");
    std::fs::write(&tmp, "WALKED").expect("new file");
    set_mtime(&tmp, walked.mtime_ns);
    std::fs::rename(&tmp, p).expect("save over");
}

fn edit_longer(p: &Path, _: &entry::FileStat) {
    std::fs::write(p, "walked, then edited").expect("edit");
}

fn set_mtime(p: &Path, mtime_ns: i64) {
    let at = std::time::UNIX_EPOCH
        + std::time::Duration::from_nanos(u64::try_from(mtime_ns).expect("after 1970"));
    let file = std::fs::File::options().write(true).open(p).expect("open");
    file.set_modified(at).expect("mtime");
}

/// The seam between the walk and the delete: a file the walk saw and that
/// was then edited or saved over is kept, with its reason, whatever its
/// origin (with `--delete-unknown` nothing else would stop an unknown one),
/// and whatever the edit: longer; the same size with its modification time
/// put back (the change time tells); a new file saved over it with the same
/// size and time (the inode tells). The same files, not edited, are deleted.
#[test]
fn a_file_edited_after_the_walk_is_kept_whatever_its_origin() {
    type Edit = fn(&Path, &entry::FileStat);
    let f = Fixture::new("del-after-walk");
    let edits: [(&str, Edit); 3] = [
        ("longer", edit_longer),
        ("same-size-and-time", edit_keeping_size_and_time),
        ("saved-over", save_over_keeping_size_and_time),
    ];
    let origins = [Origin::Placed, Origin::ChangedSincePlaced, Origin::Unknown];
    for (o, origin) in origins.into_iter().enumerate() {
        for (how, edit) in edits {
            let name = format!("{o}/{how}.txt");
            let p = match origin {
                Origin::Placed => f.place(&name, "walked"),
                _ => f.unknown(&name, "walked"),
            };
            let walked = f.walked(&name);
            edit(&p, &walked);
            let out = deleter(&f).delete(&name, origin, &walked).expect("delete");
            let want = LocalOutcome::Kept(CHANGED_SINCE_WALK.to_string());
            assert_eq!(out, want, "{name}");
            // The edit is what is there: kept, not put back from aside.
            assert_ne!(std::fs::read_to_string(&p).expect("kept"), "walked");

            let name = format!("{o}/{how}.untouched");
            let q = f.unknown(&name, "walked");
            let out = deleter(&f)
                .delete(&name, Origin::Unknown, &f.walked(&name))
                .expect("delete");
            assert_eq!(out, LocalOutcome::Deleted, "{name}");
            assert!(!q.exists());
        }
    }
    assert!(strays(&f.dest).is_empty());
}
