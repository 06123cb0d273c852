//! The destination's (or, downloading, the source's) listing as the merge's
//! input: the listing driver (`download::list`) runs as a task of its own
//! into a bounded channel, and the merge, on a blocking thread, takes one
//! name at a time from it. Names are the blob's below `prefix/`, filtered
//! as the local side is (an excluded blob must not look like a delete).
//! A listing that failed for good ends in a `Gap`: the side is incomplete.

use relay_proto::protocol::Listed;
use relay_proto::sync::entry::RemoteEntry;
use relay_proto::sync::join::Gap;
use tokio::sync::{mpsc, oneshot};

use crate::transfer::filter::Filter;
use crate::ui::report::FileError;

/// How the listing task ended: the names it handed on, or why it failed.
pub type ListingEnd = Result<u64, FileError>;

/// A listing under way, answered for: its task's channel and end.
pub struct Started {
    pub rx: mpsc::Receiver<Listed>,
    pub end: oneshot::Receiver<ListingEnd>,
}

/// The listing, one entry at a time, for a blocking thread.
pub struct RemoteEntries {
    rx: mpsc::Receiver<Listed>,
    end: Option<oneshot::Receiver<ListingEnd>>,
    /// `prefix/`, or empty for a whole container.
    below: String,
    filter: Filter,
}

impl RemoteEntries {
    pub fn new(started: Started, prefix: &str, filter: Filter) -> Self {
        Self {
            rx: started.rx,
            end: Some(started.end),
            below: listing_prefix(prefix),
            filter,
        }
    }
}

/// What is listed for a sync of `prefix`: `prefix/`, not `prefix` (which
/// would also select `prefix.txt`); the whole container for none.
pub fn listing_prefix(prefix: &str) -> String {
    let p = prefix.trim_matches('/');
    if p.is_empty() {
        String::new()
    } else {
        format!("{p}/")
    }
}

/// The merge's entry for a listed blob, its name below `below`.
pub fn entry(listed: Listed, below: &str) -> Option<RemoteEntry> {
    let name = listed.name.strip_prefix(below)?;
    if name.is_empty() {
        return None;
    }
    Some(RemoteEntry {
        name: name.to_string(),
        size: listed.size,
        last_modified: listed.last_modified,
        etag: listed.etag,
        // Set only when the relay's key verified the blob's seal: a hash
        // the blob is known to hold, never the metadata's word alone.
        vouched_sha256: listed.sha256,
    })
}

/// The `Listed` of a merge entry again, for the download driver.
pub fn listed(remote: &RemoteEntry, below: &str) -> Listed {
    Listed {
        name: format!("{below}{}", remote.name),
        size: remote.size,
        etag: remote.etag.clone(),
        last_modified: remote.last_modified,
        sha256: remote.vouched_sha256.clone(),
    }
}

impl Iterator for RemoteEntries {
    type Item = Result<RemoteEntry, Gap>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.rx.blocking_recv() {
                Some(l) => match entry(l, &self.below) {
                    Some(e) if self.filter.admits(&e.name) => return Some(Ok(e)),
                    _ => continue,
                },
                None => {
                    let end = self.end.take()?;
                    return match end.blocking_recv() {
                        Ok(Ok(_)) => None,
                        Ok(Err(e)) => Some(Err(Gap(format!("listing: {}", e.message)))),
                        Err(_) => Some(Err(Gap("listing: stopped before its end".into()))),
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(name: &str) -> Listed {
        Listed {
            name: name.into(),
            size: 1,
            etag: "\"e\"".into(),
            last_modified: Some(2),
            sha256: None,
        }
    }

    #[test]
    fn names_are_below_the_prefix_and_a_failed_listing_ends_in_a_gap() {
        assert_eq!(listing_prefix("/p/q/"), "p/q/");
        assert_eq!(listing_prefix(""), "");
        let (tx, rx) = mpsc::channel(4);
        let (end_tx, end_rx) = oneshot::channel();
        let filter = Filter::new(&[], &["*.log".into()]).expect("filter");
        let mut it = RemoteEntries::new(Started { rx, end: end_rx }, "p", filter);
        let got = std::thread::spawn(move || it.by_ref().collect::<Vec<_>>());
        for n in ["p/", "p/a", "p/b.log", "p/c/d"] {
            tx.blocking_send(l(n)).expect("send");
        }
        drop(tx);
        let e = FileError::new(crate::ui::error_code::ErrorCode::Storage, "gone", false);
        end_tx.send(Err(e)).expect("end");
        let got = got.join().expect("thread");
        let names: Vec<_> = got
            .iter()
            .map(|r| r.as_ref().map(|e| e.name.clone()).map_err(|g| g.0.clone()))
            .collect();
        assert_eq!(
            names,
            [
                Ok("a".into()),
                Ok("c/d".into()),
                Err("listing: gone".into())
            ]
        );
        let back = listed(got[0].as_ref().expect("entry"), "p/");
        assert_eq!(back, l("p/a"));
    }
}
