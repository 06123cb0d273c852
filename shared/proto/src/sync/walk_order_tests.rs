use std::collections::BTreeMap;

use super::*;

/// A file system in memory: directory path -> its entries, in the order
/// "the file system" gives them.
#[derive(Default)]
pub(crate) struct MemTree {
    pub(crate) dirs: BTreeMap<String, Vec<Child<u64>>>,
    pub(crate) unreadable: Vec<String>,
}

impl MemTree {
    /// A tree holding `files` (paths, `/`-separated), each directory's
    /// entries listed in reverse order of arrival.
    pub(crate) fn of(files: &[&str]) -> Self {
        let mut tree = MemTree::default();
        tree.dirs.insert(String::new(), Vec::new());
        for (i, path) in files.iter().enumerate() {
            tree.add(path, i as u64);
        }
        for children in tree.dirs.values_mut() {
            children.reverse();
        }
        tree
    }

    pub(crate) fn add(&mut self, path: &str, file: u64) {
        let mut dir = String::new();
        let segments: Vec<&str> = path.split('/').collect();
        for (depth, seg) in segments.iter().enumerate() {
            let last = depth + 1 == segments.len();
            let child = if last {
                Child::File {
                    name: seg.to_string(),
                    file,
                }
            } else {
                Child::Dir {
                    name: seg.to_string(),
                }
            };
            let here = self.dirs.entry(dir.clone()).or_default();
            if !here.contains(&child) {
                here.push(child);
            }
            dir = joined(&dir, seg);
        }
    }
}

impl Tree for MemTree {
    type File = u64;

    type Entries = std::vec::IntoIter<Child<u64>>;

    fn read_dir(&mut self, path: &str) -> Result<Self::Entries, String> {
        if self.unreadable.iter().any(|u| u == path) {
            return Err("permission denied".into());
        }
        Ok(self.dirs.get(path).cloned().unwrap_or_default().into_iter())
    }
}

fn names(walk: SortedWalk<MemTree>) -> Vec<Result<String, Gap>> {
    walk.map(|w| w.map(|w| w.name)).collect()
}

#[test]
fn a_directory_comes_after_a_dotted_file_and_before_a_digit() {
    let files = ["a0", "a/x", "a.b", "a/y/z", "a-c", "A", "b"];
    for order in [NameOrder::Utf8, NameOrder::Utf16] {
        let walked = names(SortedWalk::new(MemTree::of(&files), order));
        let walked: Vec<String> = walked.into_iter().map(|n| n.expect("file")).collect();
        assert_eq!(walked, ["A", "a-c", "a.b", "a/x", "a/y/z", "a0", "b"]);
    }
}

#[test]
fn names_beyond_the_basic_plane_follow_the_chosen_order() {
    let files = ["d/\u{FF01}", "d/\u{1F600}", "d/\u{e9}"];
    let walk = |order| -> Vec<String> {
        names(SortedWalk::new(MemTree::of(&files), order))
            .into_iter()
            .map(|n| n.expect("file"))
            .collect()
    };
    assert_eq!(
        walk(NameOrder::Utf8),
        ["d/\u{e9}", "d/\u{FF01}", "d/\u{1F600}"]
    );
    assert_eq!(
        walk(NameOrder::Utf16),
        ["d/\u{e9}", "d/\u{1F600}", "d/\u{FF01}"]
    );
}

#[test]
fn an_unreadable_directory_is_a_gap_and_the_walk_goes_on() {
    let mut tree = MemTree::of(&["a/1", "b/2", "c"]);
    tree.unreadable.push("b".into());
    let walked = names(SortedWalk::new(tree, NameOrder::Utf8));
    assert_eq!(
        walked,
        [
            Ok("a/1".to_string()),
            Err(Gap("b: permission denied".into())),
            Ok("c".to_string()),
        ]
    );
    let mut tree = MemTree::of(&["x"]);
    tree.unreadable.push(String::new());
    let walked = names(SortedWalk::new(tree, NameOrder::Utf8));
    assert_eq!(walked, [Err(Gap(".: permission denied".into()))]);
}

#[test]
fn an_entry_that_cannot_be_walked_is_a_gap() {
    let mut tree = MemTree::of(&["a", "c"]);
    if let Some(root) = tree.dirs.get_mut("") {
        root.push(Child::Failed("b\u{FFFD}: not valid UTF-8".into()));
    }
    let walked = names(SortedWalk::new(tree, NameOrder::Utf8));
    assert!(walked.contains(&Err(Gap("b\u{FFFD}: not valid UTF-8".into()))));
    assert_eq!(walked.iter().filter(|n| n.is_ok()).count(), 2);
}

#[test]
fn the_walk_holds_the_directories_on_its_path_not_the_tree() {
    // 40 folders of 25 files, and one folder deeper down.
    let files: Vec<String> = (0..40)
        .flat_map(|d| (0..25).map(move |f| format!("d{d:02}/f{f:02}")))
        .chain(["d07/deep/x".to_string()])
        .collect();
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    let mut walk = SortedWalk::new(MemTree::of(&refs), NameOrder::Utf16);
    let (mut most, mut count) = (0, 0);
    while let Some(w) = walk.next() {
        w.expect("readable");
        count += 1;
        most = most.max(walk.held());
    }
    assert_eq!(count, files.len());
    // The root's 40 folders, one folder's 26 entries, `deep`'s one.
    assert!(most <= 40 + 26 + 1, "held {most} entries at once");
    assert!(
        most >= 40,
        "held {most}: the root's folders are held throughout"
    );
    assert_eq!(walk.held(), 0);
}
