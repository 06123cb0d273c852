//! The raw QUIC client the protocol-level tests speak through, frame by frame,
//! where the real client cannot misbehave: the client's own `Connector`,
//! pinned to a relay's fingerprint, with only what a test varies (the host it
//! plays, its transport's windows or credit, whether it announces compressed
//! chunks).

use std::net::SocketAddr;
use std::time::Duration;

use relay_client::relay::connect::{Connector, Trust};
use relay_transport::quic::Windows;

use crate::relay::RelayHandle;

/// Long enough for a loaded machine; a handshake on loopback takes milliseconds.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// The UDP socket buffer a test's client asks for.
const UDP_BUFFER: usize = 1 << 20;

/// One raw connection to make: `Dial::to(&relay).connect().await`.
pub struct Dial<'a> {
    addr: SocketAddr,
    fingerprint: &'a str,
    from: &'a str,
    transport: Option<quinn::TransportConfig>,
    zstd: Option<bool>,
}

impl<'a> Dial<'a> {
    /// To an in-process relay.
    pub fn to(relay: &'a RelayHandle) -> Self {
        Self::at(relay.addr, &relay.fingerprint)
    }

    /// To any relay (a separate process) by its address and fingerprint.
    pub fn at(addr: SocketAddr, fingerprint: &'a str) -> Self {
        Self {
            addr,
            fingerprint,
            from: "127.0.0.1",
            transport: None,
            zstd: None,
        }
    }

    /// From another loopback address (tests play several hosts).
    pub fn from(mut self, host: &'a str) -> Self {
        self.from = host;
        self
    }

    /// With a transport of the test's own choosing (a peer's own windows or
    /// stream credit); the client's defaults otherwise.
    pub fn transport(mut self, transport: quinn::TransportConfig) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Receive windows of `stream_window` per stream and twice that per
    /// connection: how much a relay may write before the client reads (a slow
    /// reader made deterministic on loopback).
    pub fn window(self, stream_window: u64) -> Self {
        let windows = Windows {
            stream_window,
            connection_window: 2 * stream_window,
            ..Windows::default()
        };
        self.transport(windows.transport())
    }

    /// Whether the connection announces compressed chunks (every connector
    /// does unless told, as the real client).
    pub fn zstd(mut self, announce: bool) -> Self {
        self.zstd = Some(announce);
        self
    }

    /// The connection and its connector (which must outlive it).
    pub async fn try_connect(self) -> Result<(Connector, quinn::Connection), String> {
        let fp =
            relay_transport::tls::parse_fingerprint(self.fingerprint).map_err(|e| e.to_string())?;
        let trust = Trust::Pinned(fp);
        let bind: SocketAddr = format!("{}:0", self.from)
            .parse()
            .map_err(|e| format!("{}: {e}", self.from))?;
        let transport = self
            .transport
            .unwrap_or_else(|| Windows::default().transport());
        let mut c =
            Connector::bound_at(&trust, transport, UDP_BUFFER, bind).map_err(|e| e.to_string())?;
        if let Some(announce) = self.zstd {
            c.announce_zstd(&trust, announce)
                .map_err(|e| e.to_string())?;
        }
        let conn = c
            .connect(self.addr, "localhost", HANDSHAKE)
            .await
            .map_err(|e| e.to_string())?;
        Ok((c, conn))
    }

    /// As `try_connect`, for a test that cannot go on without it.
    pub async fn connect(self) -> (Connector, quinn::Connection) {
        self.try_connect()
            .await
            .unwrap_or_else(|e| panic!("raw QUIC connection: {e}"))
    }
}
