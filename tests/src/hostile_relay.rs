//! A hostile relay stand-in on real QUIC, for the client's side of downloads:
//! it speaks the relay's ALPN (compression announced), lists one blob, and
//! answers every Fetch with a Source and exactly the sections it was given,
//! whatever they hold (a bomb, a lying length, a chunk cut short), then
//! `Sent`. The real `relay-client download` connects to it as to a relay,
//! pinned to its certificate. Every Fetch it got is kept, so a test can see
//! what the client asked for.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use relay_proto::protocol::{
    Check, Encoding, Fetch, ListEnd, Listed, Listing, Message, Sent, Source,
};
use relay_transport::frames::{read_frame, write_frame};

/// What the stand-in sends for its one blob.
#[derive(Clone, Debug)]
pub struct Script {
    pub blob: String,
    /// The size the Listing and the Source declare.
    pub size: u64,
    /// The SHA-256 the Source vouches for (`Check::Sealed`).
    pub sha256: String,
    /// `Source.encoding`, whatever the Fetch asked.
    pub encoding: Option<Encoding>,
    /// Each section's bytes, sent after a `Data{len}` of their length.
    pub sections: Vec<Vec<u8>>,
}

pub struct HostileRelay {
    pub addr: SocketAddr,
    pub fingerprint: String,
    fetches: Arc<Mutex<Vec<Fetch>>>,
    endpoint: quinn::Endpoint,
    task: tokio::task::JoinHandle<()>,
}

impl HostileRelay {
    /// Listens on a free loopback port and serves `script` to every client.
    pub fn start(script: Script) -> Self {
        relay_transport::install_crypto_provider();
        let id = relay_server::connection::tls::Identity::self_signed(vec!["localhost".into()])
            .unwrap_or_else(|e| panic!("{e}"));
        let crypto = id.server_crypto().unwrap_or_else(|e| panic!("{e}"));
        let mut config = quinn::ServerConfig::with_crypto(crypto);
        config.transport_config(Arc::new(
            relay_transport::quic::Windows::default().transport(),
        ));
        let endpoint = quinn::Endpoint::server(config, "127.0.0.1:0".parse().expect("addr"))
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = endpoint.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let fetches = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(accept(endpoint.clone(), script, fetches.clone()));
        Self {
            addr,
            fingerprint: id.fingerprint,
            fetches,
            endpoint,
            task,
        }
    }

    /// The Fetches received so far.
    pub fn fetches(&self) -> Vec<Fetch> {
        self.fetches.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The `download` flags that reach this stand-in.
    pub fn flags(&self) -> Vec<String> {
        [
            "--relay",
            &self.addr.to_string(),
            "--relay-cert-sha256",
            &self.fingerprint,
            "--token",
            "hostile-relay-token",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    pub fn stop(self) {
        self.endpoint.close(0u32.into(), b"done");
        self.task.abort();
    }
}

async fn accept(endpoint: quinn::Endpoint, script: Script, fetches: Arc<Mutex<Vec<Fetch>>>) {
    while let Some(incoming) = endpoint.accept().await {
        let (script, fetches) = (script.clone(), fetches.clone());
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok((send, recv)) = conn.accept_bi().await {
                tokio::spawn(stream(send, recv, script.clone(), fetches.clone()));
            }
        });
    }
}

async fn stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    script: Script,
    fetches: Arc<Mutex<Vec<Fetch>>>,
) {
    let frames = match read_frame(&mut recv).await {
        Ok(Message::List(_)) => vec![
            Message::Listing(Listing {
                blobs: vec![Listed {
                    name: script.blob.clone(),
                    size: script.size,
                    etag: "\"0xHOSTILE\"".into(),
                    last_modified: Some(1_700_000_000),
                    sha256: None,
                }],
                marker: None,
                resumed: false,
            }),
            Message::ListEnd(ListEnd {
                blobs: 1,
                resumed: false,
            }),
        ],
        Ok(Message::Fetch(f)) => {
            if let Ok(mut all) = fetches.lock() {
                all.push(f);
            }
            return send_blob(send, &script).await;
        }
        _ => return,
    };
    for f in &frames {
        if write_frame(&mut send, f).await.is_err() {
            return;
        }
    }
    let _ = send.finish();
    let _ = send.stopped().await;
}

/// Source, the script's sections, Sent: the client may stop reading at
/// any point (it refused what it got), and that ends the stream.
async fn send_blob(mut send: quinn::SendStream, s: &Script) {
    let source = Message::Source(Source {
        etag: "\"0xHOSTILE\"".into(),
        size: s.size,
        offset: 0,
        check: Check::Sealed,
        sha256: Some(s.sha256.clone()),
        content_md5: None,
        content_type: None,
        last_modified: Some(1_700_000_000),
        encoding: s.encoding,
    });
    if write_frame(&mut send, &source).await.is_err() {
        return;
    }
    for section in &s.sections {
        let data = Message::Data(relay_proto::protocol::Data {
            len: section.len() as u64,
        });
        if write_frame(&mut send, &data).await.is_err() || send.write_all(section).await.is_err() {
            return;
        }
    }
    let sent = Message::Sent(Sent {
        ranges_checked: 0,
        requests: 0,
    });
    if write_frame(&mut send, &sent).await.is_ok() {
        let _ = send.finish();
        let _ = send.stopped().await;
    }
}
