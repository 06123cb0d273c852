// The commit a binary is built from, for `--version`, /metrics and the logs:
// included by relay-client/build.rs and relay-server/build.rs (one copy of
// the logic, no build-dependency crate). Sets BLOB_RELAY_COMMIT to the short
// hash, with `-dirty` when tracked files differ from it, or `unknown` outside a
// git checkout (a source archive) or without git.

use std::path::PathBuf;
use std::process::Command;

/// `git ARGS` in the crate's directory: its trimmed stdout, if it succeeded.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BLOB_RELAY_COMMIT");
    // A packager building from an archive may say which commit it is.
    if let Ok(given) = std::env::var("BLOB_RELAY_COMMIT") {
        println!("cargo:rustc-env=BLOB_RELAY_COMMIT={given}");
        return;
    }
    // `--exclude '*'`: the hash alone, even where tags exist.
    let commit = git(&["describe", "--always", "--dirty", "--abbrev=7", "--exclude=*"]);
    println!(
        "cargo:rustc-env=BLOB_RELAY_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    if commit.is_none() {
        return;
    }
    // Run again when HEAD moves (a checkout, a commit on the branch), the
    // index changes, or a source file changes (which may make it dirty).
    let mut watch: Vec<PathBuf> = Vec::new();
    for name in ["HEAD", "index", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", name]) {
            watch.push(p.into());
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &head_ref])
    {
        watch.push(p.into());
    }
    if let Some(top) = git(&["rev-parse", "--show-toplevel"]) {
        let top = PathBuf::from(top);
        for dir in ["relay-client", "relay-server", "shared", "Cargo.toml", "Cargo.lock"] {
            watch.push(top.join(dir));
        }
    }
    let here = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    for p in watch {
        let p = match (&here, p.is_relative()) {
            (Some(here), true) => here.join(p),
            _ => p,
        };
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
}
