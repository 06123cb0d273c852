//! Folders and files under a real destination: links planted inside it,
//! files and folders in each other's way, FIFOs, unwritable folders, and
//! the partial file's one writer.
use super::*;
use std::io::{Read, Write};
use std::os::unix::fs::symlink;

/// A fresh folder under the system's temporary directory, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "relay-dl-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&p).expect("scratch dir");
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(f: &Folder, comps: &[&str], body: &[u8]) -> Result<(), FsError> {
    let parent = f.parent_of(comps, true)?;
    let leaf = comps.last().copied().unwrap_or_default();
    if parent.entry(leaf)? == Entry::Folder {
        return Err(FsError::FolderInTheWay {
            path: parent.path().join(leaf).display().to_string(),
        });
    }
    let tmp = format!(".{leaf}.relay-partial");
    let mut file = parent.open_file(&tmp, true)?;
    file.write_all(body).expect("write");
    parent.rename(&tmp, leaf)
}

#[test]
fn creates_folders_and_files_under_the_root() {
    let s = Scratch::new("create");
    let root = Folder::root(&s.0.join("dest/deeper"), None).expect("root");
    write(&root, &["a", "b", "c.txt"], b"hello").expect("write");
    let got = std::fs::read(s.0.join("dest/deeper/a/b/c.txt")).expect("read");
    assert_eq!(got, b"hello");
    assert!(!s.0.join("dest/deeper/a/b/.c.txt.relay-partial").exists());
    assert!(root.name_max() >= 14);
    let mut back = String::new();
    root.parent_of(&["a", "b", "c.txt"], false)
        .expect("parent")
        .open_file("c.txt", false)
        .expect("open")
        .read_to_string(&mut back)
        .expect("read");
    assert_eq!(back, "hello");
}

#[test]
fn a_symlinked_folder_inside_the_root_is_not_followed() {
    let s = Scratch::new("link");
    let outside = s.0.join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    let dest = s.0.join("dest");
    std::fs::create_dir_all(&dest).expect("dest");
    symlink(&outside, dest.join("sub")).expect("symlink");
    let root = Folder::root(&dest, None).expect("root");
    let e = write(&root, &["sub", "x"], b"evil").expect_err("refused");
    assert!(matches!(e, FsError::Symlink { .. }), "{e:?}");
    assert!(e.to_string().contains("symbolic link"));
    assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
    // Deeper too: a link two levels down.
    std::fs::create_dir_all(dest.join("a")).expect("a");
    symlink(&outside, dest.join("a/b")).expect("symlink");
    assert!(matches!(
        write(&root, &["a", "b", "c", "x"], b"evil"),
        Err(FsError::Symlink { .. })
    ));
    assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
}

#[test]
fn a_symlink_at_the_file_name_is_not_written_through() {
    let s = Scratch::new("leaf");
    let target = s.0.join("target");
    std::fs::write(&target, b"precious").expect("target");
    let dest = s.0.join("dest");
    std::fs::create_dir_all(&dest).expect("dest");
    symlink(&target, dest.join("f")).expect("symlink");
    let root = Folder::root(&dest, None).expect("root");
    assert_eq!(root.entry("f").expect("entry"), Entry::Symlink);
    assert!(matches!(
        root.open_file("f", true),
        Err(FsError::Symlink { .. })
    ));
    assert!(matches!(
        root.open_file("f", false),
        Err(FsError::Symlink { .. })
    ));
    // A partial name planted as a link is refused too.
    symlink(&target, dest.join(".g.relay-partial")).expect("symlink");
    assert!(matches!(
        root.open_file(".g.relay-partial", true),
        Err(FsError::Symlink { .. })
    ));
    assert_eq!(std::fs::read(&target).expect("read"), b"precious");
}

#[test]
fn a_file_beside_a_folder_of_the_same_name_fails_only_the_one_that_cannot_be_placed() {
    // `x` first, then `x/y`: x/y fails, x is kept.
    let s = Scratch::new("xy");
    let root = Folder::root(&s.0, None).expect("root");
    write(&root, &["x"], b"file").expect("x");
    let e = write(&root, &["x", "y"], b"nested").expect_err("x/y");
    assert!(matches!(e, FsError::FileInTheWay { .. }), "{e:?}");
    assert_eq!(std::fs::read(s.0.join("x")).expect("x"), b"file");
    // `p/q` first, then `p`: p fails, p/q is kept.
    write(&root, &["p", "q"], b"nested").expect("p/q");
    let e = write(&root, &["p"], b"file").expect_err("p");
    assert!(matches!(e, FsError::FolderInTheWay { .. }), "{e:?}");
    assert_eq!(std::fs::read(s.0.join("p/q")).expect("p/q"), b"nested");
}

#[test]
fn fifos_are_refused_without_blocking() {
    let s = Scratch::new("fifo");
    let c = CString::new(s.0.join("pipe").as_os_str().as_encoded_bytes()).expect("c");
    // SAFETY: a valid path; the result is checked.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let root = Folder::root(&s.0, None).expect("root");
    assert_eq!(root.entry("pipe").expect("entry"), Entry::Other);
    assert!(matches!(
        root.open_file("pipe", false),
        Err(FsError::Special { .. })
    ));
    assert!(matches!(
        root.child("pipe", true),
        Err(FsError::Special { .. })
    ));
}

#[test]
fn an_unwritable_destination_is_a_clear_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: root writes through any mode bits");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new("ro");
    let ro = s.0.join("ro");
    std::fs::create_dir_all(&ro).expect("ro");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let root = Folder::root(&ro, None).expect("root");
    let e = write(&root, &["a", "b"], b"x").expect_err("refused");
    assert!(matches!(e, FsError::Permission { .. }), "{e:?}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}
