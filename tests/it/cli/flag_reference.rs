//! The flag references in docs/CLIENT.md and docs/RELAY.md are rendered from
//! the binaries' own command-line definitions (clap), so they cannot drift:
//! this test fails when a flag, a subcommand or a one-line summary differs
//! from what the docs say. `WRITE_REFERENCE=1 cargo test -p relay-tests --test
//! it cli::flag_reference` rewrites the blocks after a change.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

const BEGIN: &str = "<!-- flags: generated from the binary's --help by tests/it/cli/flag_reference.rs; WRITE_REFERENCE=1 rewrites -->";
const END: &str = "<!-- /flags -->";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The first sentence of a help text, on one line, with `|` escaped for a
/// table. A sentence ends at ". " before a capital letter (so "e.g. https://"
/// does not end one).
fn summary(help: Option<&clap::builder::StyledStr>) -> String {
    let text = help.map(|h| h.to_string()).unwrap_or_default();
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let end = one_line
        .match_indices(". ")
        .find(|(i, _)| {
            one_line[i + 2..].starts_with(|c: char| c.is_ascii_uppercase())
                && !one_line[..*i].ends_with("e.g")
                && !one_line[..*i].ends_with("i.e")
        })
        .map(|(i, _)| i + 1)
        .unwrap_or(one_line.len());
    one_line[..end].replace('|', "\\|")
}

/// A flag's name as the table shows it.
fn flag_name(a: &clap::Arg) -> String {
    match (a.get_long(), a.get_short()) {
        (Some(l), Some(s)) => format!("`-{s}`, `--{l}`"),
        (Some(l), None) => format!("`--{l}`"),
        (None, _) => format!(
            "`{}`",
            a.get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| a.get_id().to_string().to_uppercase())
        ),
    }
}

/// A row per flag.
type Row = (String, String, String);

/// The command's rows; `global` picks the flags that apply to every command
/// (listed once, at the top) or the command's own.
fn rows(cmd: &clap::Command, global: bool) -> Vec<Row> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .filter(|a| a.is_global_set() == global)
        .map(|a| {
            let env = a
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            (
                flag_name(a),
                env,
                summary(a.get_help().or(a.get_long_help())),
            )
        })
        .collect()
}

/// One table per command that takes flags, subcommands in definition order.
/// The first command with flags sets the base: later ones list only the rows
/// that differ from it, then the names of the flags they share with it, so a
/// long shared set is written once.
fn render(
    cmd: &clap::Command,
    path: &str,
    base: &mut Option<(String, Vec<Row>)>,
    out: &mut String,
) {
    let all = rows(cmd, false);
    if !all.is_empty() {
        let _ = writeln!(out, "\n**`{path}`**\n");
        let (own, shared): (Vec<&Row>, Vec<&Row>) = match base {
            Some((_, b)) => all.iter().partition(|r| !b.contains(r)),
            None => (all.iter().collect(), Vec::new()),
        };
        if !own.is_empty() {
            let _ = writeln!(out, "| flag | environment | what |");
            let _ = writeln!(out, "| --- | --- | --- |");
            for (name, env, help) in own {
                let _ = writeln!(out, "| {name} | {env} | {help} |");
            }
        }
        if let Some((base_path, _)) = base.as_ref().filter(|_| !shared.is_empty()) {
            let names: Vec<&str> = shared.iter().map(|r| r.0.as_str()).collect();
            let _ = writeln!(out, "\nAnd, as `{base_path}` above: {}.", names.join(", "));
        }
        if base.is_none() {
            *base = Some((path.to_string(), all));
        }
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" || sub.is_hide_set() {
            continue;
        }
        render(sub, &format!("{path} {}", sub.get_name()), base, out);
    }
}

fn reference(mut cmd: clap::Command) -> String {
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut out = String::new();
    let globals = rows(&cmd, true);
    if !globals.is_empty() {
        let _ = writeln!(out, "\n**`{name}`**, before or after any command\n");
        let _ = writeln!(out, "| flag | environment | what |");
        let _ = writeln!(out, "| --- | --- | --- |");
        for (flag, env, help) in &globals {
            let _ = writeln!(out, "| {flag} | {env} | {help} |");
        }
    }
    render(&cmd, &name, &mut None, &mut out);
    out
}

/// The generated block of a document's text, or why there is none.
fn block(text: &str) -> Result<(usize, usize), String> {
    match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if b < e => Ok((b + BEGIN.len(), e)),
        _ => Err(format!("no generated flag block ({BEGIN} … {END})")),
    }
}

/// Whether `text`'s block is `expected`; the first differing line if not.
fn compare(text: &str, expected: &str) -> Result<(), String> {
    let (b, e) = block(text)?;
    let current = &text[b..e];
    let wanted = format!("{expected}\n");
    if current == wanted {
        return Ok(());
    }
    let first_diff = current
        .lines()
        .zip(wanted.lines())
        .find(|(a, b)| a != b)
        .map(|(a, b)| format!("\n  doc:    {a}\n  binary: {b}"))
        .unwrap_or_else(|| "\n  (one has more lines)".into());
    Err(format!(
        "the flag reference differs from the binary's --help:{first_diff}"
    ))
}

/// Checks (or, with WRITE_REFERENCE=1, rewrites) the generated block of `doc`.
fn check(doc: &str, expected: &str) {
    let path = repo().join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let Err(why) = compare(&text, expected) else {
        return;
    };
    if std::env::var_os("WRITE_REFERENCE").is_some() {
        let (b, e) = block(&text).unwrap_or_else(|e| panic!("{doc}: {e}"));
        let new = format!("{}{expected}\n{}", &text[..b], &text[e..]);
        std::fs::write(&path, new).unwrap_or_else(|e| panic!("{doc}: {e}"));
        return;
    }
    panic!(
        "{doc}: {why}\nrewrite it with WRITE_REFERENCE=1 cargo test -p relay-tests --test it cli::flag_reference"
    );
}

#[test]
fn client_reference_matches_its_help() {
    check(
        "docs/CLIENT.md",
        &reference(relay_client::cli::Cli::command()),
    );
}

#[test]
fn relay_reference_matches_its_help() {
    check(
        "docs/RELAY.md",
        &reference(relay_server::operations::config::Args::command()),
    );
}

/// The check can fail: a reference without one flag, or with one summary
/// changed, or a document without the block, is caught.
#[test]
fn a_missing_or_edited_flag_is_caught() {
    let full = reference(relay_server::operations::config::Args::command());
    assert!(full.contains("`--memory-budget`"), "{full}");
    let doc = |body: &str| format!("intro\n{BEGIN}{body}\n{END}\nrest\n");
    assert_eq!(compare(&doc(&full), &full), Ok(()));
    let without: String = full
        .lines()
        .filter(|l| !l.contains("`--memory-budget`"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(compare(&doc(without.trim_end_matches('\n')), &full).is_err());
    let edited = full.replacen("One budget", "A budget", 1);
    assert_ne!(edited, full);
    assert!(compare(&doc(&edited), &full).is_err());
    assert!(compare("no block here", &full).is_err());
}
