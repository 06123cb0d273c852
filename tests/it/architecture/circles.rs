//! No circle inside a folder: below a crate's top level (whose order the
//! tables give), the files and folders of one folder import each other in one
//! direction only. A folder's `mod.rs` is the folder itself, not one of its
//! members.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::scan::{Source, references};

/// One import between two members of a folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    /// The folder, from the workspace's root (`relay-client/src/download`).
    pub folder: String,
    /// The importing member (`fetch.rs`, `entra/`) and the imported one.
    pub from: String,
    pub to: String,
    /// Where: the file, its line and the path it names.
    pub file: String,
    pub line: usize,
    pub path: String,
}

/// A file's module path below its crate's source folder: `download/fetch.rs`
/// is `download::fetch`, `download/mod.rs` is `download`.
fn module_path(inner: &Path) -> Vec<String> {
    let mut segments: Vec<String> = inner
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        segments.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segments.pop();
    }
    segments
}

/// The module path a reference names from the module `here`.
fn resolve(prefix: &str, path: &str, here: &[String]) -> Vec<String> {
    let mut segments: Vec<String> = path.split("::").map(String::from).collect();
    match prefix {
        "crate::" => segments,
        "self::" => [here.to_vec(), segments].concat(),
        _ => {
            let mut base = here[..here.len().saturating_sub(1)].to_vec();
            while segments.first().is_some_and(|s| s == "super") {
                segments.remove(0);
                base.pop();
            }
            [base, segments].concat()
        }
    }
}

/// The member of `dir` that `name` is (`name/` or `name.rs`), or `None` for an
/// item of the folder's `mod.rs`.
fn member(dir: &Path, name: &str) -> Option<String> {
    if dir.join(name).is_dir() {
        Some(format!("{name}/"))
    } else if dir.join(format!("{name}.rs")).is_file() {
        Some(format!("{name}.rs"))
    } else {
        None
    }
}

/// Every import between two members of a folder below the crate's top level.
pub fn member_edges(root: &Path, src: &str, sources: &[Source]) -> Vec<Edge> {
    let mut edges = Vec::new();
    for source in sources {
        let Ok(inner) = Path::new(&source.rel).strip_prefix(src) else {
            continue;
        };
        let here = module_path(inner);
        for prefix in ["crate::", "super::", "self::"] {
            for r in references(&source.code, prefix) {
                let target = resolve(prefix, &r.path, &here);
                let common = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
                if common == 0 || common >= here.len() || common >= target.len() {
                    continue;
                }
                let folder = format!("{src}/{}", here[..common].join("/"));
                let dir = root.join(&folder);
                let (Some(from), Some(to)) =
                    (member(&dir, &here[common]), member(&dir, &target[common]))
                else {
                    continue;
                };
                let (file, line, path) =
                    (source.rel.clone(), r.line, format!("{prefix}{}", r.path));
                edges.push(Edge {
                    folder,
                    from,
                    to,
                    file,
                    line,
                    path,
                });
            }
        }
    }
    edges
}

/// The edges that lie on a circle: their target leads back to their source.
pub fn on_circles(edges: &[Edge]) -> Vec<&Edge> {
    let mut next: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        next.entry((&e.folder, &e.from)).or_default().insert(&e.to);
    }
    edges
        .iter()
        .filter(|e| leads_to(&next, &e.folder, &e.to, &e.from))
        .collect()
}

fn leads_to<'a>(
    next: &BTreeMap<(&'a str, &'a str), BTreeSet<&'a str>>,
    folder: &'a str,
    from: &'a str,
    to: &str,
) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(node) = stack.pop() {
        if node == to {
            return true;
        }
        if seen.insert(node) {
            stack.extend(next.get(&(folder, node)).into_iter().flatten().copied());
        }
    }
    false
}

fn edge(from: &str, to: &str) -> Edge {
    Edge {
        folder: "x/src/d".into(),
        from: from.into(),
        to: to.into(),
        file: format!("x/src/d/{from}"),
        line: 1,
        path: String::new(),
    }
}

#[test]
fn only_the_edges_of_a_circle_are_on_one() {
    let edges = [
        edge("a.rs", "b.rs"),
        edge("b.rs", "c.rs"),
        edge("c.rs", "a.rs"),
        edge("c.rs", "d.rs"),
    ];
    let found: Vec<(&str, &str)> = on_circles(&edges)
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    assert_eq!(
        found,
        [("a.rs", "b.rs"), ("b.rs", "c.rs"), ("c.rs", "a.rs")]
    );
    assert!(on_circles(&edges[..2]).is_empty());
}

#[test]
fn super_self_and_crate_paths_resolve_from_the_file() {
    let here: Vec<String> = ["download", "fetch"].map(String::from).to_vec();
    assert_eq!(
        resolve("super::", "direct::Ranges", &here),
        ["download", "direct", "Ranges"]
    );
    assert_eq!(resolve("super::", "super::ui::Bar", &here), ["ui", "Bar"]);
    assert_eq!(
        resolve("self::", "inner", &here),
        ["download", "fetch", "inner"]
    );
    assert_eq!(resolve("crate::", "relay::link", &here), ["relay", "link"]);
    assert_eq!(module_path(Path::new("download/mod.rs")), ["download"]);
    assert_eq!(
        module_path(Path::new("download/fetch.rs")),
        ["download", "fetch"]
    );
}
