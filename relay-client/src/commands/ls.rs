//! `relay-client ls CONTAINER[/PREFIX]`: a container's blobs as the relay
//! (or, with `--direct`, storage) lists them, one line each, with the SHA-256
//! the relay vouches for. The listing is download's (`download::list`, taken
//! up where it broke); the lines are made here (`Lines`, pure) as the names
//! arrive, so memory stays one page and a channel, whatever the count.
//!
//! `--one-level` shows the prefix's direct children, each folder once: names
//! sharing a prefix are contiguous in any listing order (storage's order is
//! lexicographic in its own code units), so a folder ends at the first name
//! outside it, and only the folder in progress is held (its name, count,
//! bytes and latest Last-Modified).

use std::io::Write;
use std::sync::Arc;

use relay_proto::logsafe::safe_to;
use relay_proto::protocol::Listed;
use serde_json::json;
use tokio::sync::mpsc;

use crate::commands::ls_args::{LsArgs, mode_flags};
use crate::commands::setup::{self, SetupError};
use crate::download::list::{ListFrom, listing_from};
use crate::download::place::Selection;
use crate::run::interrupt::Interrupt;
use crate::transfer::destination::parse_destination;
use crate::ui::error_code::ErrorCode;
use crate::ui::progress::{Output, Reporter};
use crate::ui::report::FileError;

/// Names the listing hands the printer at most this far ahead.
const LIST_AHEAD: usize = 1024;

/// How a listing ended.
#[derive(Debug)]
pub enum LsEnd {
    /// Every blob printed, then the total (or stdout closed: the reader
    /// wanted no more).
    Done,
    /// The relay refused the token or its grant: a setup error (exit 2).
    Refused(FileError),
    /// The listing failed partway; the lines printed stand (exit 1).
    Failed(FileError),
    /// Ctrl-C (exit 130).
    Interrupted,
}

/// Lists `args.source` onto `out`.
pub async fn run(
    args: LsArgs,
    out: &mut (dyn Write + Send),
    mut interrupt: Interrupt,
) -> Result<LsEnd, SetupError> {
    let dest = parse_destination(&args.source).map_err(|e| {
        SetupError::Refused(format!(
            "source {:?}: {e}",
            relay_proto::logsafe::hide_sas_signatures(&args.source)
        ))
    })?;
    let what = format!(
        "source {:?}",
        relay_proto::logsafe::hide_sas_signatures(&args.source)
    );
    setup::same_account(&args.connection, args.direct, &dest, &what)?;
    let flags = mode_flags(&args);
    let weather = Arc::new(Reporter::new(Output::Text, true)).weather_sink();
    let connected =
        setup::connection::connected(&args.connection, &flags, &dest.container, weather);
    let (token, mode) = tokio::select! {
        c = connected => c?,
        _ = interrupt.wait() => return Ok(LsEnd::Interrupted),
    };
    let from = ListFrom {
        mode: &mode,
        token: &token,
        container: &dest.container,
        attempts: args.attempts.max(1),
    };
    let mut lines = Lines::new(&dest.prefix, args.one_level, args.json);
    let (tx, rx) = mpsc::channel::<Listed>(LIST_AHEAD);
    let listing = listing_from(&from, &dest.prefix, tx, None);
    let printing = print(rx, &mut lines, out);
    let both = async { tokio::join!(listing, printing) };
    let (listed, printed) = tokio::select! {
        b = both => b,
        _ = interrupt.wait() => return Ok(LsEnd::Interrupted),
    };
    Ok(match (listed, printed) {
        // The reader went away (`ls | head`): nothing more to say.
        (_, Err(_)) => LsEnd::Done,
        (Ok(_), Ok(())) => {
            let _ = write_all(out, &lines.finish());
            LsEnd::Done
        }
        (Err(e), Ok(())) if matches!(e.code, ErrorCode::Unauthorized | ErrorCode::Forbidden) => {
            LsEnd::Refused(e)
        }
        (Err(e), Ok(())) => {
            // What is in progress is shown; no total (the listing is not whole).
            let _ = write_all(out, &lines.flush());
            LsEnd::Failed(e)
        }
    })
}

/// Every listed blob into its lines on `out`, as they come; an error once
/// `out` takes no more (the listing then stops: its channel is closed).
async fn print(
    mut rx: mpsc::Receiver<Listed>,
    lines: &mut Lines,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    while let Some(b) = rx.recv().await {
        write_all(out, &lines.push(&b))?;
    }
    out.flush()
}

fn write_all(out: &mut (dyn Write + Send), lines: &[String]) -> std::io::Result<()> {
    for l in lines {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// A folder of `--one-level` in progress: its name (the prefix included,
/// ending in `/`) and what is under it so far.
#[derive(Debug)]
struct Folder {
    name: String,
    blobs: u64,
    bytes: u64,
    last_modified: Option<u64>,
}

/// The lines of a listing, made as the names come (pure).
#[derive(Debug)]
pub struct Lines {
    selection: Selection,
    /// Where the children start: the prefix and `/` (empty for a container).
    base: String,
    one_level: bool,
    json: bool,
    folder: Option<Folder>,
    blobs: u64,
    bytes: u64,
}

impl Lines {
    pub fn new(prefix: &str, one_level: bool, json: bool) -> Self {
        let selection = Selection::new(prefix);
        let base = if selection.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", selection.prefix)
        };
        Self {
            selection,
            base,
            one_level,
            json,
            folder: None,
            blobs: 0,
            bytes: 0,
        }
    }

    /// The lines one listed blob makes: none (outside the source, or inside
    /// the folder in progress), its own, or the folder it ended and its own.
    pub fn push(&mut self, b: &Listed) -> Vec<String> {
        if !self.selection.takes(&b.name) {
            return Vec::new();
        }
        self.blobs += 1;
        self.bytes += b.size;
        let child_folder = self
            .one_level
            .then(|| b.name.strip_prefix(self.base.as_str()))
            .flatten()
            .and_then(|rest| rest.find('/').map(|i| &b.name[..self.base.len() + i + 1]));
        let mut out = Vec::new();
        if let Some(f) = &self.folder
            && child_folder != Some(f.name.as_str())
        {
            out.extend(self.flush());
        }
        match child_folder {
            Some(name) => {
                let f = self.folder.get_or_insert_with(|| Folder {
                    name: name.to_string(),
                    blobs: 0,
                    bytes: 0,
                    last_modified: None,
                });
                f.blobs += 1;
                f.bytes += b.size;
                f.last_modified = f.last_modified.max(b.last_modified);
            }
            None => out.push(self.blob_line(b)),
        }
        out
    }

    /// The folder in progress, if any, as its line.
    pub fn flush(&mut self) -> Vec<String> {
        self.folder
            .take()
            .map(|f| self.folder_line(&f))
            .into_iter()
            .collect()
    }

    /// The end of a whole listing: the folder in progress and the total.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = self.flush();
        out.push(if self.json {
            json!({"type": "total", "blobs": self.blobs, "bytes": self.bytes}).to_string()
        } else {
            format!(
                "total: {} blobs, {} bytes ({})",
                self.blobs,
                self.bytes,
                relay_proto::size::format_size(self.bytes)
            )
        });
        out
    }

    fn blob_line(&self, b: &Listed) -> String {
        if self.json {
            return json!({
                "type": "blob",
                "name": b.name,
                "size": b.size,
                "last_modified": b.last_modified.map(rfc3339),
                "etag": b.etag,
                "sha256": b.sha256,
            })
            .to_string();
        }
        let sha = b
            .sha256
            .as_deref()
            .map_or("-", |s| s.get(..12).unwrap_or(s));
        text_line(b.size, b.last_modified, sha, &b.name)
    }

    fn folder_line(&self, f: &Folder) -> String {
        if self.json {
            return json!({
                "type": "folder",
                "name": f.name,
                "blobs": f.blobs,
                "size": f.bytes,
                "last_modified": f.last_modified.map(rfc3339),
            })
            .to_string();
        }
        text_line(f.bytes, f.last_modified, "-", &f.name)
    }
}

/// `SIZE  LAST-MODIFIED  SHA  NAME`, the name escaped (a blob name is
/// anyone's text: no control character reaches the terminal).
fn text_line(size: u64, last_modified: Option<u64>, sha: &str, name: &str) -> String {
    let when = last_modified.map_or_else(|| "-".to_string(), rfc3339);
    let name = safe_to(name, relay_proto::limits::MAX_BLOB_NAME_CHARS);
    format!("{size:>14}  {when:<20}  {sha:<12}  {name}")
}

/// Seconds since the epoch as `2026-12-07T11:04:59Z`.
fn rfc3339(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| secs.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(name: &str, size: u64, sha: Option<&str>) -> Listed {
        Listed {
            name: name.into(),
            size,
            etag: "\"0x1\"".into(),
            last_modified: Some(1_700_000_000),
            sha256: sha.map(str::to_string),
        }
    }

    fn all(lines: &mut Lines, names: &[(&str, u64)]) -> Vec<String> {
        let mut out = Vec::new();
        for (n, s) in names {
            out.extend(lines.push(&blob(n, *s, None)));
        }
        out.extend(lines.finish());
        out
    }

    #[test]
    fn every_blob_is_a_line_with_its_vouched_sha_or_a_dash() {
        let mut l = Lines::new("run", false, false);
        let sha = "0123456789abcdef".repeat(4);
        let mut out = l.push(&blob("run/a", 5, Some(&sha)));
        out.extend(l.push(&blob("run10/x", 7, None)));
        out.extend(l.push(&blob("run/d/\u{1b}[2J", 3, None)));
        out.extend(l.finish());
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(
            out[0].contains("0123456789ab ") && !out[0].contains(&sha),
            "{}",
            out[0]
        );
        assert!(out[0].ends_with("  run/a") && out[0].contains("2023-11-14T22:13:20Z"));
        assert!(
            out[1].contains("  -  ") && out[1].ends_with("run/d/\\u{1b}[2J"),
            "{}",
            out[1]
        );
        assert_eq!(out[2], "total: 2 blobs, 8 bytes (8 B)");
    }

    #[test]
    fn one_level_shows_each_folder_once_with_what_is_under_it() {
        let mut l = Lines::new("p", true, false);
        let out = all(
            &mut l,
            &[
                ("p", 1),
                ("p/a", 2),
                ("p/d/x", 3),
                ("p/d/y/z", 4),
                ("p/e", 5),
                ("p/f/1", 6),
            ],
        );
        let names: Vec<&str> = out
            .iter()
            .map(|o| o.rsplit("  ").next().unwrap_or(""))
            .collect();
        assert_eq!(
            names,
            [
                "p",
                "p/a",
                "p/d/",
                "p/e",
                "p/f/",
                "total: 6 blobs, 21 bytes (21 B)"
            ]
        );
        assert!(out[2].trim_start().starts_with("7 "), "{}", out[2]);
        // The whole container: top-level folders.
        let mut l = Lines::new("", true, false);
        let out = all(&mut l, &[("a/1", 1), ("a/2", 1), ("b", 1)]);
        assert!(
            out[0].ends_with("  a/") && out[1].ends_with("  b"),
            "{out:?}"
        );
    }

    #[test]
    fn json_lines_carry_the_full_sha_folders_and_the_total() {
        let mut l = Lines::new("", true, true);
        let sha = "ab".repeat(32);
        let mut out = l.push(&blob("x", 1, Some(&sha)));
        out.extend(l.push(&blob("d/y", 2, None)));
        out.extend(l.finish());
        let v: Vec<serde_json::Value> = out
            .iter()
            .map(|o| serde_json::from_str(o).unwrap_or_default())
            .collect();
        assert_eq!(v[0]["type"], "blob");
        assert_eq!(v[0]["sha256"], sha.as_str());
        assert_eq!(v[0]["last_modified"], "2023-11-14T22:13:20Z");
        assert_eq!(v[1]["type"], "folder");
        assert_eq!(
            (v[1]["name"].as_str(), v[1]["blobs"].as_u64()),
            (Some("d/"), Some(1))
        );
        assert_eq!(v[2], json!({"type": "total", "blobs": 2, "bytes": 3}));
        assert!(v[1].get("sha256").is_none());
    }
}
