//! A name a case-folding file system would give another spelling.
//!
//! On exFAT, vfat, SMB, ext4 or tmpfs `casefold` folders, `dir` opens the
//! folder `Dir`: a blob `dir/x` fetched after another blob made `Dir/` would
//! land in `Dir/x`, its bytes under a name that is not its own (and, when the
//! blob `Dir/x` exists too, under the other blob's name). Placing never
//! replaces a file, which keeps a leaf apart; a folder is found, not placed,
//! so each component of a new file's path is checked here: where the name and
//! its other-case spelling both answer, the folder is read for the exact
//! name. On a file system that keeps case apart this costs at most two
//! `lstat`s per component and no read (unless both spellings are there).

use std::path::Path;
use std::sync::Mutex;

/// The last folder path found spelled as its blob name: files arrive in
/// name order, so one folder's files are checked once.
#[derive(Default)]
pub struct Spelled(Mutex<String>);

/// The first component of `comps` (below `root`) that is on disk under
/// another spelling: `(its path as the blob spells it, as the disk does)`.
/// Components not there at all are fine (they will be made as spelled).
pub fn misspelled(root: &Path, comps: &[&str], spelled: &Spelled) -> Option<(String, String)> {
    let folder = comps.split_last().map_or(&[][..], |(_, f)| f).join("/");
    let known = spelled.0.lock().map(|k| *k == folder).unwrap_or(false);
    let mut dir = root.to_path_buf();
    for (i, name) in comps.iter().enumerate() {
        let is_folder = i + 1 < comps.len();
        // A folder already found spelled right is not read again.
        let checked = is_folder && known;
        if let Some(found) = (!checked).then(|| other_spelling(&dir, name)).flatten() {
            let wanted = comps[..=i].join("/");
            let mut on_disk: Vec<&str> = comps[..i].to_vec();
            on_disk.push(&found);
            return Some((wanted, on_disk.join("/")));
        }
        dir.push(name);
    }
    if let Ok(mut k) = spelled.0.lock() {
        *k = folder;
    }
    None
}

/// The spelling `name` has in `dir` when the file system answers to `name`
/// with an entry of another spelling; `None` when it is there as spelled,
/// not there, or the file system keeps case apart.
fn other_spelling(dir: &Path, name: &str) -> Option<String> {
    let variant = other_case(name)?;
    // Both spellings answer: the file system folds case (or both names are
    // there). Inode numbers cannot tell which: FUSE file systems may number
    // one entry differently under each name it was looked up by.
    std::fs::symlink_metadata(dir.join(name)).ok()?;
    std::fs::symlink_metadata(dir.join(&variant)).ok()?;
    // Read the folder for the exact name (a stream; nothing of it is kept).
    let folded = name.to_lowercase();
    let mut found = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let n = entry.file_name();
        if n.as_encoded_bytes() == name.as_bytes() {
            return None;
        }
        if found.is_none() {
            found = n
                .to_str()
                .filter(|s| s.to_lowercase() == folded)
                .map(str::to_string);
        }
    }
    Some(found.unwrap_or_else(|| variant.clone()))
}

/// `name` in another case (lower if that changes it, else upper); `None`
/// when it has no cased letter.
fn other_case(name: &str) -> Option<String> {
    let lower = name.to_lowercase();
    if lower != name {
        return Some(lower);
    }
    let upper = name.to_uppercase();
    (upper != name).then_some(upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_system_that_keeps_case_apart_has_no_other_spelling() {
        let d = std::env::temp_dir().join(format!("sync-spelling-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("Dir")).expect("mkdir");
        std::fs::create_dir_all(d.join("dir")).expect("mkdir");
        let spelled = Spelled::default();
        assert_eq!(misspelled(&d, &["Dir", "x"], &spelled), None);
        assert_eq!(misspelled(&d, &["dir", "x"], &spelled), None);
        assert_eq!(misspelled(&d, &["new", "X"], &spelled), None);
        assert_eq!(other_case("123-_"), None);
        assert_eq!(other_case("Ab").as_deref(), Some("ab"));
        assert_eq!(other_case("ab").as_deref(), Some("AB"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
