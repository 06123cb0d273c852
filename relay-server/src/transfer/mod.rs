//! One QUIC stream: its first frame decides what it is. An Offer is an upload
//! (`upload`, driving `relay_proto::session::relay`; its storage steps in
//! `upload_io`, compressed chunks read through `inflating`, `progress` frames
//! back), a Fetch or a List a download (`fetch`, its ranges compressed by
//! `deflating`; `listing`); anything else is
//! refused with a Reject. A Delete removes one listed version of a blob
//! (`delete`, `If-Match` its ETag). May import `telemetry`, `connection`, `sign_in` and
//! `state`; never `server` or `operations`.

mod admit;
pub mod deflating;
mod delete;
pub mod fetch;
pub mod inflating;
pub mod listing;
mod progress;
mod upload;
mod upload_io;

use std::sync::Arc;

use quinn::{RecvStream, SendStream};
use relay_proto::blob_name::{validate_blob_name, validate_container};
use relay_proto::codec::FrameError;
use relay_proto::logsafe::safe;
use relay_proto::protocol::{Code, Failure, Message, Offer};
use relay_proto::session::relay::CONTROL_TIMEOUT;
use tracing::Instrument;

use crate::connection::link::{Link, write_control};
use crate::connection::stream_credit::StreamTicket;
use crate::state::Shared;
use crate::telemetry::metrics::ActiveGuard;
use crate::telemetry::rejections::Reason;

/// The log target of an upload's end ("committed", "failed"): operators'
/// searches and the rehearsal scripts match it, wherever the code lives.
pub(crate) const LOG_TARGET: &str = "relay_server::transfer";

pub async fn handle(
    shared: Arc<Shared>,
    link: Link,
    mut ticket: StreamTicket,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let _active = ActiveGuard::new(&shared.metrics);
    let refused = match tokio::time::timeout(CONTROL_TIMEOUT, link.read_frame(&mut recv)).await {
        // A download stream: its own drivers (`fetch`, `listing`).
        Ok(Ok(Message::Fetch(f))) => {
            return fetch::handle(&shared, &link, &mut ticket, &mut send, &mut recv, f).await;
        }
        Ok(Ok(Message::List(l))) => {
            return listing::handle(&shared, &link, &mut ticket, &mut send, &mut recv, l).await;
        }
        Ok(Ok(Message::Delete(d))) => {
            return delete::handle(&shared, &link, &mut ticket, &mut send, &mut recv, d).await;
        }
        Ok(Ok(Message::Offer(o))) => match check_names(&o) {
            Ok(()) => Ok(o),
            Err(f) => Err((Reason::Code(f.code), f)),
        },
        Ok(Ok(other)) => Err((
            Reason::NotOffer,
            Failure::new(
                Code::InvalidOffer,
                format!(
                    "expected an Offer, Fetch, List or Delete, got {}",
                    other.name()
                ),
            ),
        )),
        // Nothing was sent and nobody waits for an answer; counted all the same.
        Ok(Err(FrameError::Closed)) => {
            shared
                .metrics
                .rejections
                .record(Reason::ClosedEarly, "stream ended before an Offer");
            return;
        }
        Ok(Err(e @ (FrameError::Truncated | FrameError::Io(_)))) => Err((
            Reason::ClosedEarly,
            Failure::new(Code::InvalidOffer, format!("bad Offer: {e}")),
        )),
        Ok(Err(e)) => Err((
            Reason::BadFrame,
            Failure::new(Code::InvalidOffer, format!("bad Offer: {e}")),
        )),
        Err(_) => Err((
            Reason::OfferTimeout,
            Failure::new(Code::InvalidOffer, "no Offer within 30 s"),
        )),
    };
    let offer = match refused {
        Ok(o) => {
            // Its size sets how many more streams the connection may open.
            ticket.declare(o.size);
            o
        }
        Err((reason, f)) => return reject(&shared, &mut send, &mut recv, reason, f).await,
    };
    // Names are valid here (no control or bidi characters); still escaped and cut,
    // since a valid blob name may be 1024 characters.
    let span = tracing::info_span!(
        "transfer",
        container = %safe(&offer.container),
        blob = %safe(&offer.blob),
        size = offer.size
    );
    upload::respond(&shared, &link, &offer, &mut ticket, &mut send, &mut recv)
        .instrument(span)
        .await;
}

/// The names in an Offer, checked before they go anywhere near a log span.
/// (`admit` and `upload::validate` check them again, with the rest of the Offer.)
fn check_names(offer: &Offer) -> Result<(), Failure> {
    validate_container(&offer.container)
        .map_err(|e| Failure::new(Code::InvalidName, e.to_string()))?;
    validate_blob_name(&offer.blob).map_err(|e| Failure::new(Code::InvalidName, e.to_string()))
}

/// Refuses a stream after its first frame was read (an Offer, a Fetch, a
/// List or a Delete that failed its checks): one refused for who sent it (token, grant)
/// on a connection not yet authenticated also closes that connection
/// (`Link::refuse_peer`), so it keeps no pending slot until the auth deadline.
pub(crate) async fn refuse(
    shared: &Shared,
    link: &Link,
    send: &mut SendStream,
    recv: &mut RecvStream,
    f: Failure,
) {
    let who = f.code.refuses_the_caller();
    reject(shared, send, recv, Reason::Code(f.code), f).await;
    if who {
        link.refuse_peer(send).await;
    }
}

/// Refuses a stream before its Plan. An eager client is already sending: stop it.
/// Counted by reason and logged at a bounded rate (a peer can cause these as fast
/// as it opens streams).
pub(crate) async fn reject(
    shared: &Shared,
    send: &mut SendStream,
    recv: &mut RecvStream,
    reason: Reason,
    f: Failure,
) {
    shared.metrics.failed(reason);
    shared.metrics.rejections.record(reason, &f.message);
    let _ = recv.stop(relay_proto::protocol::app_error::REJECTED.into());
    let _ = write_control(send, &Message::Reject(f)).await;
    let _ = send.finish();
}
