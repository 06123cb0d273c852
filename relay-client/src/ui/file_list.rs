//! The per-file reports of a `--json` summary, in bounded memory: the first
//! ones in memory, the rest appended as JSON lines to an unnamed temporary
//! file (unlinked as soon as it is made, so it goes with the process) and
//! read back one line at a time while the summary is written. A run of a
//! million files keeps a fixed number of reports, not a million.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::sync::Mutex;

use serde::ser::{Error as _, SerializeSeq};
use serde::{Serialize, Serializer};

/// Reports kept in memory before the rest go to the temporary file (some
/// 10 MB of reports).
pub const IN_MEMORY: usize = 10_000;

/// Every report of a run, in the order they came (generic so the reports'
/// type, `report::FileReport`, is not imported here: `report` uses this).
#[derive(Debug)]
pub struct FileList<T> {
    head: Vec<T>,
    /// Past it, reports are spilled; `None`: all in memory (a caller that
    /// holds its files in memory anyway, as `bench` does).
    limit: Option<usize>,
    spill: Option<Mutex<BufWriter<File>>>,
    spilled: usize,
    /// Why the spill file could not be written: reports past the limit are
    /// then counted but not kept, and the summary says so.
    lost: Option<String>,
}

impl<T> Default for FileList<T> {
    fn default() -> Self {
        Self {
            head: Vec::new(),
            limit: None,
            spill: None,
            spilled: 0,
            lost: None,
        }
    }
}

impl<T: Serialize> FileList<T> {
    /// A list that keeps `limit` reports in memory.
    pub fn bounded(limit: usize) -> Self {
        Self {
            limit: Some(limit),
            ..Self::default()
        }
    }

    /// A list that keeps every report in memory.
    pub fn unbounded() -> Self {
        Self::default()
    }

    pub fn push(&mut self, report: T) {
        if self.limit.is_none_or(|l| self.head.len() < l) {
            self.head.push(report);
            return;
        }
        if let Err(e) = self.append(&report) {
            self.lost.get_or_insert(e.to_string());
        }
        self.spilled += 1;
    }

    fn append(&mut self, report: &T) -> std::io::Result<()> {
        if self.spill.is_none() {
            self.spill = Some(Mutex::new(BufWriter::new(tempfile::tempfile()?)));
        }
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        let w = spill.get_mut().unwrap_or_else(|p| p.into_inner());
        serde_json::to_writer(&mut *w, report)?;
        w.write_all(b"\n")
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.spilled
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The reports held in memory: all of them unless the list spilled.
    pub fn in_memory(&self) -> &[T] {
        &self.head
    }
}

impl<T: Serialize> Serialize for FileList<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(why) = &self.lost {
            return Err(S::Error::custom(format!(
                "the reports past the first {} could not be kept ({why})",
                self.head.len()
            )));
        }
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for r in &self.head {
            seq.serialize_element(r)?;
        }
        if let Some(spill) = &self.spill {
            let mut w = spill.lock().unwrap_or_else(|p| p.into_inner());
            let mut read = w
                .flush()
                .and_then(|()| w.get_ref().try_clone())
                .map_err(S::Error::custom)?;
            read.seek(SeekFrom::Start(0)).map_err(S::Error::custom)?;
            for line in BufReader::new(read).lines() {
                let line = line.map_err(S::Error::custom)?;
                let v: serde_json::Value = serde_json::from_str(&line).map_err(S::Error::custom)?;
                seq.serialize_element(&v)?;
            }
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::file::failed;
    use crate::ui::error_code::ErrorCode;
    use crate::ui::report::FileError;
    use crate::ui::report::FileReport;

    fn report(i: usize) -> FileReport {
        let e = FileError::new(ErrorCode::Source, format!("file {i}"), false);
        failed(&format!("p{i}"), "c", &format!("b{i}"), e)
    }

    #[test]
    fn past_the_limit_reports_are_spilled_and_written_back_in_order() {
        let mut list: FileList<FileReport> = FileList::bounded(3);
        for i in 0..10 {
            list.push(report(i));
        }
        assert_eq!((list.len(), list.in_memory().len()), (10, 3));
        let v = serde_json::to_value(&list).expect("serialize");
        let blobs: Vec<_> = v
            .as_array()
            .expect("array")
            .iter()
            .map(|r| r["blob"].as_str().unwrap_or_default().to_string())
            .collect();
        let want: Vec<_> = (0..10).map(|i| format!("b{i}")).collect();
        assert_eq!(blobs, want);
        // Written twice, the same.
        assert_eq!(serde_json::to_value(&list).expect("again"), v);
        // The same reports unbounded serialize the same.
        let mut all: FileList<FileReport> = FileList::unbounded();
        (0..10).for_each(|i| all.push(report(i)));
        assert_eq!(serde_json::to_value(&all).expect("all"), v);
    }
}
