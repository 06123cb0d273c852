//! One container's blob names back to a client on one QUIC stream:
//! List → Listing* → ListEnd | Error (or Reject at once).
//!
//! The relay holds at most one of storage's pages at a time, and its memory
//! comes from the block budget, the caller's share first, as a download
//! range's does: the page's size (`relay_storage::listing::PageSize`, fewer
//! names when an eighth of a share cannot hold the configured page) is taken
//! before storage is asked and given back once the page's frames are written.
//! All of a page's frames must be written within the download write timeout,
//! in total, not per frame: a client that reads slowly or not at all holds a
//! page that long at most, then the stream is reset.
//!
//! A fresh listing's first frame carries no names: it is sent once storage
//! said the container is there, before the first page (`answer_for`).
//!
//! A page's last frame carries storage's continuation marker; a List that
//! brings one back is taken up there (`resumed`). The marker is the caller's
//! input: length-bounded, only ever the `marker` query of a listing of the
//! container the caller may read, and the names that come back are still
//! those under the prefix (`relay_storage::listing`).
//!
//! Pages are asked for with metadata, and an entry carries its SHA-256 only
//! when the blob's seal verifies under the relay's key (`vouched`): any
//! storage writer can set metadata, only a holder of the key can seal.

use quinn::{RecvStream, SendStream};
use relay_proto::id_key::IdKey;
use relay_proto::id_key::Owner;
use relay_proto::limits::MAX_FRAME_LEN;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{
    Code, Failure, List, ListEnd, Listed, Listing, MAX_LIST_MARKER_BYTES, Message, app_error,
};
use relay_storage::listing::{ListedBlob, Lister};
use relay_storage::read::ReadError;
use tracing::Instrument;

use super::admit::{Request, admit, admitted};
use super::fetch::{WriteFail, finish, write_frame_within};
use crate::connection::link::Link;
use crate::connection::stream_credit::StreamTicket;
use crate::state::Shared;
use crate::state::shares::Held;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::rejections::Reason;
use crate::transfer::{refuse, reject};

/// Room left in a frame for its envelope (`{"type":"listing","blobs":[...]}`).
const ENVELOPE: usize = 64;

/// Serves one List (its frame already read).
pub(crate) async fn handle(
    shared: &Shared,
    link: &Link,
    ticket: &mut StreamTicket,
    send: &mut SendStream,
    recv: &mut RecvStream,
    list: List,
) {
    let caller = match admit(shared, Request::list(&list)).await {
        Ok(c) => c,
        Err(r) => return refuse(shared, link, send, recv, r.into()).await,
    };
    if let Err(f) = check_list(&list) {
        return reject(shared, send, recv, Reason::Code(f.code), f).await;
    }
    admitted(link, ticket);
    let span = tracing::info_span!(
        "list",
        container = %safe(&list.container),
        prefix = %safe(&list.prefix),
        resumed = list.marker.is_some(),
    );
    let owner = caller.owner(&list.token.0);
    serve(shared, &owner, send, &list).instrument(span).await;
}

/// A List's own bounds, beyond the admission every stream gets: a prefix no
/// longer than a name, a marker no longer than storage's.
fn check_list(list: &List) -> Result<(), Failure> {
    if list.prefix.chars().count() > relay_proto::limits::MAX_BLOB_NAME_CHARS {
        return Err(Failure::new(
            Code::InvalidName,
            "prefix longer than a blob name may be",
        ));
    }
    if list
        .marker
        .as_ref()
        .is_some_and(|m| m.is_empty() || m.len() > MAX_LIST_MARKER_BYTES)
    {
        return Err(Failure::new(
            Code::InvalidOffer,
            format!("a listing's marker is 1 to {MAX_LIST_MARKER_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// How a listing stopped before its end.
enum Stop {
    /// Told to the client in an Error frame.
    Failed(Failure),
    /// The client did not take a page within the write timeout.
    Stalled,
    /// The client stopped the stream or went away.
    Gone,
}

async fn serve(shared: &Shared, owner: &Owner, send: &mut SendStream, list: &List) {
    let timeout = shared.storage.download.write_timeout;
    let m = &shared.metrics;
    let lister = match shared.storage.account.lister(&list.container) {
        Ok(l) => l.with_seals(),
        Err(e) => {
            let f = relay_pipeline::failure::storage_failure(&e);
            Metrics::add(&m.listings_failed, 1);
            let _ = write_frame_within(timeout, send, &Message::Error(f)).await;
            finish(send, timeout).await;
            return;
        }
    };
    let marker = list
        .marker
        .clone()
        .filter(|_| !shared.forgets_list_markers());
    let resumed = marker.is_some();
    let listed = async {
        if !resumed {
            answer_for(shared, &lister, send).await?;
        }
        pages(shared, owner, &lister, send, list, marker).await
    };
    match listed.await {
        Ok(total) => {
            Metrics::add(&m.listings_completed, 1);
            tracing::info!(blobs = total, "listed");
            let end = Message::ListEnd(ListEnd {
                blobs: total,
                resumed,
            });
            let _ = write_frame_within(timeout, send, &end).await;
            finish(send, timeout).await;
        }
        Err(Stop::Failed(f)) => {
            Metrics::add(&m.listings_failed, 1);
            tracing::warn!(reason = %safe(&f.message), "listing failed");
            let _ = write_frame_within(timeout, send, &Message::Error(f)).await;
            finish(send, timeout).await;
        }
        Err(Stop::Stalled) => {
            Metrics::add(&m.listings_failed, 1);
            Metrics::add(&m.listings_stalled, 1);
            tracing::warn!(
                timeout_s = timeout.as_secs(),
                "client did not take a listing page; dropped"
            );
            let _ = send.reset(app_error::PROTOCOL.into());
        }
        Err(Stop::Gone) => {
            Metrics::add(&m.listings_failed, 1);
            tracing::debug!("client stopped the listing");
        }
    }
}

/// A fresh listing's first frame, before storage's first page: no names,
/// only the relay's word that the caller may list this container and that
/// it is there. Storage sorts and writes out a whole page before its first
/// name comes back; a client that waits for the listing to be answered for
/// (a sync's sends, which must not start for a caller who may not list)
/// starts that much sooner. Old clients take it as a frame of no names.
async fn answer_for(shared: &Shared, lister: &Lister, send: &mut SendStream) -> Result<(), Stop> {
    lister
        .container_exists()
        .await
        .map_err(|e| Stop::Failed(list_failure(e)))?;
    let frame = Message::Listing(Listing {
        blobs: Vec::new(),
        marker: None,
        resumed: false,
    });
    match write_frame_within(shared.storage.download.write_timeout, send, &frame).await {
        Ok(()) => Ok(()),
        Err(WriteFail::Gone) => Err(Stop::Gone),
        Err(WriteFail::TimedOut) => Err(Stop::Stalled),
    }
}

/// Every page from `marker` (the List's, or the start), each under its
/// memory and written within the write timeout; the names sent.
async fn pages(
    shared: &Shared,
    owner: &Owner,
    lister: &Lister,
    send: &mut SendStream,
    list: &List,
    mut marker: Option<String>,
) -> Result<u64, Stop> {
    let size = shared.list_page();
    let share = shared.share_of(owner);
    let timeout = shared.storage.download.write_timeout;
    let resumed = marker.is_some();
    let mut total = 0u64;
    loop {
        let held = hold(shared, &share, size.bytes()).await.ok_or_else(|| {
            Stop::Failed(Failure::new(
                Code::Busy,
                format!(
                    "no memory for a listing page within {} s; retry later",
                    shared.limits.budget_wait.as_secs()
                ),
            ))
        })?;
        let page = lister
            .page(&list.prefix, marker.as_deref(), size.names)
            .await
            .map_err(|e| Stop::Failed(list_failure(e)))?;
        total += page.blobs.len() as u64;
        let next = page.next_marker;
        let key = &shared.storage.id_key;
        let listed = page
            .blobs
            .into_iter()
            .map(|b| vouched(b, key, &list.container))
            .collect();
        let frames = frames(listed, next.clone(), resumed);
        // The page in all, not each frame, within the timeout.
        let write = async {
            for frame in frames {
                write_frame_within(timeout, send, &Message::Listing(frame)).await?;
            }
            Ok::<(), WriteFail>(())
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => {}
            Ok(Err(WriteFail::Gone)) => return Err(Stop::Gone),
            Ok(Err(WriteFail::TimedOut)) | Err(_) => return Err(Stop::Stalled),
        }
        drop(held);
        match next {
            Some(m) => marker = Some(m),
            None => return Ok(total),
        }
    }
}

/// Memory for one page: the caller's share, then the relay's budget, within
/// the budget wait (`None`: not granted).
async fn hold(shared: &Shared, share: &relay_storage::staging::Budget, bytes: u64) -> Option<Held> {
    let take = shared.hold(share, bytes);
    tokio::time::timeout(shared.limits.budget_wait, take)
        .await
        .ok()
        .flatten()
}

/// A listing's storage failure as the client hears it.
fn list_failure(e: ReadError) -> Failure {
    match e {
        ReadError::NotFound => Failure::new(Code::NotFound, "no such container"),
        ReadError::Storage(e) => relay_pipeline::failure::storage_failure(&e),
        other => Failure::new(Code::Internal, other.to_string()),
    }
}

/// A listed blob as the client hears of it: its SHA-256 only when its seal
/// holds under `key`.
pub fn vouched(b: ListedBlob, key: &IdKey, container: &str) -> Listed {
    let sha256 = b.sealed_sha256(key, container);
    Listed {
        name: b.name,
        size: b.size,
        etag: b.etag,
        last_modified: b.last_modified,
        sha256,
    }
}

/// A page's blobs in Listing frames, each under the frame limit, in order;
/// the last carries `marker` (where the next page starts), and a page without
/// blobs but with a marker is one empty frame, so the client still learns it.
/// A marker longer than a List may bring back is not handed on (the client
/// then takes a lost listing up from an earlier one). `resumed` is set on
/// every frame of a listing taken up from a marker.
pub fn frames(blobs: Vec<Listed>, marker: Option<String>, resumed: bool) -> Vec<Listing> {
    let marker = marker.filter(|m| m.len() <= MAX_LIST_MARKER_BYTES);
    // Room for the envelope, `resumed` and the marker, escaped (at most six
    // bytes a byte: 48 KiB), in every frame: an entry (at most 1,024
    // characters of six bytes, and its numbers) still fits beside them.
    let reserved = ENVELOPE
        + marker.as_ref().map_or(0, |m| {
            serde_json::to_vec(m).map_or(MAX_FRAME_LEN, |v| v.len()) + 16
        });
    let frame = |blobs| Listing {
        blobs,
        marker: None,
        resumed,
    };
    let mut out = Vec::new();
    let mut current: Vec<Listed> = Vec::new();
    let mut used = reserved;
    for entry in blobs {
        // Its JSON and a comma.
        let len = serde_json::to_vec(&entry).map_or(MAX_FRAME_LEN, |v| v.len()) + 1;
        if used + len > MAX_FRAME_LEN && !current.is_empty() {
            out.push(frame(std::mem::take(&mut current)));
            used = reserved;
        }
        used += len;
        current.push(entry);
    }
    if !current.is_empty() || marker.is_some() {
        out.push(frame(current));
    }
    if let Some(last) = out.last_mut() {
        last.marker = marker;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn longest(i: u64) -> Listed {
        Listed {
            // The longest names, escaped at six bytes a character.
            name: format!("{i:04}{}", "\u{1}".repeat(1020)),
            size: i,
            etag: "\"0x8DC0FFEE\"".into(),
            last_modified: Some(1_700_000_000),
            sha256: Some("ab".repeat(32)),
        }
    }

    #[test]
    fn only_a_seal_that_holds_under_the_relays_key_is_vouched_for() {
        let key = IdKey::random();
        let sha = "cd".repeat(32);
        let blob = |sha256: Option<String>, seal: Option<String>| ListedBlob {
            name: "p/a".into(),
            size: 5,
            etag: "\"0x1\"".into(),
            last_modified: None,
            sha256,
            seal,
        };
        let good = key.seal("c", "p/a", 5, &sha);
        let v = vouched(blob(Some(sha.clone()), Some(good.clone())), &key, "c");
        assert_eq!(v.sha256.as_deref(), Some(sha.as_str()));
        // Metadata anyone could set, a seal of another key, another
        // container's, another SHA-256's: nothing vouched.
        assert_eq!(
            vouched(blob(Some(sha.clone()), None), &key, "c").sha256,
            None
        );
        let theirs = IdKey::random().seal("c", "p/a", 5, &sha);
        assert_eq!(
            vouched(blob(Some(sha.clone()), Some(theirs)), &key, "c").sha256,
            None
        );
        assert_eq!(
            vouched(blob(Some(sha.clone()), Some(good.clone())), &key, "d").sha256,
            None
        );
        let other = "ef".repeat(32);
        assert_eq!(
            vouched(blob(Some(other), Some(good)), &key, "c").sha256,
            None
        );
    }

    fn check(frames: &[Listing]) -> Vec<String> {
        let mut seen = Vec::new();
        for f in frames {
            let encoded = relay_proto::codec::encode(&Message::Listing(f.clone())).expect("encode");
            assert!(encoded.len() - relay_proto::codec::HEADER_LEN <= MAX_FRAME_LEN);
            seen.extend(f.blobs.iter().map(|b| b.name.clone()));
        }
        seen
    }

    #[test]
    fn frames_stay_under_the_limit_and_keep_every_name_in_order() {
        let blobs: Vec<Listed> = (0..300).map(longest).collect();
        let names: Vec<String> = blobs.iter().map(|b| b.name.clone()).collect();
        let frames = frames(blobs, None, false);
        assert!(frames.len() > 1);
        assert_eq!(check(&frames), names);
        assert!(frames.iter().all(|f| f.marker.is_none() && !f.resumed));
        assert!(super::frames(Vec::new(), None, false).is_empty());
    }

    #[test]
    fn a_pages_marker_rides_on_its_last_frame_within_the_limit() {
        // The longest marker a List may bring back, escaped at six bytes a byte.
        let marker = "\u{1}".repeat(MAX_LIST_MARKER_BYTES);
        let blobs: Vec<Listed> = (0..100).map(longest).collect();
        let names: Vec<String> = blobs.iter().map(|b| b.name.clone()).collect();
        let frames = frames(blobs, Some(marker.clone()), true);
        assert_eq!(check(&frames), names);
        let (last, rest) = frames.split_last().expect("frames");
        assert_eq!(last.marker.as_deref(), Some(marker.as_str()));
        assert!(rest.iter().all(|f| f.marker.is_none()));
        assert!(frames.iter().all(|f| f.resumed));
        // A page storage sent empty still hands on where the next one starts.
        let empty = super::frames(Vec::new(), Some("m".into()), false);
        assert_eq!(empty.len(), 1);
        assert_eq!(
            (empty[0].blobs.len(), empty[0].marker.as_deref()),
            (0, Some("m"))
        );
        // One a List could not bring back is not handed on.
        let long = "m".repeat(MAX_LIST_MARKER_BYTES + 1);
        let dropped = super::frames(vec![longest(1)], Some(long), false);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].marker, None);
    }

    #[test]
    fn a_list_is_held_to_its_bounds() {
        let list = |prefix: &str, marker: Option<String>| List {
            version: relay_proto::limits::PROTOCOL_VERSION,
            token: relay_proto::protocol::Secret("t".into()),
            container: "c".into(),
            prefix: prefix.into(),
            marker,
        };
        assert!(check_list(&list("p/", None)).is_ok());
        assert!(check_list(&list("p/", Some("2!opaque".into()))).is_ok());
        let longest = "m".repeat(MAX_LIST_MARKER_BYTES);
        assert!(check_list(&list("", Some(longest.clone()))).is_ok());
        let refused = |l: List| check_list(&l).map_err(|f| f.code);
        assert_eq!(
            refused(list("", Some(longest + "m"))),
            Err(Code::InvalidOffer)
        );
        assert_eq!(
            refused(list("", Some(String::new()))),
            Err(Code::InvalidOffer)
        );
        assert_eq!(
            refused(list(&"p".repeat(1025), None)),
            Err(Code::InvalidName)
        );
    }
}
