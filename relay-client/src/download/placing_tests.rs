//! Placing on a real folder: a free name, a file that appeared, the version
//! compared, and a version that is not the one compared.

use super::*;
use crate::download::safe_fs::tests::Scratch;

fn folder(s: &Scratch) -> Folder {
    Folder::root(&s.0, None).expect("root")
}

fn seen(dir: &Folder, name: &str) -> Stat {
    match dir.entry(name).expect("entry") {
        Entry::File(st) => st,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_free_name_is_taken_and_a_taken_one_is_never_replaced() {
    let s = Scratch::new("noreplace");
    let dir = folder(&s);
    std::fs::write(s.0.join(".p"), b"verified").expect("partial");
    assert_eq!(without_replacing(&dir, ".p", "f").expect("place"), Ok(()));
    assert_eq!(std::fs::read(s.0.join("f")).expect("f"), b"verified");
    assert!(!s.0.join(".p").exists());

    std::fs::write(s.0.join(".q"), b"verified").expect("partial");
    std::fs::write(s.0.join("g"), b"appeared").expect("g");
    assert_eq!(
        without_replacing(&dir, ".q", "g").expect("place"),
        Err(Refused::Appeared)
    );
    assert_eq!(std::fs::read(s.0.join("g")).expect("g"), b"appeared");
    assert!(
        s.0.join(".q").exists(),
        "the caller decides what to do with it"
    );
}

#[test]
fn only_the_version_compared_is_replaced() {
    let s = Scratch::new("exchange");
    let dir = folder(&s);
    // The version compared: replaced, and nothing of it is left.
    std::fs::write(s.0.join("f"), b"old").expect("f");
    let v = seen(&dir, "f");
    std::fs::write(s.0.join(".p"), b"new").expect("partial");
    assert_eq!(replacing(&dir, ".p", "f", &v).expect("place"), Ok(()));
    assert_eq!(std::fs::read(s.0.join("f")).expect("f"), b"new");
    assert!(!s.0.join(".p").exists());

    // Another version saved over it meanwhile (a new inode, as editors
    // save): kept, and the partial file stays with the caller.
    std::fs::write(s.0.join("g"), b"old").expect("g");
    let v = seen(&dir, "g");
    std::fs::write(s.0.join("g.tmp"), b"saved meanwhile").expect("tmp");
    std::fs::rename(s.0.join("g.tmp"), s.0.join("g")).expect("save");
    std::fs::write(s.0.join(".q"), b"new").expect("partial");
    assert_eq!(
        replacing(&dir, ".q", "g", &v).expect("place"),
        Err(Refused::Changed)
    );
    assert_eq!(std::fs::read(s.0.join("g")).expect("g"), b"saved meanwhile");
    assert_eq!(std::fs::read(s.0.join(".q")).expect("q"), b"new");

    // The same inode written in place (its time moves): kept too.
    std::fs::write(s.0.join("h"), b"old").expect("h");
    let v = seen(&dir, "h");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(s.0.join("h"))
        .expect("open");
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(7))
        .expect("touch");
    drop(f);
    std::fs::write(s.0.join(".r"), b"new").expect("partial");
    assert_eq!(
        replacing(&dir, ".r", "h", &v).expect("place"),
        Err(Refused::Changed)
    );
    assert_eq!(std::fs::read(s.0.join("h")).expect("h"), b"old");

    // Removed meanwhile: the free name is taken.
    std::fs::write(s.0.join("i"), b"old").expect("i");
    let v = seen(&dir, "i");
    std::fs::remove_file(s.0.join("i")).expect("rm");
    std::fs::write(s.0.join(".s"), b"new").expect("partial");
    assert_eq!(replacing(&dir, ".s", "i", &v).expect("place"), Ok(()));
    assert_eq!(std::fs::read(s.0.join("i")).expect("i"), b"new");
}
