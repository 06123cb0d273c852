//! One container's blob names back to a client on one QUIC stream (issue 50):
//! List → Listing* → ListEnd | Error (or Reject at once).
//!
//! The relay holds at most one of storage's pages (`DownloadLimits::list_page`
//! blobs) and cuts it into frames under the frame limit; each write waits at
//! most the download write timeout, so a client that stops reading holds one
//! page, then nothing.

use quinn::{RecvStream, SendStream};
use relay_proto::limits::MAX_FRAME_LEN;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{Code, Failure, List, ListEnd, Listed, Listing, Message, app_error};
use relay_storage::read::ListedBlob;
use tracing::Instrument;

use super::fetch::{admit, admitted, finish, write_frame_within};
use crate::connection::link::Link;
use crate::connection::stream_credit::StreamTicket;
use crate::state::Shared;
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
    if let Err(f) = admit(shared, &list.version, &list.token.0, &list.container).await {
        return refuse(shared, link, send, recv, f).await;
    }
    if list.prefix.chars().count() > relay_proto::limits::MAX_BLOB_NAME_CHARS {
        let f = Failure::new(Code::InvalidName, "prefix longer than a blob name may be");
        return reject(shared, send, recv, Reason::Code(f.code), f).await;
    }
    admitted(link, ticket);
    let span = tracing::info_span!(
        "list",
        container = %safe(&list.container),
        prefix = %safe(&list.prefix),
    );
    serve(shared, send, &list).instrument(span).await;
}

async fn serve(shared: &Shared, send: &mut SendStream, list: &List) {
    let timeout = shared.download.write_timeout;
    let lister = match shared.storage.lister(&list.container) {
        Ok(l) => l,
        Err(e) => {
            let f = relay_pipeline::failure::storage_failure(&e);
            let _ = write_frame_within(timeout, send, &Message::Error(f)).await;
            finish(send, timeout).await;
            return;
        }
    };
    let mut marker: Option<String> = None;
    let mut total = 0u64;
    loop {
        let page = match lister
            .page(&list.prefix, marker.as_deref(), shared.download.list_page)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                let f = match e {
                    relay_storage::read::ReadError::NotFound => {
                        Failure::new(Code::NotFound, "no such container")
                    }
                    relay_storage::read::ReadError::Storage(e) => {
                        relay_pipeline::failure::storage_failure(&e)
                    }
                    other => Failure::new(Code::Internal, other.to_string()),
                };
                tracing::warn!(reason = %safe(&f.message), "listing failed");
                let _ = write_frame_within(timeout, send, &Message::Error(f)).await;
                finish(send, timeout).await;
                return;
            }
        };
        total += page.blobs.len() as u64;
        for frame in frames(page.blobs) {
            if write_frame_within(timeout, send, &Message::Listing(frame))
                .await
                .is_err()
            {
                tracing::warn!("client stopped reading a listing; dropped");
                let _ = send.reset(app_error::PROTOCOL.into());
                return;
            }
        }
        match page.next_marker {
            Some(m) => marker = Some(m),
            None => break,
        }
    }
    Metrics::add(&shared.metrics.listings_completed, 1);
    tracing::info!(blobs = total, "listed");
    let _ = write_frame_within(timeout, send, &Message::ListEnd(ListEnd { blobs: total })).await;
    finish(send, timeout).await;
}

/// A page's blobs in Listing frames, each under the frame limit, in order.
pub fn frames(blobs: Vec<ListedBlob>) -> Vec<Listing> {
    let mut out = Vec::new();
    let mut current: Vec<Listed> = Vec::new();
    let mut used = ENVELOPE;
    for b in blobs {
        let entry = Listed {
            name: b.name,
            size: b.size,
            etag: b.etag,
            last_modified: b.last_modified,
        };
        // Its JSON and a comma. A name is at most 1,024 characters, each at
        // most 6 bytes escaped: an entry always fits an empty frame.
        let len = serde_json::to_vec(&entry).map_or(MAX_FRAME_LEN, |v| v.len()) + 1;
        if used + len > MAX_FRAME_LEN && !current.is_empty() {
            out.push(Listing {
                blobs: std::mem::take(&mut current),
            });
            used = ENVELOPE;
        }
        used += len;
        current.push(entry);
    }
    if !current.is_empty() {
        out.push(Listing { blobs: current });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_stay_under_the_limit_and_keep_every_name_in_order() {
        let blobs: Vec<ListedBlob> = (0..300)
            .map(|i| ListedBlob {
                // The longest names, escaped at six bytes a character.
                name: format!("{i:04}{}", "\u{1}".repeat(1020)),
                size: i,
                etag: "\"0x8DC0FFEE\"".into(),
                last_modified: Some(1_700_000_000),
            })
            .collect();
        let names: Vec<String> = blobs.iter().map(|b| b.name.clone()).collect();
        let frames = frames(blobs);
        assert!(frames.len() > 1);
        let mut seen = Vec::new();
        for f in frames {
            let encoded = relay_proto::codec::encode(&Message::Listing(f.clone())).expect("encode");
            assert!(encoded.len() - relay_proto::codec::HEADER_LEN <= MAX_FRAME_LEN);
            seen.extend(f.blobs.into_iter().map(|b| b.name));
        }
        assert_eq!(seen, names);
        assert!(super::frames(Vec::new()).is_empty());
    }
}
