//! The source side of the import check: Rust files read with comments,
//! string and character literals blanked out and everything under
//! `#[cfg(test)]` dropped, and the paths they name.

use std::fs;
use std::path::{Path, PathBuf};

/// `text` with comments, string and character literals replaced by spaces
/// (byte for byte, so offsets and lines stay where they were).
pub fn blank(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    let mut i = 0;
    let wipe = |b: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut b[from..to.min(text.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        let rest = &text.as_bytes()[i..];
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if rest.starts_with(b"//") {
            let end = text[i..].find('\n').map_or(text.len(), |e| i + e);
            wipe(&mut b, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < text.len() {
                if text.as_bytes()[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if text.as_bytes()[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            wipe(&mut b, i, j);
            i = j;
        } else if !ident_before && raw_string_start(rest).is_some() {
            let (open, hashes) = raw_string_start(rest).expect("checked");
            let close = format!("\"{}", "#".repeat(hashes));
            let end = text[i + open..]
                .find(&close)
                .map_or(text.len(), |e| i + open + e + close.len());
            wipe(&mut b, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < text.len() && text.as_bytes()[j] != b'"' {
                j += if text.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            wipe(&mut b, i, j + 1);
            i = j + 1;
        } else if rest[0] == b'\'' {
            let end = char_literal_end(&text[i..]).map_or(i + 1, |e| i + e);
            wipe(&mut b, i, end);
            i = end;
        } else {
            i += 1;
        }
    }
    b
}

/// `r"`, `r#"`, `br##"`…: the length of the opening and its number of `#`.
fn raw_string_start(rest: &[u8]) -> Option<(usize, usize)> {
    let after_b = rest.strip_prefix(b"b").unwrap_or(rest);
    let after_r = after_b.strip_prefix(b"r")?;
    let hashes = after_r.iter().take_while(|c| **c == b'#').count();
    (after_r.get(hashes) == Some(&b'"')).then(|| (rest.len() - after_r.len() + hashes + 1, hashes))
}

/// The length of a character literal at the start of `rest`, or `None` for a
/// lifetime.
fn char_literal_end(rest: &str) -> Option<usize> {
    let bytes = rest.as_bytes();
    if bytes.get(1) == Some(&b'\\') {
        let close = bytes.get(3..)?.iter().position(|c| *c == b'\'')?;
        return Some(close + 4);
    }
    let ch = rest.get(1..)?.chars().next()?;
    let after = 1 + ch.len_utf8();
    (bytes.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// The index just past the `}` that closes the `{` at `open`.
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Blanks every item under `#[cfg(test)]` and returns the module files such an
/// item declares (`mod name;`, with its `#[path]` if any), relative to `file`'s
/// folder.
fn drop_test_items(raw: &str, code: &mut [u8], file: &Path) -> Vec<PathBuf> {
    let mut test_files = Vec::new();
    let marker = b"#[cfg(test)]";
    let mut i = 0;
    while let Some(p) = find(code, marker, i) {
        let mut j = p + marker.len();
        let mut path_attr = None;
        loop {
            while j < code.len() && code[j].is_ascii_whitespace() {
                j += 1;
            }
            if !code[j..].starts_with(b"#[") {
                break;
            }
            let end = find(code, b"]", j).map_or(code.len(), |e| e + 1);
            let attr = &raw[j..end];
            if let Some(value) = attr.strip_prefix("#[path = \"") {
                path_attr = value.split('"').next().map(str::to_string);
            }
            j = end;
        }
        let semi = find(code, b";", j).unwrap_or(code.len());
        let brace = find(code, b"{", j).unwrap_or(code.len());
        let head = String::from_utf8_lossy(&code[j..semi.min(brace)]).to_string();
        let is_use = head.split_whitespace().any(|w| w == "use");
        let end = if semi < brace || is_use {
            let item = String::from_utf8_lossy(&code[j..semi]).to_string();
            if let Some(name) = item.split_whitespace().skip_while(|w| *w != "mod").nth(1) {
                test_files.push(child_module(file, name, path_attr.as_deref()));
            }
            semi + 1
        } else {
            matching_brace(code, brace)
        };
        for c in &mut code[p..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = end;
    }
    test_files
}

/// The module files `file` declares with `mod name;` (each with its
/// `#[path]`, if the line before gives one).
fn declared_modules(raw: &str, file: &Path) -> Vec<PathBuf> {
    let mut path_attr: Option<String> = None;
    let mut found = Vec::new();
    for line in raw.lines().map(str::trim) {
        if let Some(value) = line.strip_prefix("#[path = \"") {
            path_attr = value.split('"').next().map(str::to_string);
            continue;
        }
        let decl = line
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            found.push(child_module(file, name.trim(), path_attr.as_deref()));
        }
        if !line.starts_with("#[") {
            path_attr = None;
        }
    }
    found
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The file a `mod name;` in `file` declares.
fn child_module(file: &Path, name: &str, path_attr: Option<&str>) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new(""));
    if let Some(path) = path_attr {
        return dir.join(path);
    }
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let own = if matches!(stem, "mod" | "lib" | "main") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let flat = own.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        own.join(name).join("mod.rs")
    }
}

/// One path a file names: its line, and the segments after the prefix
/// (`crate::a::b` → `a::b`; a group `crate::{a, b::c}` gives `a` and `b::c`).
#[derive(Debug, PartialEq)]
pub struct Reference {
    pub line: usize,
    pub path: String,
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every path of `code` that starts with `prefix` (`crate::`, `relay_proto::`),
/// not preceded by an identifier, `$` or `::`.
pub fn references(code: &[u8], prefix: &str) -> Vec<Reference> {
    let line_of = |at: usize| code[..at].iter().filter(|c| **c == b'\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(p) = find(code, prefix.as_bytes(), from) {
        from = p + prefix.len();
        let before = p.checked_sub(1).map(|b| code[b]);
        if before.is_some_and(|b| is_ident(b) || b == b'$' || b == b':') {
            continue;
        }
        let start = from;
        if code.get(start) == Some(&b'{') {
            let end = matching_brace(code, start) - 1;
            let mut depth = 0;
            let mut item_start = start + 1;
            for j in start + 1..=end {
                let c = code[j];
                if c == b'{' {
                    depth += 1;
                } else if c == b'}' && depth > 0 {
                    depth -= 1;
                } else if (c == b',' && depth == 0) || j == end {
                    let item = &code[item_start..j];
                    let lead = item.iter().position(|c| !c.is_ascii_whitespace());
                    if let Some(lead) = lead {
                        let path = path_at(item, lead);
                        if !path.is_empty() && path != "self" {
                            found.push(Reference {
                                line: line_of(item_start + lead),
                                path,
                            });
                        }
                    }
                    item_start = j + 1;
                }
            }
        } else {
            let path = path_at(code, start);
            if !path.is_empty() {
                found.push(Reference {
                    line: line_of(p),
                    path,
                });
            }
        }
    }
    found
}

/// The `a::b::c` path at `at`, up to the first character that is neither an
/// identifier's nor `::`.
fn path_at(code: &[u8], at: usize) -> String {
    let mut end = at;
    while end < code.len() {
        if is_ident(code[end]) {
            end += 1;
        } else if code[end..].starts_with(b"::") && code.get(end + 2).is_some_and(|c| is_ident(*c))
        {
            end += 2;
        } else {
            break;
        }
    }
    String::from_utf8_lossy(&code[at..end]).to_string()
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A non-test source file, its comments, literals and test items blanked.
pub struct Source {
    pub rel: String,
    pub key: String,
    pub code: Vec<u8>,
}

/// The non-test files of one source folder, comments and test items blanked.
pub fn sources(root: &Path, src: &str) -> Vec<Source> {
    let dir = root.join(src);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut parsed = Vec::new();
    let mut test_only: Vec<PathBuf> = Vec::new();
    for file in &files {
        let raw = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut code = blank(&raw);
        test_only.extend(drop_test_items(&raw, &mut code, file));
        parsed.push((file.clone(), code));
    }
    // A module that a test-only file declares is test-only too, whatever its
    // name (a `#[path]` include of a test's cases, say).
    let mut grown = true;
    while grown {
        grown = false;
        for (file, _) in &parsed {
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !(name.ends_with("_tests.rs") || test_only.contains(file)) {
                continue;
            }
            let raw = fs::read_to_string(file).unwrap_or_default();
            for child in declared_modules(&raw, file) {
                if !test_only.contains(&child) {
                    test_only.push(child);
                    grown = true;
                }
            }
        }
    }
    let test_dirs: Vec<PathBuf> = test_only.iter().map(|f| f.with_extension("")).collect();
    parsed
        .into_iter()
        .filter(|(file, _)| {
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let under_test = test_dirs.iter().any(|d| file.starts_with(d))
                || test_only.iter().any(|t| {
                    t == file
                        || (t.ends_with("mod.rs") && file.starts_with(t.parent().unwrap_or(t)))
                });
            !name.ends_with("_tests.rs") && !under_test
        })
        .map(|(file, code)| {
            let inner = file.strip_prefix(&dir).expect("under its folder");
            let first = inner
                .components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy().to_string())
                .unwrap_or_default();
            let key = if inner.components().count() > 1 {
                format!("{first}/")
            } else {
                first
            };
            let rel = file
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .to_string();
            Source { rel, key, code }
        })
        .collect()
}

#[test]
fn finds_crate_paths_in_code_but_not_in_comments_strings_or_tests() {
    let text = "\
use crate::ui::Bar; // crate::cli in a comment
use crate::{
    cli::Args,
    self,
    relay::{link, patience},
};
fn f() { let s = \"crate::hidden\"; let c = '\"'; $crate::macro_only!(); x::crate::no; crate::transfer::run(); }
/* crate::blocked */
#[cfg(test)]
mod tests {
    use crate::test_only::Thing;
}
#[cfg(test)]
use crate::also_test_only;
";
    let mut code = blank(text);
    drop_test_items(text, &mut code, Path::new("x/src/a.rs"));
    let found: Vec<(usize, String)> = references(&code, "crate::")
        .into_iter()
        .map(|r| (r.line, r.path))
        .collect();
    assert_eq!(
        found,
        vec![
            (1, "ui::Bar".to_string()),
            (3, "cli::Args".to_string()),
            (5, "relay".to_string()),
            (7, "transfer::run".to_string()),
        ]
    );
}
