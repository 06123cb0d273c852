//! The hostile-peer tests' toolkit: a relay two users may write to, the real
//! client's arguments, and a raw QUIC connection for what the real client cannot
//! be made to do (lie in an Offer, never authenticate, hold streams open).

use std::net::SocketAddr;
use std::time::Duration;

use relay_client::relay::connect::{Connector, Trust};
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{Message, Offer, Overwrite, Secret};
use relay_server::Config;
use relay_transport::frames::{read_frame, write_frame};

use crate::azurite::shared_azurite;
use crate::relay::{RelayHandle, RelayOptions};
use crate::upload::Upload;

const MIB: u64 = 1 << 20;

pub fn relay_with(
    container: &str,
    configure: impl FnOnce(&mut Config) + Send + 'static,
) -> RelayHandle {
    RelayHandle::start(
        shared_azurite().storage(),
        RelayOptions {
            // The second token may write the test's container too: two users.
            limited_to: container.into(),
            configure: Some(Box::new(configure)),
            ..Default::default()
        },
    )
}

pub fn upload_args(
    relay: &RelayHandle,
    file: &std::path::Path,
    to: &str,
    token: &str,
) -> Vec<String> {
    Upload::file(file)
        .json()
        .block_size("5MiB")
        .via_addr(&relay.addr.to_string(), &relay.fingerprint)
        .to(to)
        .token(token)
        .args()
}

/// A raw QUIC connection from a chosen loopback address (tests play several hosts).
pub async fn raw_connect(
    relay: &RelayHandle,
    from: &str,
) -> Result<(Connector, quinn::Connection), String> {
    let fp =
        relay_transport::tls::parse_fingerprint(&relay.fingerprint).map_err(|e| e.to_string())?;
    let bind: SocketAddr = format!("{from}:0").parse().map_err(|e| format!("{e}"))?;
    let c = Connector::bound_at(
        &Trust::Pinned(fp),
        relay_transport::quic::Windows::default().transport(),
        1 << 20,
        bind,
    )
    .map_err(|e| e.to_string())?;
    let conn = c
        .connect(relay.addr, "localhost", Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    Ok((c, conn))
}

pub fn offer(token: &str, container: &str, blob: &str, size: u64) -> Offer {
    Offer {
        version: PROTOCOL_VERSION,
        token: Secret(token.into()),
        container: container.into(),
        blob: blob.into(),
        size,
        content_type: None,
        metadata: Default::default(),
        overwrite: Overwrite::Never,
        sha256: None,
        block_size: Some(5 * MIB),
        put_md5: false,
        progress: false,
        eager: false,
    }
}

/// Opens a stream, sends `o` and reads the relay's first answer; the stream
/// stays open for what the test sends next.
pub async fn open_with_offer(
    conn: &quinn::Connection,
    o: Offer,
) -> (quinn::SendStream, quinn::RecvStream, Message) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| panic!("{e}"));
    write_frame(&mut send, &Message::Offer(o))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let answer = read_frame(&mut recv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (send, recv, answer)
}
