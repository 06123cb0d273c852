//! The files every method uploads: generated once per bench run from fixed
//! seeds, so all methods and profiles send identical bytes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::plan::{Plan, Workload};

/// (path, SHA-256 hex) per file, per workload.
pub struct Files {
    by_workload: HashMap<Workload, Vec<(PathBuf, String)>>,
}

impl Files {
    /// Writes the files under `dir/COUNTxSIZE/`, of the plan's data set
    /// (random by default: storage and transport cannot compress or deduplicate
    /// it). Seeds depend on the file's index and size only, so a workload's
    /// files are the same in every run.
    pub fn generate(dir: &Path, plan: &Plan) -> Self {
        let mut by_workload = HashMap::new();
        for &w in &plan.workloads {
            let sub = dir.join(w.name());
            let files = (0..w.count)
                .map(|i| {
                    let p = sub.join(format!("f-{i:06}.bin"));
                    let sha = plan.data.write(&p, w.file_bytes, seed(w, i));
                    (p, sha)
                })
                .collect();
            by_workload.insert(w, files);
        }
        // Written back before the first run: otherwise the kernel flushes the
        // new files (about 30 s after they were written) during a run, and
        // whichever method runs first pays for it (the first row of a series
        // ran 1-12 % below its repeats; docs/bench/compression/README.md).
        if let Err(e) = std::process::Command::new("sync").status() {
            eprintln!("wanbench: sync after writing the files: {e}");
        }
        Self { by_workload }
    }

    pub fn of(&self, w: Workload) -> &[(PathBuf, String)] {
        self.by_workload.get(&w).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The directory holding one workload's files (and nothing else).
    pub fn dir_of(&self, w: Workload) -> Option<PathBuf> {
        self.of(w)
            .first()
            .and_then(|(p, _)| p.parent().map(Path::to_path_buf))
    }
}

fn seed(w: Workload, i: usize) -> u64 {
    if w.count == 1 {
        1
    } else {
        1000 + i as u64 + (w.file_bytes << 20)
    }
}
