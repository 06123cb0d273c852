//! The files every method uploads: generated once per bench run from fixed
//! seeds, so all methods and profiles send identical bytes.

use std::path::{Path, PathBuf};

use relay_tests::files::write_random;

use crate::plan::{Plan, Workload};

/// (path, SHA-256 hex) per file, per workload.
pub struct Files {
    large: Vec<(PathBuf, String)>,
    small: Vec<(PathBuf, String)>,
}

impl Files {
    /// Writes the files under `dir` (random data: storage and transport
    /// cannot compress or deduplicate it).
    pub fn generate(dir: &Path, plan: &Plan) -> Self {
        let mut large = Vec::new();
        let mut small = Vec::new();
        if plan.workloads.contains(&Workload::Large) {
            let p = dir.join("large").join("large-0.bin");
            let sha = write_random(&p, plan.large_bytes, 1);
            large.push((p, sha));
        }
        if plan.workloads.contains(&Workload::Small) {
            for i in 0..plan.small_count {
                let p = dir.join("small").join(format!("small-{i:04}.bin"));
                let sha = write_random(&p, plan.small_bytes, 1000 + i as u64);
                small.push((p, sha));
            }
        }
        Self { large, small }
    }

    pub fn of(&self, w: Workload) -> &[(PathBuf, String)] {
        match w {
            Workload::Large => &self.large,
            Workload::Small => &self.small,
        }
    }
}
