//! The sorted runs of a folder too wide to sort in memory, kept in one
//! unnamed temporary file per walk (made private and unlinked at once, in
//! TMPDIR, so it goes with the process whatever happens) and read back
//! through a small buffer per run.
//!
//! A run is its entries one after another: a tag (0 file, 1 folder, 2 an
//! entry that failed), the name (or the failure) as a length and UTF-8
//! bytes, and a file's `stat`. Names may hold any byte but `/` and NUL, a
//! newline included, hence lengths rather than lines.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use relay_proto::sync::entry::{FileStat, Identity};
use relay_proto::sync::walk_order::Child;
use relay_proto::sync::wide_dir::Run;

/// Bytes buffered per run while merging: k runs cost k of these.
const READ_BUFFER: usize = 16 * 1024;

/// The walk's spill file, made on the first wide folder.
#[derive(Default)]
pub struct RunFile {
    file: Option<Arc<File>>,
    end: u64,
}

impl RunFile {
    /// Appends one sorted run and gives back its reader.
    pub fn spill(&mut self, run: Vec<Child<FileStat>>) -> Result<Run<FileStat>, String> {
        let file = match &self.file {
            Some(f) => Arc::clone(f),
            None => {
                let f = Arc::new(tempfile::tempfile().map_err(|e| spill_error(&e))?);
                self.file = Some(Arc::clone(&f));
                f
            }
        };
        let mut bytes = Vec::new();
        let start = self.end;
        let mut writer = std::io::BufWriter::new(Appender {
            file: &file,
            at: start,
        });
        for child in &run {
            bytes.clear();
            encode(child, &mut bytes);
            writer.write_all(&bytes).map_err(|e| spill_error(&e))?;
        }
        writer.flush().map_err(|e| spill_error(&e))?;
        let end = writer.get_ref().at;
        drop(writer);
        self.end = end;
        let slice = Slice {
            file,
            at: start,
            end,
        };
        Ok(Box::new(Entries {
            reader: BufReader::with_capacity(READ_BUFFER, slice),
            broken: false,
        }))
    }
}

fn spill_error(e: &std::io::Error) -> String {
    format!("a folder too wide to sort in memory could not be spilled to TMPDIR ({e})")
}

/// Writes at a position of the shared file (runs are read while others
/// are still written: no shared cursor).
struct Appender<'a> {
    file: &'a File,
    at: u64,
}

impl Write for Appender<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One run's bytes of the shared file.
struct Slice {
    file: Arc<File>,
    at: u64,
    end: u64,
}

impl Read for Slice {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = usize::try_from(self.end - self.at).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// A run read back, entry by entry; after an error, nothing more.
struct Entries {
    reader: BufReader<Slice>,
    broken: bool,
}

impl Iterator for Entries {
    type Item = Result<Child<FileStat>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.broken {
            return None;
        }
        let mut tag = [0u8; 1];
        match self.reader.read(&mut tag) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(Err(self.broke(&e))),
        }
        match decode(tag[0], &mut self.reader) {
            Ok(child) => Some(Ok(child)),
            Err(e) => Some(Err(self.broke(&e))),
        }
    }
}

impl Entries {
    fn broke(&mut self, e: &std::io::Error) -> String {
        self.broken = true;
        format!("a sorted run could not be read back from TMPDIR ({e})")
    }
}

fn encode(child: &Child<FileStat>, out: &mut Vec<u8>) {
    let text = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    match child {
        Child::File { name, file } => {
            out.push(0);
            text(out, name);
            out.extend_from_slice(&file.size.to_le_bytes());
            out.extend_from_slice(&file.mtime_ns.to_le_bytes());
            match &file.identity {
                Some(id) => {
                    out.push(1);
                    out.extend_from_slice(&id.ino.to_le_bytes());
                    out.extend_from_slice(&id.dev.to_le_bytes());
                    out.extend_from_slice(&id.ctime_ns.to_le_bytes());
                }
                None => out.push(0),
            }
        }
        Child::Dir { name } => {
            out.push(1);
            text(out, name);
        }
        Child::Failed(why) => {
            out.push(2);
            text(out, why);
        }
    }
}

fn decode(tag: u8, r: &mut impl Read) -> std::io::Result<Child<FileStat>> {
    let name = read_text(r)?;
    match tag {
        0 => {
            let size = read_u64(r)?;
            let mtime_ns = read_u64(r)? as i64;
            let mut flag = [0u8; 1];
            r.read_exact(&mut flag)?;
            let identity = if flag[0] == 1 {
                Some(Identity {
                    ino: read_u64(r)?,
                    dev: read_u64(r)?,
                    ctime_ns: read_u64(r)? as i64,
                })
            } else {
                None
            };
            let file = FileStat {
                size,
                mtime_ns,
                identity,
            };
            Ok(Child::File { name, file })
        }
        1 => Ok(Child::Dir { name }),
        2 => Ok(Child::Failed(name)),
        _ => Err(std::io::Error::other("unknown entry tag")),
    }
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_text(r: &mut impl Read) -> std::io::Result<String> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut bytes)?;
    String::from_utf8(bytes).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_read_back_as_written_while_others_are_appended() {
        let stat = |n: u64| FileStat {
            size: n,
            mtime_ns: -(n as i64),
            identity: n.is_multiple_of(2).then_some(Identity {
                ino: n,
                dev: 7,
                ctime_ns: n as i64 * 3,
            }),
        };
        let run_of = |from: u64| -> Vec<Child<FileStat>> {
            (from..from + 3000)
                .map(|n| match n % 5 {
                    0 => Child::Dir {
                        name: format!("d{n}\n\u{1F600}"),
                    },
                    1 => Child::Failed(format!("f{n}")),
                    _ => Child::File {
                        name: format!("caf\u{e9}{n}"),
                        file: stat(n),
                    },
                })
                .collect()
        };
        let mut runs = RunFile::default();
        let mut first = runs.spill(run_of(0)).expect("spill");
        let head = first.next().expect("one").expect("read");
        let second = runs.spill(run_of(10_000)).expect("spill");
        let mut back: Vec<Child<FileStat>> = vec![head];
        back.extend(first.map(|c| c.expect("read")));
        assert_eq!(back, run_of(0));
        let back: Vec<Child<FileStat>> = second.map(|c| c.expect("read")).collect();
        assert_eq!(back, run_of(10_000));
    }
}
