//! One listing through the relay: `List{container, prefix}` on a stream of its
//! own, then `Listing` frames (each a page's worth of names) until `ListEnd`.
//! The blobs go into a bounded channel, so a container of millions of blobs
//! costs the client a page and the channel, not the listing.

use quinn::Connection;
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{List, Listed, Message};
use relay_transport::frames::{read_frame, write_frame};
use tokio::sync::mpsc;

use crate::sign_in::Bearer;
use crate::transfer::send::sign_in_failed;
use crate::ui::report::FileError;

/// Lists `container` under `prefix` into `tx`; the count the relay reported
/// at the end, or why the listing failed (a refusal keeps the relay's code).
pub async fn list(
    conn: &Connection,
    token: &Bearer,
    container: &str,
    prefix: &str,
    tx: mpsc::Sender<Listed>,
) -> Result<u64, FileError> {
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
                    if tx.send(b).await.is_err() {
                        // The download stopped: no more names wanted.
                        let _ = recv.stop(relay_proto::protocol::app_error::CLIENT_ABORT.into());
                        return Ok(seen);
                    }
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
                return Ok(seen);
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
