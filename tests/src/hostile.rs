//! The hostile-peer tests' toolkit: a relay two users may write to, the real
//! client's arguments, and a raw QUIC connection for what the real client cannot
//! be made to do (lie in an Offer, never authenticate, hold streams open).

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

pub use relay_proto::hostile_chunks::Case as HostileChunk;

/// The hostile chunks both sides must refuse, whichever side sends them
/// (`relay_proto::hostile_chunks`, and a chunk past the file's end).
pub fn hostile_chunks() -> Vec<HostileChunk> {
    use relay_proto::hostile_chunks as hostile;
    let mut cases = hostile::refused_by_every_decoder();
    cases.push((
        "past-end",
        (relay_proto::chunk::Deflater::plain(&hostile::text(100)), 50),
        "past the file's end",
    ));
    cases
}
