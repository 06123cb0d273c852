//! One listing through the relay: `List{container, prefix}` on a stream of its
//! own, then `Listing` frames (each a page's worth of names) until `ListEnd`.
//! The blobs go into a bounded channel, so a container of millions of blobs
//! costs the client a page and the channel, not the listing.
//!
//! A listing lost midway (the connection, or storage failing a page past the
//! relay's retries) is taken up again (`listing`): an outage is waited out
//! within `--patience`, other retryable failures get `--attempts`. It is taken
//! up at storage's continuation marker of the last page handed on whole (the
//! relay hands it on with each page's last frame), skipping the names of the
//! page in progress that were handed on already (`Cursor`). Never by
//! comparing names: storage orders them its own way (Azurite by UTF-16 code
//! units, so `p/😀` comes before `p/！`, the other way round in UTF-8).

use quinn::Connection;
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{List, ListEnd, Listed, Listing, Message};
use relay_transport::frames::{read_frame, write_frame};
use tokio::sync::{mpsc, oneshot};

use super::cursor::Cursor;
use super::job::Job;
use crate::relay::links::RelayLinks;
use crate::relay::retry::{Tries, Work};
use crate::sign_in::Bearer;
use crate::transfer::mode::Mode;
use crate::transfer::send::sign_in_failed;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// What a listing needs: the way to list (the relay's first connection, or
/// storage in direct mode), the token, the container and the tries it gets.
/// A download's job gives it (`ListFrom::job`); so does `ls`.
pub struct ListFrom<'a> {
    pub mode: &'a Mode,
    pub token: &'a Bearer,
    pub container: &'a str,
    pub attempts: u32,
}

impl<'a> ListFrom<'a> {
    /// A download job's listing.
    pub fn job(job: &'a Job) -> Self {
        Self {
            mode: &job.links,
            token: &job.opts.token,
            container: &job.opts.container,
            attempts: job.attempts,
        }
    }
}

/// One source's listing, through the relay or from storage, taken up again
/// after a break (`relay::retry`); the names handed on, or why the listing
/// failed for good.
pub async fn listing(job: &Job, prefix: &str, tx: mpsc::Sender<Listed>) -> Result<u64, FileError> {
    listing_from(&ListFrom::job(job), prefix, tx, None).await
}

/// `listing`, from what `from` gives: the one listing driver of download,
/// `ls` and sync. `answered` is told at the listing's first answer
/// (`Cursor::answered`), before its first name where the relay says so.
pub async fn listing_from(
    from: &ListFrom<'_>,
    prefix: &str,
    tx: mpsc::Sender<Listed>,
    answered: Option<oneshot::Sender<()>>,
) -> Result<u64, FileError> {
    let container = from.container;
    let link = match from.mode {
        Mode::Relay(links) => Some(RelayLinks::first(links)),
        Mode::Direct(_) => None,
    };
    let what = format!("listing {container}/{prefix}");
    let mut tries = Tries::new(link, from.attempts, what);
    let mut work = SourceListing {
        from,
        prefix,
        tx,
        cursor: Cursor::telling(answered),
    };
    tries.drive(&mut work).await?;
    Ok(work.cursor.handed)
}

/// One source's listing as `Tries::drive` takes it up again: from its cursor.
struct SourceListing<'a> {
    from: &'a ListFrom<'a>,
    prefix: &'a str,
    tx: mpsc::Sender<Listed>,
    cursor: Cursor,
}

impl Work for SourceListing<'_> {
    type Done = ();

    async fn attempt(&mut self, conn: Option<&Connection>) -> Result<(), FileError> {
        let (from, container) = (self.from, self.from.container);
        match (conn, from.mode) {
            (Some(conn), _) => {
                let (prefix, tx) = (self.prefix, &self.tx);
                list(conn, from.token, container, prefix, tx, &mut self.cursor).await
            }
            (None, Mode::Direct(d)) => {
                let (prefix, tx) = (self.prefix, &self.tx);
                super::direct::list(&d.storage, container, prefix, tx, &mut self.cursor).await
            }
            (None, Mode::Relay(_)) => Err(FileError::new(
                ErrorCode::Internal,
                "no connection to list on",
                false,
            )),
        }
    }
}

/// Lists `container` under `prefix` into `tx`, from `cursor`'s marker and
/// past the names it has handed on already; or why the listing failed (a
/// refusal keeps the relay's code).
pub async fn list(
    conn: &Connection,
    token: &Bearer,
    container: &str,
    prefix: &str,
    tx: &mpsc::Sender<Listed>,
    cursor: &mut Cursor,
) -> Result<(), FileError> {
    let lost = |e: &dyn std::fmt::Display| {
        FileError::new(ErrorCode::Connection, format!("listing: {e}"), true)
    };
    let token = token.current().await.map_err(sign_in_failed)?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| lost(&e))?;
    let msg = Message::List(List {
        version: PROTOCOL_VERSION,
        token,
        container: container.to_string(),
        prefix: prefix.to_string(),
        marker: cursor.marker().map(str::to_string),
    });
    let resuming = cursor.marker().is_some();
    write_frame(&mut send, &msg).await.map_err(|e| lost(&e))?;
    let _ = send.finish();
    let mut seen = 0u64;
    loop {
        let frame = read_frame(&mut recv).await.map_err(|e| lost(&e))?;
        if let Message::Listing(Listing { resumed, .. }) | Message::ListEnd(ListEnd { resumed, .. }) =
            &frame
            && resuming
            && !resumed
        {
            let _ = recv.stop(relay_proto::protocol::app_error::CLIENT_ABORT.into());
            return Err(FileError::new(
                ErrorCode::Protocol,
                "listing: this relay started the listing over instead of taking it up where it stopped (a relay from before listing markers); trying again",
                true,
            ));
        }
        if let Message::Listing(_) | Message::ListEnd(_) = &frame {
            cursor.answered();
        }
        match frame {
            Message::Listing(page) => {
                seen += page.blobs.len() as u64;
                if !hand_on(page, cursor, tx).await {
                    // The download stopped: no more names wanted.
                    let _ = recv.stop(relay_proto::protocol::app_error::CLIENT_ABORT.into());
                    return Ok(());
                }
            }
            Message::ListEnd(end) => {
                if end.blobs != seen {
                    return Err(FileError::new(
                        ErrorCode::Protocol,
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
                    ErrorCode::Protocol,
                    format!("listing: expected Listing or ListEnd, got {}", other.name()),
                    false,
                ));
            }
        }
    }
}

/// The names of one Listing frame not handed on before, into `tx`; then, on
/// a page's last frame, its marker. False if nobody takes names any more.
async fn hand_on(page: Listing, cursor: &mut Cursor, tx: &mpsc::Sender<Listed>) -> bool {
    for b in page.blobs {
        if cursor.passed(&b.name) {
            continue;
        }
        let name = b.name.clone();
        if tx.send(b).await.is_err() {
            return false;
        }
        cursor.hand(&name);
    }
    if let Some(marker) = page.marker {
        cursor.page_ended(marker);
    }
    true
}
