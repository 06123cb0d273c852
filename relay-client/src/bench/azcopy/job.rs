//! What an AzCopy run said, read without running it: its job summary (the
//! `EndOfJob` line of `--output-type json`), the facts and the end of the job
//! in its log file as it grows, and its output with a SAS signature removed.
//!
//! Why the log: AzCopy looks at its job every 2 s and exits at the first look
//! after the job ended, so its process time holds 0-2 s of waiting (a copy of
//! one 1 KB file takes 2.0 s). The log says "... successfully completed,
//! cancelled or paused" the moment the last transfer ended; the bench times
//! AzCopy to that line, as it times relay-client to its last commit.

use serde_json::Value;

/// The line AzCopy's job log writes when every part of the job has ended.
const DONE_MARKER: &str = "successfully completed, cancelled or paused";
/// A log line longer than this is skipped, not kept (request dumps can be
/// long; the lines read here are short), so the watch's memory is bounded.
const MAX_LINE: usize = 64 << 10;

/// The end of an AzCopy job, from its `EndOfJob` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    /// `Completed`, `CompletedWithErrors`, `Failed`, `Cancelled`, ...
    pub status: String,
    pub transfers: u64,
    pub completed: u64,
    pub failed: u64,
    pub skipped: u64,
    pub bytes: u64,
}

impl JobSummary {
    /// Why this job did not move exactly `files` files, or None.
    pub fn incomplete(&self, files: usize) -> Option<String> {
        let want = files as u64;
        if self.status == "Completed"
            && self.completed == want
            && self.transfers == want
            && self.failed == 0
            && self.skipped == 0
        {
            return None;
        }
        Some(format!(
            "AzCopy job {}: {} of {} transfers completed ({} failed, {} skipped; {files} files expected)",
            self.status, self.completed, self.transfers, self.failed, self.skipped
        ))
    }
}

/// The job summary in AzCopy's `--output-type json` output (one JSON object
/// per line), or the error it printed instead (the last `Error` message).
pub fn summary(stdout: &str) -> Result<JobSummary, String> {
    let mut end = None;
    let mut error = None;
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        let content = msg.get("MessageContent").and_then(Value::as_str);
        match msg.get("MessageType").and_then(Value::as_str) {
            Some("EndOfJob") => end = content.map(str::to_string),
            Some("Error") => error = content.map(str::to_string),
            _ => {}
        }
    }
    let Some(end) = end else {
        return Err(error.unwrap_or_else(|| "AzCopy printed no job summary".to_string()));
    };
    let v: Value = serde_json::from_str(&end).map_err(|e| format!("AzCopy's job summary: {e}"))?;
    // AzCopy writes its counts as strings.
    let count = |k: &str| -> u64 {
        match v.get(k) {
            Some(Value::String(s)) => s.parse().unwrap_or(0),
            Some(n) => n.as_u64().unwrap_or(0),
            None => 0,
        }
    };
    Ok(JobSummary {
        status: v
            .get("JobStatus")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string(),
        transfers: count("TotalTransfers"),
        completed: count("TransfersCompleted"),
        failed: count("TransfersFailed"),
        skipped: count("TransfersSkipped"),
        bytes: count("TotalBytesTransferred"),
    })
}

/// What the job log has said so far, fed as it grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFacts {
    /// `AzcopyVersion  10.32.2`.
    pub version: Option<String>,
    /// `Max concurrent network operations: 32` (its connections), or with
    /// AUTO the latest `Trying N concurrent connections` of its tuning.
    pub concurrency: Option<u64>,
    /// `Specified chunk size 8388608` (its block size), first transfer's.
    pub block_size_bytes: Option<u64>,
    /// The job's end was logged.
    pub done: bool,
}

/// Reads a log as bytes arrive, one line at a time, in bounded memory.
#[derive(Debug, Default)]
pub struct LogWatch {
    facts: LogFacts,
    line: Vec<u8>,
    /// The current line passed `MAX_LINE`: skip it to its end.
    skipping: bool,
}

impl LogWatch {
    pub fn facts(&self) -> &LogFacts {
        &self.facts
    }

    /// Feed the next bytes of the log.
    pub fn feed(&mut self, bytes: &[u8]) {
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            let ends = chunk.last() == Some(&b'\n');
            if !self.skipping {
                if self.line.len() + chunk.len() > MAX_LINE {
                    self.skipping = true;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            if ends {
                if !self.skipping {
                    let line = String::from_utf8_lossy(&self.line).into_owned();
                    self.read_line(&line);
                }
                self.line.clear();
                self.skipping = false;
            }
        }
    }

    fn read_line(&mut self, line: &str) {
        let f = &mut self.facts;
        if line.contains(DONE_MARKER) {
            f.done = true;
        } else if let Some(v) = after(line, "AzcopyVersion") {
            f.version.get_or_insert_with(|| v.to_string());
        } else if let Some(n) = after(line, "Max concurrent network operations:") {
            f.concurrency = f.concurrency.or_else(|| leading_number(n));
        } else if let Some(n) = after(line, "Trying")
            && line.contains("concurrent connections")
        {
            f.concurrency = leading_number(n).or(f.concurrency);
        } else if let Some(n) = after(line, "Specified chunk size") {
            f.block_size_bytes = f.block_size_bytes.or_else(|| leading_number(n));
        }
    }
}

/// The trimmed text after `key` in `line`.
fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.find(key).map(|i| line[i + key.len()..].trim())
}

fn leading_number(s: &str) -> Option<u64> {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `text` with the SAS signature `sig` (the `sig=` value, as signed or
/// percent-encoded) replaced: whatever AzCopy printed can be shown, never the SAS.
pub fn redact(text: &str, sas: &str) -> String {
    let Some(sig) = url::form_urlencoded::parse(sas.as_bytes())
        .find(|(k, _)| k == "sig")
        .map(|(_, v)| v.into_owned())
        .filter(|s| !s.is_empty())
    else {
        return text.to_string();
    };
    let encoded: String = url::form_urlencoded::byte_serialize(sig.as_bytes()).collect();
    text.replace(&encoded, "REDACTED").replace(&sig, "REDACTED")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two lines of AzCopy 10.32.2's output of an upload of one file (its
    /// progress message trimmed), as `--output-type json` prints them.
    const DONE: &str = r#"{"TimeStamp":"2026-12-06T22:31:35.1Z","MessageType":"Init","MessageContent":"{\"LogFileLocation\":\"/tmp/l/x.log\",\"JobID\":\"x\",\"IsCleanupJob\":false}","PromptDetails":{"PromptType":"","ResponseOptions":null,"PromptTarget":""}}
{"TimeStamp":"2026-12-06T22:31:37.7Z","MessageType":"EndOfJob","MessageContent":"{\"ErrorMsg\":\"\",\"JobStatus\":\"Completed\",\"TotalTransfers\":\"1\",\"TransfersCompleted\":\"1\",\"TransfersFailed\":\"0\",\"TransfersSkipped\":\"0\",\"TotalBytesTransferred\":\"33554432\",\"FailedTransfers\":[]}","PromptDetails":{"PromptType":"","ResponseOptions":null,"PromptTarget":""}}
"#;

    #[test]
    fn reads_a_completed_job_and_refuses_any_other() {
        let s = summary(DONE).expect("a summary");
        assert_eq!(s.status, "Completed");
        assert_eq!((s.transfers, s.completed, s.bytes), (1, 1, 33_554_432));
        assert_eq!(s.incomplete(1), None);
        // The files the bench expected, not the transfers AzCopy found.
        assert!(
            s.incomplete(2)
                .is_some_and(|e| e.contains("2 files expected"))
        );
        let failed = DONE
            .replace(r#"\"Completed\""#, r#"\"CompletedWithErrors\""#)
            .replace(r#"TransfersFailed\":\"0"#, r#"TransfersFailed\":\"1"#);
        let s = summary(&failed).expect("a summary");
        assert!(s.incomplete(1).is_some_and(|e| e.contains("1 failed")));
    }

    #[test]
    fn without_a_summary_the_error_it_printed_is_the_reason() {
        let out = r#"{"MessageType":"Error","MessageContent":"failed to perform copy command due to error: no SAS"}"#;
        assert_eq!(
            summary(out),
            Err("failed to perform copy command due to error: no SAS".to_string())
        );
        assert!(summary("not json\n").is_err());
    }

    #[test]
    fn the_log_says_when_the_job_ended_and_how_it_ran() {
        let log = "2026/12/06 22:31:35 AzcopyVersion  10.32.2\n\
            2026/12/06 22:31:35 Max concurrent network operations: 32 (Based on number of CPUs.)\n\
            2026/12/06 22:31:35 INFO: [P#0-T#0] Starting transfer: Source \"/a\" Destination \"http://h/a\". Specified chunk size 8388608\n\
            2026/12/06 22:31:36 all parts of entire Job 8f18 successfully completed, cancelled or paused\n";
        // Fed in pieces that cut lines anywhere: the same facts.
        for cut in [1, 7, 64, log.len()] {
            let mut w = LogWatch::default();
            for piece in log.as_bytes().chunks(cut) {
                assert!(!w.facts().done, "done before its line was whole");
                w.feed(piece);
            }
            let f = w.facts();
            assert_eq!(f.version.as_deref(), Some("10.32.2"));
            assert_eq!(f.concurrency, Some(32));
            assert_eq!(f.block_size_bytes, Some(8 << 20));
            assert!(f.done, "cut {cut}");
        }
    }

    #[test]
    fn auto_tuning_reports_the_connections_it_reached() {
        let mut w = LogWatch::default();
        w.feed(b"2026/12/06 23:12:44 Max concurrent network operations:  will be dynamically tuned up to 3000 (Based on auto-tuning limit.)\n");
        assert_eq!(w.facts().concurrency, None);
        w.feed(b"2026/12/06 23:12:44 Trying 4 concurrent connections (initial starting point)\n");
        w.feed(b"2026/12/06 23:12:50 Trying 16 concurrent connections (seeking optimum)\n");
        assert_eq!(w.facts().concurrency, Some(16));
    }

    #[test]
    fn a_long_line_is_skipped_in_bounded_memory() {
        let mut w = LogWatch::default();
        let long = vec![b'x'; MAX_LINE * 3];
        w.feed(&long);
        assert!(w.line.len() <= MAX_LINE);
        w.feed(b" successfully completed, cancelled or paused\n");
        assert!(!w.facts().done, "the end of an overlong line is not a line");
        w.feed(b"Job x successfully completed, cancelled or paused\n");
        assert!(w.facts().done);
    }

    #[test]
    fn the_signature_is_removed_in_both_spellings() {
        let sas = "sv=2021-08-06&sr=c&sp=w&sig=ab%2Fc%2Bd%3D";
        let text = "PUT http://h/c/b?sp=w&sig=ab%2Fc%2Bd%3D failed; raw ab/c+d= too";
        let clean = redact(text, sas);
        assert!(
            !clean.contains("ab%2Fc%2Bd%3D") && !clean.contains("ab/c+d="),
            "{clean}"
        );
        assert!(clean.contains("sig=REDACTED"), "{clean}");
        assert_eq!(redact("no sas here", "sv=1"), "no sas here");
    }
}
