//! docs/ARCHITECTURE.md's import rules, checked against the code.
//!
//! The section between the `import-rules` markers holds one table per source
//! folder (`relay-server/src`, `relay-client/src`, `shared/*/src`): each top-level
//! module of that folder, and which of its siblings it may name through
//! `crate::` (in `lib.rs` and `main.rs`, a bare `module::` or the library's own
//! name do the same). A table of crates says which `relay_*` crates each may
//! use and which of their modules it must not. A list of known exceptions names
//! the imports that break a rule today, file by file, until the code is mended.
//!
//! The scan reads every non-test source file (skipping `*_tests.rs` and every
//! module or item under `#[cfg(test)]`), with comments and string literals
//! blanked out, and reports each forbidden import with its file and line. An
//! exception that no longer matches any import is reported too, so the list
//! only ever shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

mod circles;
mod scan;

use scan::{Reference, blank, references, sources};

const BEGIN: &str = "<!-- import-rules: begin";
const END: &str = "<!-- import-rules: end";
/// In a folder table's last cell: every module of the rows before this one.
const ROWS_ABOVE: &str = "every row above";

/// The rules of one source folder: each module's key (`name/` for a folder,
/// `name.rs` for a file) and the keys it may import.
#[derive(Debug, Default, PartialEq)]
struct FolderRules {
    src: String,
    may_import: BTreeMap<String, BTreeSet<String>>,
}

/// Which `relay_*` crates one crate may use, and which of their paths not.
#[derive(Debug, PartialEq)]
struct CrateRules {
    ident: String,
    src: String,
    may_use: BTreeSet<String>,
    must_not: Vec<String>,
}

/// An import the rules forbid that the code still makes: the file, and the
/// folder key or `relay_*` path it reaches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Exception {
    file: String,
    target: String,
}

#[derive(Debug, Default, PartialEq)]
struct Rules {
    folders: Vec<FolderRules>,
    crates: Vec<CrateRules>,
    exceptions: Vec<Exception>,
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    None,
    Folder,
    Crates,
    Exceptions,
}

/// The backticked spans of `text`, in order.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim().to_string())
        .collect()
}

/// The cells of a Markdown table row, or `None` for a line that is not a row
/// or is the header's rule.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
    let rule = cells
        .iter()
        .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')));
    (!rule).then_some(cells)
}

/// Reads the marked section of the architecture document.
fn parse_rules(doc: &str) -> Result<Rules, String> {
    let start = doc.find(BEGIN).ok_or(format!("no `{BEGIN}` marker"))?;
    let end = doc.find(END).ok_or(format!("no `{END}` marker"))?;
    if end < start {
        return Err("the end marker comes before the begin marker".into());
    }
    let mut rules = Rules::default();
    let mut part = Part::None;
    let mut header_seen = false;
    for (n, line) in doc[start..end].lines().enumerate().skip(1) {
        let fail = |what: &str| format!("import rules, line {}: {what}: {line}", n + 1);
        if let Some(heading) = line.strip_prefix("#### ") {
            header_seen = false;
            part = start_part(&mut rules, heading)
                .ok_or_else(|| fail("a heading the test does not know"))?;
        } else if part == Part::Exceptions {
            if let Some(item) = line.trim_start().strip_prefix("- ") {
                let exception = exception(item)
                    .ok_or_else(|| fail("an exception names `file` and `target`"))?;
                rules.exceptions.push(exception);
            }
        } else if let Some(row) = cells(line) {
            if part == Part::None || !std::mem::replace(&mut header_seen, true) {
                continue;
            }
            if part == Part::Folder {
                let folder = rules
                    .folders
                    .last_mut()
                    .expect("a table follows its heading");
                folder_row(folder, &row).map_err(fail)?;
            } else {
                rules.crates.push(crate_row(&row).map_err(fail)?);
            }
        }
    }
    check_consistent(&rules)?;
    Ok(rules)
}

/// The part of the section a `####` heading opens (a folder's table is added
/// to `rules`), or `None` for a heading the test does not know.
fn start_part(rules: &mut Rules, heading: &str) -> Option<Part> {
    if heading.contains("exceptions") {
        return Some(Part::Exceptions);
    }
    if heading.starts_with("Crates") {
        return Some(Part::Crates);
    }
    let src = ticked(heading).into_iter().find(|s| s.ends_with("/src"))?;
    rules.folders.push(FolderRules {
        src,
        ..FolderRules::default()
    });
    Some(Part::Folder)
}

/// A list item of known exceptions: its first two backticked names.
fn exception(item: &str) -> Option<Exception> {
    let mut names = ticked(item).into_iter();
    Some(Exception {
        file: names.next()?,
        target: names.next()?,
    })
}

/// One row of a folder's table: its modules (first cell) may import the
/// modules of its last cell, and with [`ROWS_ABOVE`] every module before it.
fn folder_row(folder: &mut FolderRules, row: &[&str]) -> Result<(), &'static str> {
    let keys = ticked(row[0]);
    if keys.is_empty() {
        return Err("the first cell names modules in backticks");
    }
    let last = row[row.len() - 1];
    let mut allowed: BTreeSet<String> = ticked(last).into_iter().collect();
    if last.contains(ROWS_ABOVE) {
        allowed.extend(folder.may_import.keys().cloned());
    }
    for key in keys {
        folder.may_import.insert(key, allowed.clone());
    }
    Ok(())
}

/// One row of the crates' table: crate, source folder, may use, must not use.
fn crate_row(row: &[&str]) -> Result<CrateRules, &'static str> {
    let [name, src, may, must_not] = row else {
        return Err("a crate row has four cells");
    };
    let ident = ticked(name).first().map(|n| n.replace('-', "_"));
    let src = ticked(src).into_iter().next();
    let (Some(ident), Some(src)) = (ident, src) else {
        return Err("a crate row names the crate and its source");
    };
    Ok(CrateRules {
        ident,
        src,
        may_use: ticked(may).into_iter().collect(),
        must_not: ticked(must_not),
    })
}

/// Every module a rule allows is a row of the same table.
fn check_consistent(rules: &Rules) -> Result<(), String> {
    for folder in &rules.folders {
        for (from, allowed) in &folder.may_import {
            if let Some(unknown) = allowed.iter().find(|a| !folder.may_import.contains_key(*a)) {
                return Err(format!(
                    "{}: `{from}` may import `{unknown}`, which is no row of its table",
                    folder.src
                ));
            }
        }
    }
    Ok(())
}

/// The row key of the module a `crate::` path's first segment names: a
/// folder (`name/`), a file (`name.rs`), or else an item of the crate root.
fn key_of(first: &str, modules: &BTreeSet<String>) -> String {
    [format!("{first}/"), format!("{first}.rs")]
        .into_iter()
        .find(|k| modules.contains(k))
        .unwrap_or_else(|| "lib.rs".to_string())
}

/// The folder keys one file's code reaches, with their lines and paths.
fn folder_imports(
    code: &[u8],
    file_key: &str,
    self_crate: &str,
    modules: &BTreeSet<String>,
) -> Vec<(usize, String, String)> {
    let mut refs: Vec<(Reference, String)> = references(code, "crate::")
        .into_iter()
        .map(|r| (r, "crate::".to_string()))
        .collect();
    if matches!(file_key, "lib.rs" | "main.rs") {
        let own = format!("{self_crate}::");
        refs.extend(references(code, &own).into_iter().map(|r| (r, own.clone())));
        for module in modules {
            let name = module.trim_end_matches('/').trim_end_matches(".rs");
            if !matches!(name, "lib" | "main") {
                let bare = format!("{name}::");
                let hits = references(code, &bare).into_iter().map(|r| Reference {
                    path: format!("{name}::{}", r.path),
                    ..r
                });
                refs.extend(hits.map(|r| (r, String::new())));
            }
        }
    }
    let mut out = Vec::new();
    for (r, prefix) in refs {
        let first = r.path.split("::").next().unwrap_or("");
        let target = key_of(first, modules);
        if target != file_key {
            out.push((r.line, target, format!("{prefix}{}", r.path)));
        }
    }
    out
}

/// The top-level modules of a source folder, as row keys.
fn modules_of(src: &Path) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for entry in fs::read_dir(src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        if entry.path().is_dir() {
            keys.insert(format!("{name}/"));
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") {
            keys.insert(name);
        }
    }
    keys
}

/// The name code uses for the crate whose sources are in `src`.
fn crate_ident(root: &Path, src: &str) -> String {
    let manifest =
        fs::read_to_string(root.join(src).with_file_name("Cargo.toml")).unwrap_or_default();
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|l| l.split('"').next())
        .map_or_else(|| src.to_string(), |n| n.replace('-', "_"))
}

/// Whether `path` is `prefix` or lies under it, at a `::` boundary.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with("::"))
}

/// What the scan finds, sorted: an import a known exception names marks the
/// exception used; any other forbidden import is a problem.
struct Verdicts<'a> {
    exceptions: &'a [Exception],
    used: BTreeSet<Exception>,
    problems: Vec<String>,
}

impl Verdicts<'_> {
    fn forbidden(&mut self, file: &str, line: usize, target: &str, what: String) {
        let exception = Exception {
            file: file.to_string(),
            target: target.to_string(),
        };
        if self.exceptions.contains(&exception) {
            self.used.insert(exception);
        } else {
            self.problems.push(format!("{file}:{line}: {what}"));
        }
    }
}

/// Every import that breaks a rule and is no known exception, and every
/// exception that no import needs any more.
fn violations(root: &Path, rules: &Rules) -> Vec<String> {
    let mut verdicts = Verdicts {
        exceptions: &rules.exceptions,
        used: BTreeSet::new(),
        problems: Vec::new(),
    };
    for folder in &rules.folders {
        check_folder(root, folder, &mut verdicts);
        check_circles(root, &folder.src, &mut verdicts);
    }
    for krate in &rules.crates {
        check_crate(root, krate, &rules.crates, &mut verdicts);
    }
    let Verdicts {
        used, mut problems, ..
    } = verdicts;
    for stale in rules.exceptions.iter().filter(|e| !used.contains(*e)) {
        problems.push(format!(
            "known exception `{}` → `{}` is no longer needed (or names no such import): \
             remove it from docs/ARCHITECTURE.md",
            stale.file, stale.target
        ));
    }
    problems
}

/// One folder's table against its modules on disk and their imports.
fn check_folder(root: &Path, folder: &FolderRules, verdicts: &mut Verdicts) {
    let scanned = sources(root, &folder.src);
    // Modules on disk that only tests use need no row.
    let modules: BTreeSet<String> = modules_of(&root.join(&folder.src))
        .into_iter()
        .filter(|m| scanned.iter().any(|s| &s.key == m))
        .collect();
    for module in modules
        .iter()
        .filter(|m| !folder.may_import.contains_key(*m))
    {
        verdicts.problems.push(format!(
            "{}: `{module}` has no row in docs/ARCHITECTURE.md's import rules",
            folder.src
        ));
    }
    for key in folder.may_import.keys().filter(|k| !modules.contains(*k)) {
        verdicts.problems.push(format!(
            "{}: the import rules name `{key}`, which is not there",
            folder.src
        ));
    }
    let ident = crate_ident(root, &folder.src);
    for source in scanned {
        let allowed = folder
            .may_import
            .get(&source.key)
            .cloned()
            .unwrap_or_default();
        for (line, target, path) in folder_imports(&source.code, &source.key, &ident, &modules) {
            if !allowed.contains(&target) {
                let what = format!(
                    "`{}` imports `{target}` (`{path}`), which it may not (it may import: {allowed:?})",
                    source.key
                );
                verdicts.forbidden(&source.rel, line, &target, what);
            }
        }
    }
}

/// No circle inside a folder below the top level. An exception names one
/// import of a circle (the file and the member it imports); the circles left
/// once the exceptions' imports are set aside are problems, and an exception
/// whose import lies on no circle is stale.
fn check_circles(root: &Path, src: &str, verdicts: &mut Verdicts) {
    let edges = circles::member_edges(root, src, &sources(root, src));
    let exception_of = |e: &circles::Edge| Exception {
        file: e.file.clone(),
        target: e.to.clone(),
    };
    for e in circles::on_circles(&edges) {
        let exception = exception_of(e);
        if verdicts.exceptions.contains(&exception) {
            verdicts.used.insert(exception);
        }
    }
    let kept: Vec<circles::Edge> = edges
        .iter()
        .filter(|e| !verdicts.exceptions.contains(&exception_of(e)))
        .cloned()
        .collect();
    for e in circles::on_circles(&kept) {
        verdicts.problems.push(format!(
            "{}:{}: `{}` imports `{}` (`{}`), and `{}` leads back to `{}`: a circle inside `{}/`",
            e.file, e.line, e.from, e.to, e.path, e.to, e.from, e.folder
        ));
    }
}

/// One crate's `relay_*` paths against the crates' table.
fn check_crate(root: &Path, krate: &CrateRules, crates: &[CrateRules], verdicts: &mut Verdicts) {
    for source in sources(root, &krate.src) {
        for other in crates.iter().filter(|c| c.ident != krate.ident) {
            for r in references(&source.code, &format!("{}::", other.ident)) {
                let path = format!("{}::{}", other.ident, r.path);
                if !krate.may_use.contains(&other.ident) {
                    let what = format!(
                        "`{}` uses `{path}`; it may use only {:?}",
                        krate.ident, krate.may_use
                    );
                    verdicts.forbidden(&source.rel, r.line, &other.ident, what);
                } else if let Some(banned) = krate.must_not.iter().find(|b| under(&path, b)) {
                    let what = format!(
                        "`{}` uses `{path}`, under `{banned}`, which it must not",
                        krate.ident
                    );
                    verdicts.forbidden(&source.rel, r.line, banned, what);
                }
            }
        }
    }
}

#[test]
fn the_code_keeps_the_documented_import_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let doc = fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let rules = parse_rules(&doc).unwrap_or_else(|e| panic!("docs/ARCHITECTURE.md: {e}"));
    assert!(
        rules.folders.len() >= 6,
        "a table for each binary and shared crate: {:?}",
        rules.folders.iter().map(|f| &f.src).collect::<Vec<_>>()
    );
    assert!(rules.crates.len() >= 6, "a row for each crate");
    let problems = violations(root, &rules);
    assert!(
        problems.is_empty(),
        "imports that break docs/ARCHITECTURE.md's rules:\n{}",
        problems.join("\n")
    );
}

const SAMPLE: &str = "\
intro
<!-- import-rules: begin (read by tests/it/architecture.rs) -->
#### `app/src`
| module | role | may import |
| --- | --- | --- |
| `main.rs` | top | `cli/`, `ui/` |
| `cli/` | flags | `ui/` |
| `ui/` | output | nothing |
| `lib.rs`, `bin.rs` | roots | every row above, and `extra/` |
| `extra/` | more | nothing |

#### Crates
| crate | source | may use | must not use |
| --- | --- | --- | --- |
| `relay-storage` | `shared/storage/src` | `relay_proto` | `relay_proto::protocol` |

#### Known exceptions
- `app/src/ui/bar.rs` → `cli/`: the bar reads a flag
<!-- import-rules: end -->
outro
";

#[test]
fn parses_folder_tables_crates_and_exceptions() {
    let rules = parse_rules(SAMPLE).expect("the sample parses");
    assert_eq!(rules.folders.len(), 1);
    let app = &rules.folders[0];
    assert_eq!(app.src, "app/src");
    assert_eq!(
        app.may_import["main.rs"],
        BTreeSet::from(["cli/".to_string(), "ui/".to_string()])
    );
    assert!(app.may_import["ui/"].is_empty());
    let below = BTreeSet::from(["main.rs", "cli/", "ui/", "extra/"].map(String::from));
    assert_eq!(app.may_import["lib.rs"], below);
    assert_eq!(app.may_import["bin.rs"], below);
    assert_eq!(
        rules.crates,
        vec![CrateRules {
            ident: "relay_storage".into(),
            src: "shared/storage/src".into(),
            may_use: BTreeSet::from(["relay_proto".to_string()]),
            must_not: vec!["relay_proto::protocol".into()],
        }]
    );
    assert_eq!(
        rules.exceptions,
        vec![Exception {
            file: "app/src/ui/bar.rs".into(),
            target: "cli/".into()
        }]
    );
}

#[test]
fn refuses_a_rule_naming_no_row_and_a_missing_section() {
    let typo = SAMPLE.replace("`cli/`, `ui/` |", "`cli/`, `iu/` |");
    assert!(parse_rules(&typo).unwrap_err().contains("`iu/`"));
    assert!(
        parse_rules("no section here")
            .unwrap_err()
            .contains("marker")
    );
    let odd = SAMPLE.replace("#### Crates", "#### Something else");
    assert!(parse_rules(&odd).unwrap_err().contains("heading"));
}

/// One import as `folder_imports` reports it.
fn hit(line: usize, target: &str, path: &str) -> (usize, String, String) {
    (line, target.to_string(), path.to_string())
}

#[test]
fn names_the_file_line_and_target_of_a_forbidden_import() {
    let modules = BTreeSet::from(["cli/", "ui/", "lib.rs"].map(String::from));
    let code = blank("use crate::ui::Bar;\nuse crate::cli::Args;\nuse crate::Config;\n");
    let found = folder_imports(&code, "ui/", "app", &modules);
    let expected = [
        hit(2, "cli/", "crate::cli::Args"),
        hit(3, "lib.rs", "crate::Config"),
    ];
    assert_eq!(found, expected);
    let root_code = blank("pub mod cli;\nuse cli::Args;\nfn m() { app::ui::show(); }\n");
    let from_root = folder_imports(&root_code, "lib.rs", "app", &modules);
    let expected = [hit(3, "ui/", "app::ui::show"), hit(2, "cli/", "cli::Args")];
    assert_eq!(from_root, expected);
}

#[test]
fn a_path_under_a_banned_module_is_caught_at_a_segment_boundary() {
    assert!(under(
        "relay_proto::protocol::Check",
        "relay_proto::protocol"
    ));
    assert!(under("relay_proto::protocol", "relay_proto::protocol"));
    assert!(!under("relay_proto::protocols", "relay_proto::protocol"));
    assert!(!under("relay_proto::plan", "relay_proto::protocol"));
}
