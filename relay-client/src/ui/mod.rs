//! What the person (or a script) sees: each file's report and the summary
//! (`report`; a `--json` summary's reports in bounded memory: `file_list`), progress bars and status lines (`progress`, `live_list`),
//! notices while the relay is away (`weather`), sizes as people write them
//! (`units`), and which build this is (`version`).
//!
//! The bottom layer: imports nothing else of this crate, so every other
//! layer can report through it.

pub mod error_code;
pub mod file_list;
pub mod live_list;
pub mod progress;
pub mod report;
pub mod units;
pub mod version;
pub mod weather;
