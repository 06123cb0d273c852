//! `--overwrite=if-different|if-newer`: what to do with a file whose blob exists
//! and does not hold these bytes (identical files were already skipped, on the
//! relay's verified record). Pure: the caller brings the blob the relay (or
//! storage) reported and the source's modification time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relay_proto::protocol::{ExistingBlob, Overwrite};

/// The rule the user chose for blobs that exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncRule {
    /// Replace a blob whose bytes differ.
    IfDifferent,
    /// Replace a blob only if the source was modified after the blob's last commit.
    IfNewer,
}

/// What becomes of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Upload again with this overwrite policy: `IfMatch` the version that was
    /// compared, so a blob another writer committed in between is never
    /// replaced unseen (that upload ends in `conflict`).
    Replace(Overwrite),
    /// Leave the blob as it is (`skipped`, with this reason).
    Skip(&'static str),
    /// Cannot decide: the file fails with this explanation.
    Refuse(String),
}

/// Decides for one file. `existing` is the blob in the way, as reported with the
/// `exists` refusal (an older relay may not report it); `source_mtime` the file's
/// modification time, if the platform has one.
pub fn decide(
    rule: SyncRule,
    existing: Option<&ExistingBlob>,
    source_mtime: Option<SystemTime>,
) -> Decision {
    let replace_seen = |e: &ExistingBlob| {
        Decision::Replace(Overwrite::IfMatch {
            etag: e.etag.clone(),
        })
    };
    match (rule, existing) {
        (SyncRule::IfDifferent, Some(e)) => replace_seen(e),
        // A relay that does not say which version is there (to a token that may
        // not read the container, or an older relay): replace whatever is.
        (SyncRule::IfDifferent, None) => Decision::Replace(Overwrite::Always),
        (SyncRule::IfNewer, Some(e)) => match (e.last_modified, source_mtime) {
            // Last-Modified has whole seconds: a source modified within the second
            // of the commit counts as newer, as the blob may hold older bytes.
            (Some(secs), Some(mtime)) if mtime > UNIX_EPOCH + Duration::from_secs(secs) => {
                replace_seen(e)
            }
            (Some(_), Some(_)) => Decision::Skip("not newer"),
            (None, _) => Decision::Refuse(
                "a blob with this name exists and its modification time is unknown \
                 (the relay did not report it); cannot apply --overwrite=if-newer"
                    .into(),
            ),
            (_, None) => Decision::Refuse(
                "the source has no modification time; cannot apply --overwrite=if-newer".into(),
            ),
        },
        (SyncRule::IfNewer, None) => Decision::Refuse(
            "a blob with this name exists and the relay did not say which version \
             (it tells only a token that may read the container, or the blob's own \
             writer; or the relay is older); cannot apply --overwrite=if-newer"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: u64 = 1_700_000_000;

    fn blob(last_modified: Option<u64>) -> ExistingBlob {
        ExistingBlob {
            etag: "\"0x8D\"".into(),
            last_modified,
        }
    }

    fn at(secs: u64, millis: u64) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
    }

    fn if_match() -> Decision {
        Decision::Replace(Overwrite::IfMatch {
            etag: "\"0x8D\"".into(),
        })
    }

    #[test]
    fn every_case_decides_as_documented() {
        use SyncRule::*;
        let known = blob(Some(COMMIT));
        let unknown_time = blob(None);
        type Row<'a> = (
            &'a str,
            SyncRule,
            Option<&'a ExistingBlob>,
            Option<SystemTime>,
            Decision,
        );
        let table: Vec<Row> = vec![
            (
                "differs: replace the version compared",
                IfDifferent,
                Some(&known),
                at(1, 0),
                if_match(),
            ),
            (
                "differs, relay without version: replace",
                IfDifferent,
                None,
                at(1, 0),
                Decision::Replace(Overwrite::Always),
            ),
            (
                "source an hour newer: replace that version",
                IfNewer,
                Some(&known),
                at(COMMIT + 3600, 0),
                if_match(),
            ),
            (
                "source modified within the commit's second: newer",
                IfNewer,
                Some(&known),
                at(COMMIT, 400),
                if_match(),
            ),
            (
                "source modified at the commit's whole second: not newer",
                IfNewer,
                Some(&known),
                at(COMMIT, 0),
                Decision::Skip("not newer"),
            ),
            (
                "source older: skip",
                IfNewer,
                Some(&known),
                at(COMMIT - 60, 0),
                Decision::Skip("not newer"),
            ),
        ];
        for (name, rule, existing, mtime, want) in table {
            assert_eq!(decide(rule, existing, mtime), want, "{name}");
        }
        for (name, existing, mtime) in [
            ("blob time unknown", Some(&unknown_time), at(COMMIT, 0)),
            ("no blob reported", None, at(COMMIT, 0)),
            ("source time unknown", Some(&known), None),
        ] {
            assert!(
                matches!(decide(IfNewer, existing, mtime), Decision::Refuse(m) if m.contains("if-newer")),
                "{name}"
            );
        }
    }
}
