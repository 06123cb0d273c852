//! Every test the docs cite exists: README.md and every Markdown file under
//! docs/ name tests by their file (`tests/it/hostile/budget.rs`), by file and
//! function (`tests/it/upload/resume.rs::forged_ids_...`, or a bare
//! `budget.rs::one_token_...`), by folder (`tests/it/watch/`), or by the
//! command that runs them (`cargo test -p relay-tests --test it watch::scale`).
//! A file, function, folder, test target or module that moved or went away
//! fails here, naming the doc and what it cites.

use std::path::{Path, PathBuf};

/// One thing a doc cites, as the doc spells it.
#[derive(Debug, PartialEq)]
enum Citation {
    /// A path from the repository's root, with the function after `::`.
    Path {
        path: String,
        function: Option<String>,
    },
    /// A file by its name alone, and a function in it.
    Bare { file: String, function: String },
    /// `cargo test -p PACKAGE --test TARGET [FILTER]`.
    Command {
        package: String,
        target: String,
        filter: Option<String>,
    },
}

/// The words of a doc: what may be part of a path, a function or a flag,
/// split on everything else (spaces, backticks, brackets, commas), with the
/// punctuation that ends a sentence taken off.
fn words(text: &str) -> Vec<&str> {
    let part = |c: char| c.is_ascii_alphanumeric() || "_/.:-*".contains(c);
    text.split(|c: char| !part(c))
        .map(|w| w.trim_end_matches(['.', ':', ',']))
        .filter(|w| !w.is_empty())
        .collect()
}

/// `name` when it is a Rust identifier (a function a doc names).
fn identifier(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    ok.then(|| name.to_string())
}

/// A word that cites a test file, folder or function.
fn cited_test(word: &str) -> Option<Citation> {
    if word.starts_with("tests/") {
        let (path, function) = match word.split_once(".rs") {
            Some((stem, rest)) => (
                format!("{stem}.rs"),
                rest.strip_prefix("::").and_then(identifier),
            ),
            None if word.ends_with('/') => (word.to_string(), None),
            None => return None,
        };
        return Some(Citation::Path { path, function });
    }
    let (file, function) = word.split_once(".rs::")?;
    if file.contains('/') || identifier(file).is_none() {
        return None;
    }
    Some(Citation::Bare {
        file: format!("{file}.rs"),
        function: identifier(function)?,
    })
}

/// The `cargo test` commands in `words` that name a package and a test
/// target, with the filter after the target when there is one.
fn commands(words: &[&str]) -> Vec<Citation> {
    let mut found = Vec::new();
    for (i, pair) in words.windows(2).enumerate() {
        if pair != ["cargo", "test"] {
            continue;
        }
        let (mut package, mut target, mut filter) = (None, None, None);
        let mut rest = words[i + 2..].iter().take(12).peekable();
        while let Some(&word) = rest.next() {
            match word {
                "--" => break,
                "-p" | "--package" => package = rest.next().map(|w| w.to_string()),
                "--test" => {
                    target = rest.next().map(|w| w.to_string());
                    filter = rest.next_if(|w| !w.starts_with('-')).map(|w| w.to_string());
                }
                _ => {}
            }
        }
        if let (Some(package), Some(target)) = (package, target) {
            found.push(Citation::Command {
                package,
                target,
                filter,
            });
        }
    }
    found
}

/// Every citation of a test in one doc.
fn citations(text: &str) -> Vec<Citation> {
    let words = words(text);
    let mut found: Vec<Citation> = words.iter().filter_map(|w| cited_test(w)).collect();
    found.extend(commands(&words));
    found
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every Markdown file under docs/.
fn docs(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Whether the Rust file at `path` defines a function `name`.
fn defines(path: &Path, name: &str) -> bool {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    words(&text)
        .windows(2)
        .any(|pair| pair[0] == "fn" && pair[1] == name)
}

/// The repository's Rust files named `file` (outside build output and
/// installed packages).
fn files_named(root: &Path, file: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let skipped = ["target", "node_modules", ".git"].map(std::ffi::OsStr::new);
            if path.is_dir() && !skipped.contains(&name.as_os_str()) {
                dirs.push(path);
            } else if name == file {
                found.push(path);
            }
        }
    }
    found
}

/// The folder of the workspace member called `package`.
fn package_dir(root: &Path, package: &str) -> Option<PathBuf> {
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    let members = workspace.lines().find(|l| l.starts_with("members"))?;
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|member| root.join(member))
        .find(|dir| {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
            manifest.contains(&format!("name = \"{package}\""))
        })
}

/// Whether `package` has the integration test target `target`: a file of
/// its tests/ folder, or a `[[test]]` of its manifest.
fn has_target(dir: &Path, target: &str) -> bool {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    dir.join("tests").join(format!("{target}.rs")).is_file()
        || dir.join("tests").join(target).join("main.rs").is_file()
        || manifest.contains(&format!("[[test]]\nname = \"{target}\""))
}

/// Whether a filter of `it` (`hostile::budget`, `sign_in::signing_keys
/// probe`'s first word) names a module of it, or a function in one.
fn filter_resolves(it: &Path, filter: &str) -> bool {
    let module = |parts: &[&str]| -> Option<PathBuf> {
        let path = it.join(parts.join("/"));
        [path.with_extension("rs"), path.join("mod.rs")]
            .into_iter()
            .find(|p| p.is_file())
    };
    let parts: Vec<&str> = filter.trim_end_matches("::").split("::").collect();
    if module(&parts).is_some() {
        return true;
    }
    let (function, parent) = parts.split_last().unwrap_or((&"", &[]));
    module(parent).is_some_and(|file| defines(&file, function))
}

/// What is wrong with one citation, if anything.
fn check(root: &Path, citation: &Citation) -> Option<String> {
    match citation {
        Citation::Path { path, function } => {
            let file = root.join(path);
            if !file.exists() {
                return Some(format!("{path} does not exist"));
            }
            let function = function.as_deref()?;
            (!defines(&file, function)).then(|| format!("{path} has no fn {function}"))
        }
        Citation::Bare { file, function } => {
            let named = files_named(root, file);
            let found = named.iter().any(|p| defines(p, function));
            (!found).then(|| format!("no {file} defines fn {function}"))
        }
        Citation::Command {
            package,
            target,
            filter,
        } => {
            let Some(dir) = package_dir(root, package) else {
                return Some(format!("no workspace package {package}"));
            };
            if !has_target(&dir, target) {
                return Some(format!("{package} has no test target {target}"));
            }
            let filter = filter.as_deref().filter(|f| f.contains("::"))?;
            let it = dir.join(target);
            (!filter_resolves(&it, filter))
                .then(|| format!("--test {target} {filter}: no such module or test"))
        }
    }
}

#[test]
fn every_test_a_doc_cites_exists() {
    let root = repo_root();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for doc in docs(&root) {
        let text =
            std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for citation in citations(&text) {
            seen += 1;
            if let Some(why) = check(&root, &citation) {
                let name = doc
                    .strip_prefix(&root)
                    .unwrap_or(&doc)
                    .display()
                    .to_string();
                wrong.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(
        seen > 20,
        "the docs cite only {seen} tests: is the parser blind?"
    );
    assert!(
        wrong.is_empty(),
        "citations of tests that do not exist:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_form_of_citation_is_read() {
    let text = "Tests: `tests/it/hostile/budget.rs::one_token_cannot_hold_the_budget` \
        and `tests/it/upload/resume.rs`, the folder (`tests/it/watch/`), \
        `budget.rs::unauthenticated_peers_cannot_lock_others_out`, and\n\
        `cargo test -p relay-tests --test it\nwatch::scale -- --nocapture`.";
    let path = |p: &str, f: Option<&str>| Citation::Path {
        path: p.into(),
        function: f.map(str::to_string),
    };
    assert_eq!(
        citations(text),
        [
            path(
                "tests/it/hostile/budget.rs",
                Some("one_token_cannot_hold_the_budget")
            ),
            path("tests/it/upload/resume.rs", None),
            path("tests/it/watch/", None),
            Citation::Bare {
                file: "budget.rs".into(),
                function: "unauthenticated_peers_cannot_lock_others_out".into(),
            },
            Citation::Command {
                package: "relay-tests".into(),
                target: "it".into(),
                filter: Some("watch::scale".into()),
            },
        ]
    );
}

#[test]
fn a_test_that_moved_or_went_away_is_caught() {
    let root = repo_root();
    let stale = [
        "`tests/tests/hostile.rs`",
        "`tests/it/hostile/budget.rs::no_such_test`",
        "`hostile.rs::unauthenticated_peers_cannot_lock_others_out`",
        "`tests/it/no_such_feature/`",
        "`cargo test -p relay-tests --test hostile_budget`",
        "`cargo test -p relay-tests --test it hostile::no_such_module`",
    ];
    for text in stale {
        let found = citations(text);
        assert_eq!(found.len(), 1, "{text}: {found:?}");
        assert!(check(&root, &found[0]).is_some(), "{text} passed");
    }
    let current = "`cargo test -p relay-tests --test it sign_in::signing_keys::probe_sign_in_latency_during_a_held_key_fetch`";
    let found = citations(current);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(check(&root, &found[0]), None);
}
