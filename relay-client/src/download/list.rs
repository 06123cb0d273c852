//! One listing through the relay: `List{container, prefix}` on a stream of its
//! own, then `Listing` frames (each a page's worth of names) until `ListEnd`.
//! The blobs go into a bounded channel, so a container of millions of blobs
//! costs the client a page and the channel, not the listing.
//!
//! A listing lost midway (the connection, or storage failing a page past the
//! relay's retries) is taken up again (`listing`): an outage is waited out
//! within `--patience`, other retryable failures get `--attempts`, and the
//! listing starts over skipping the names already handed on. Storage lists in
//! name order (byte order of the UTF-8 names), so one name, the last handed
//! on, says where to take it up.

use std::time::Duration;

use quinn::Connection;
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{List, Listed, Message};
use relay_transport::frames::{read_frame, write_frame};
use tokio::sync::mpsc;

use relay_storage::retry::Backoff;

use super::{Job, relay};
use crate::sign_in::Bearer;
use crate::transfer::file::weathered;
use crate::transfer::send::sign_in_failed;
use crate::ui::report::FileError;

/// Where a listing got to: the last name handed on, and how many were.
#[derive(Debug, Default)]
pub struct Cursor {
    last: Option<String>,
    pub handed: u64,
}

impl Cursor {
    /// Whether `name` was handed on by an earlier attempt of this listing.
    pub fn passed(&self, name: &str) -> bool {
        self.last.as_deref().is_some_and(|last| name <= last)
    }

    pub fn hand(&mut self, name: &str) {
        self.last = Some(name.to_string());
        self.handed += 1;
    }
}

/// One source's listing, through the relay or from storage, taken up again
/// after a break; the names handed on, or why the listing failed for good.
pub(super) async fn listing(
    job: &Job,
    prefix: &str,
    tx: mpsc::Sender<Listed>,
) -> Result<u64, FileError> {
    let backoff = Backoff {
        initial: Duration::from_millis(500),
        cap: Duration::from_secs(15),
        max_attempts: job.attempts,
    };
    let container = &job.opts.container;
    let mut cursor = Cursor::default();
    let mut tries = 0;
    loop {
        tries += 1;
        let result = match (relay(&job.links), &job.direct) {
            (Some(links), _) => {
                let link = links.first();
                match link.get().await {
                    Ok(conn) => {
                        let outages = link.outages();
                        let r = list(&conn, &job.opts.token, container, prefix, &tx, &mut cursor);
                        match r.await {
                            // The relay was lost and came back: not an attempt.
                            Err(e)
                                if e.retryable
                                    && conn.close_reason().is_some()
                                    && link.patient()
                                    && weathered(link, outages).await =>
                            {
                                tries -= 1;
                                continue;
                            }
                            r => r,
                        }
                    }
                    // The run stops resumably (the download loop sees it).
                    Err(_) if link.gave_up() => std::future::pending().await,
                    Err(e) => Err(e),
                }
            }
            (None, Some(d)) => {
                super::direct::list(&d.storage, container, prefix, &tx, &mut cursor).await
            }
            (None, None) => Err(FileError::new("internal", "no way to list", false)),
        };
        match result {
            Ok(()) => return Ok(cursor.handed),
            Err(e) if e.retryable && backoff.allows(tries) => {
                let delay = backoff.delay(tries, rand::random::<f64>());
                tracing::warn!(attempt = tries, ?delay, error = %e.message, "listing lost; taking it up again");
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Lists `container` under `prefix` into `tx`, past the names `cursor` has
/// handed on already; or why the listing failed (a refusal keeps the relay's
/// code).
pub async fn list(
    conn: &Connection,
    token: &Bearer,
    container: &str,
    prefix: &str,
    tx: &mpsc::Sender<Listed>,
    cursor: &mut Cursor,
) -> Result<(), FileError> {
    let lost =
        |e: &dyn std::fmt::Display| FileError::new("connection", format!("listing: {e}"), true);
    let token = token.current().await.map_err(sign_in_failed)?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| lost(&e))?;
    let msg = Message::List(List {
        version: PROTOCOL_VERSION,
        token,
        container: container.to_string(),
        prefix: prefix.to_string(),
    });
    write_frame(&mut send, &msg).await.map_err(|e| lost(&e))?;
    let _ = send.finish();
    let mut seen = 0u64;
    loop {
        match read_frame(&mut recv).await.map_err(|e| lost(&e))? {
            Message::Listing(page) => {
                for b in page.blobs {
                    seen += 1;
                    if cursor.passed(&b.name) {
                        continue;
                    }
                    let name = b.name.clone();
                    if tx.send(b).await.is_err() {
                        // The download stopped: no more names wanted.
                        let _ = recv.stop(relay_proto::protocol::app_error::CLIENT_ABORT.into());
                        return Ok(());
                    }
                    cursor.hand(&name);
                }
            }
            Message::ListEnd(end) => {
                if end.blobs != seen {
                    return Err(FileError::new(
                        "protocol",
                        format!(
                            "listing: the relay counted {} blobs and sent {seen}",
                            end.blobs
                        ),
                        false,
                    ));
                }
                return Ok(());
            }
            Message::Reject(f) | Message::Error(f) => {
                return Err(FileError::from_relay(f.code, f.message));
            }
            other => {
                return Err(FileError::new(
                    "protocol",
                    format!("listing: expected Listing or ListEnd, got {}", other.name()),
                    false,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_taken_up_again_skips_what_it_handed_on() {
        let mut c = Cursor::default();
        assert!(!c.passed(""));
        assert!(!c.passed("a"));
        c.hand("run1/b");
        assert!(c.passed("run1/a") && c.passed("run1/b"));
        assert!(!c.passed("run1/b0") && !c.passed("run1/c"));
        assert_eq!(c.handed, 1);
    }
}
