//! Downloads over the raw protocol: a client that speaks Fetch and List frame
//! by frame (the relay's side of downloads, tested apart from any client
//! command), and a raw upload to make blobs the relay has sealed.

use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{
    Fetch, List, ListEnd, Listing, Message, Receipt, Secret, Start, Trailer,
};
use relay_transport::frames::{read_frame, write_frame};
use sha2::{Digest, Sha256};

use crate::hostile::{offer, open_with_offer};

/// Uploads `data` through the relay (Offer, Plan, Start, bytes, Trailer) and
/// returns its Receipt: a blob under the relay's seal.
pub async fn upload_raw(
    conn: &quinn::Connection,
    token: &str,
    container: &str,
    blob: &str,
    data: &[u8],
) -> Receipt {
    let (mut send, mut recv, plan) =
        open_with_offer(conn, offer(token, container, blob, data.len() as u64)).await;
    assert!(matches!(plan, Message::Plan(_)), "{plan:?}");
    let sha256 = hex::encode(Sha256::digest(data));
    write_frame(&mut send, &Message::Start(Start::plain(0)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    send.write_all(data).await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::Trailer(Trailer { sha256 }))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match read_frame(&mut recv).await {
        Ok(Message::Receipt(r)) => r,
        other => panic!("no receipt: {other:?}"),
    }
}

pub fn fetch_of(token: &str, container: &str, blob: &str) -> Fetch {
    Fetch {
        version: PROTOCOL_VERSION,
        token: Secret(token.into()),
        container: container.into(),
        blob: blob.into(),
        offset: 0,
        etag: None,
        compress: None,
    }
}

/// What a Fetch stream carried.
#[derive(Debug)]
pub struct Fetched {
    /// Source, or the Reject.
    pub first: Message,
    /// Every Data section's bytes, in order.
    pub data: Vec<u8>,
    pub sections: usize,
    /// Sent or Error (`None` after a Reject, or a stream that ended without one).
    pub end: Option<Message>,
}

/// Opens a stream and sends `f`; the streams for the test to read on.
pub async fn start_fetch(
    conn: &quinn::Connection,
    f: Fetch,
) -> (quinn::SendStream, quinn::RecvStream, Message) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::Fetch(f))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = send.finish();
    let first = read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (send, recv, first)
}

/// Reads Data sections until Sent or Error.
pub async fn read_rest(recv: &mut quinn::RecvStream, first: Message) -> Fetched {
    let mut out = Fetched {
        first,
        data: Vec::new(),
        sections: 0,
        end: None,
    };
    if !matches!(out.first, Message::Source(_)) {
        return out;
    }
    loop {
        match read_frame(recv).await {
            Ok(Message::Data(d)) => {
                let start = out.data.len();
                let len = usize::try_from(d.len).unwrap_or_else(|e| panic!("{e}"));
                out.data.resize(start + len, 0);
                recv.read_exact(&mut out.data[start..])
                    .await
                    .unwrap_or_else(|e| panic!("section {}: {e}", out.sections));
                out.sections += 1;
            }
            Ok(end @ (Message::Sent(_) | Message::Error(_))) => {
                out.end = Some(end);
                return out;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => return out,
        }
    }
}

/// One Fetch, start to end.
pub async fn fetch(conn: &quinn::Connection, f: Fetch) -> Fetched {
    let (_send, mut recv, first) = start_fetch(conn, f).await;
    read_rest(&mut recv, first).await
}

pub fn list_of(token: &str, container: &str, prefix: &str, marker: Option<String>) -> List {
    List {
        version: PROTOCOL_VERSION,
        token: Secret(token.into()),
        container: container.into(),
        prefix: prefix.into(),
        marker,
    }
}

/// Opens a stream and sends `l`; the streams for the test to read on (or
/// not: a client that never reads).
pub async fn start_list(
    conn: &quinn::Connection,
    l: List,
) -> (quinn::SendStream, quinn::RecvStream) {
    let (mut send, recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::List(l))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = send.finish();
    (send, recv)
}

/// What a List stream carried: its Listing frames, its ListEnd, or the frame
/// that was neither (a Reject or Error).
#[derive(Debug, Default)]
pub struct Listed {
    pub frames: Vec<Listing>,
    pub end: Option<ListEnd>,
    pub refused: Option<Message>,
}

impl Listed {
    pub fn names(&self) -> Vec<String> {
        self.frames
            .iter()
            .flat_map(|f| f.blobs.iter().map(|b| b.name.clone()))
            .collect()
    }
}

/// One List, start to end, frame by frame.
pub async fn list_frames(conn: &quinn::Connection, l: List) -> Listed {
    let (_send, mut recv) = start_list(conn, l).await;
    let mut out = Listed::default();
    loop {
        match read_frame(&mut recv).await {
            Ok(Message::Listing(l)) => out.frames.push(l),
            Ok(Message::ListEnd(e)) => {
                out.end = Some(e);
                return out;
            }
            Ok(other) => {
                out.refused = Some(other);
                return out;
            }
            Err(e) => panic!("listing: {e}"),
        }
    }
}

/// One List, start to end: every name in order, the ListEnd's count, and
/// the first frame if it was not a Listing or ListEnd (a Reject or Error).
pub async fn list(
    conn: &quinn::Connection,
    token: &str,
    container: &str,
    prefix: &str,
) -> (Vec<String>, Option<u64>, Option<Message>) {
    let got = list_frames(conn, list_of(token, container, prefix, None)).await;
    (got.names(), got.end.map(|e| e.blobs), got.refused)
}
