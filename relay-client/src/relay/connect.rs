//! The client's QUIC endpoint and how it trusts the relay: a pinned certificate
//! fingerprint, a CA file, or (labs only, loudly) nothing.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{NoInitialCipherSuite, QuicClientConfig};
use quinn::{Connection, Endpoint};
use relay_transport::quic::{PathMemory, Windows, bind_udp};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

pub enum Trust {
    /// SHA-256 of the relay's DER certificate.
    Pinned([u8; 32]),
    CaFile(std::path::PathBuf),
    Insecure,
}

/// Accepts exactly the pinned certificate (or any, when insecure) but still checks
/// that the peer holds its private key (the handshake signature).
#[derive(Debug)]
struct PinVerifier {
    pin: Option<[u8; 32]>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pin) = self.pin else {
            return Ok(ServerCertVerified::assertion());
        };
        let got = relay_transport::tls::fingerprint(end_entity);
        if got == pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "relay certificate fingerprint {} does not match --relay-cert-sha256 {}",
                relay_transport::tls::format_fingerprint(&got),
                relay_transport::tls::format_fingerprint(&pin)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why the client's QUIC endpoint cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// The crypto provider does not offer TLS 1.3.
    #[error(transparent)]
    ProtocolVersions(rustls::Error),
    #[error("cannot read --relay-ca {}: {source}", path.display())]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad PEM in {}: {source}", path.display())]
    CaPem {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unusable CA certificate in {}: {source}", path.display())]
    CaCertificate {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("no certificates in {}", path.display())]
    NoCaCertificates { path: PathBuf },
    #[error(transparent)]
    Quic(NoInitialCipherSuite),
    #[error("cannot bind UDP: {0}")]
    Bind(#[source] std::io::Error),
    #[error("cannot start QUIC: {0}")]
    Endpoint(#[source] std::io::Error),
}

fn tls_config(trust: &Trust, zstd: bool) -> Result<rustls::ClientConfig, ConnectorError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(ConnectorError::ProtocolVersions)?;
    let mut cfg = match trust {
        Trust::Pinned(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin: Some(*pin),
                provider,
            }))
            .with_no_client_auth(),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin: None,
                provider,
            }))
            .with_no_client_auth(),
        Trust::CaFile(path) => builder
            .with_root_certificates(load_roots(path)?)
            .with_no_client_auth(),
    };
    cfg.alpn_protocols = relay_transport::tls::alpn_protocols(zstd);
    Ok(cfg)
}

/// Any local address of the family the relay's address is in.
fn any_address(v6: bool) -> SocketAddr {
    if v6 {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    }
}

/// The TLS side of every connection; its transport is set per connection
/// (`Connector::config`).
fn client_config(trust: &Trust, zstd: bool) -> Result<quinn::ClientConfig, ConnectorError> {
    let crypto =
        QuicClientConfig::try_from(tls_config(trust, zstd)?).map_err(ConnectorError::Quic)?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

fn load_roots(path: &Path) -> Result<rustls::RootCertStore, ConnectorError> {
    let pem = std::fs::read(path).map_err(|source| ConnectorError::ReadCa {
        path: path.to_path_buf(),
        source,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &pem[..]) {
        let cert = cert.map_err(|source| ConnectorError::CaPem {
            path: path.to_path_buf(),
            source,
        })?;
        roots
            .add(cert)
            .map_err(|source| ConnectorError::CaCertificate {
                path: path.to_path_buf(),
                source,
            })?;
    }
    if roots.is_empty() {
        return Err(ConnectorError::NoCaCertificates {
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}

/// Why a connection to the relay was not made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectError {
    /// The relay refused for now (too many connections); try again later.
    #[error("relay {addr} is busy ({source}); retrying later")]
    Busy {
        addr: SocketAddr,
        source: quinn::ConnectionError,
    },
    /// The connection could not be started (e.g. an unusable server name).
    #[error("cannot connect to relay {addr}: {source}")]
    Start {
        addr: SocketAddr,
        source: quinn::ConnectError,
    },
    #[error("cannot connect to relay {addr}: {source}")]
    Handshake {
        addr: SocketAddr,
        source: quinn::ConnectionError,
    },
    #[error(
        "no answer from relay {addr} within {} s: is relay-server listening on UDP port {}? \
         (a firewall may also block UDP; --fallback direct uploads over HTTPS instead)",
        timeout.as_secs(),
        addr.port()
    )]
    NoAnswer { addr: SocketAddr, timeout: Duration },
}

impl ConnectError {
    /// No answer, or an answer that is not the relay's (a stateless reset from
    /// a restarted process, a path that timed out): the network or the relay is
    /// away, which `--patience` waits out. A refusal (busy, a certificate that
    /// does not match the pin, a bad name) is an answer, not weather.
    pub fn is_network(&self) -> bool {
        match self {
            ConnectError::NoAnswer { .. } => true,
            ConnectError::Handshake { source, .. } => matches!(
                source,
                quinn::ConnectionError::TimedOut | quinn::ConnectionError::Reset
            ),
            ConnectError::Busy { .. } | ConnectError::Start { .. } => false,
        }
    }
}

/// Why `--relay` gave no address to connect to; `relay` as given.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("--relay {relay:?} must be HOST:PORT")]
    NoPort { relay: String },
    #[error("cannot resolve relay {relay:?}: {source}")]
    Lookup {
        relay: String,
        source: std::io::Error,
    },
    #[error("relay {relay:?} resolves to no address")]
    NoAddress { relay: String },
}

/// A refusal the relay gives when it is full: QUIC's CONNECTION_REFUSED at
/// accept, or our `BUSY` close after the handshake.
pub fn is_busy(e: &quinn::ConnectionError) -> bool {
    match e {
        quinn::ConnectionError::ConnectionClosed(c) => {
            c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED
        }
        quinn::ConnectionError::ApplicationClosed(c) => {
            c.error_code == quinn::VarInt::from_u32(relay_proto::protocol::app_error::BUSY)
        }
        _ => false,
    }
}

pub struct Connector {
    endpoint: Endpoint,
    config: quinn::ClientConfig,
    transports: Transports,
    /// Keep-alive interval of connections built from path memory (the link's
    /// watchdog must hear an ACK well within its silence limit).
    keep_alive: Option<Duration>,
}

/// Where each connection's transport comes from: set in one place
/// (`Connector::config`), so a warm connector builds no transport it would
/// replace at every connection.
enum Transports {
    /// The same for every connection.
    Fixed(Arc<quinn::TransportConfig>),
    /// With warm start: built for each new connection from the windows and
    /// the path memory (see `connect`).
    Warm(Windows, PathMemory),
}

impl Connector {
    pub fn new(
        trust: &Trust,
        windows: &Windows,
        udp_buffer: usize,
        v6: bool,
    ) -> Result<Self, ConnectorError> {
        Self::with_transport(trust, windows.transport(), udp_buffer, v6)
    }

    pub fn with_transport(
        trust: &Trust,
        transport: quinn::TransportConfig,
        udp_buffer: usize,
        v6: bool,
    ) -> Result<Self, ConnectorError> {
        Self::bound_at(trust, transport, udp_buffer, any_address(v6))
    }

    /// As `with_transport`, from a chosen local address (tests use several
    /// loopback addresses to play several hosts).
    pub fn bound_at(
        trust: &Trust,
        transport: quinn::TransportConfig,
        udp_buffer: usize,
        bind: SocketAddr,
    ) -> Result<Self, ConnectorError> {
        let transports = Transports::Fixed(Arc::new(transport));
        Self::bound(trust, transports, udp_buffer, bind, true)
    }

    /// A connector on `bind` whose connections announce compressed chunks
    /// if `zstd`.
    fn bound(
        trust: &Trust,
        transports: Transports,
        udp_buffer: usize,
        bind: SocketAddr,
        zstd: bool,
    ) -> Result<Self, ConnectorError> {
        let config = client_config(trust, zstd)?;
        let socket = bind_udp(bind, udp_buffer).map_err(ConnectorError::Bind)?;
        let endpoint =
            relay_transport::quic::endpoint(None, socket).map_err(ConnectorError::Endpoint)?;
        Ok(Self {
            endpoint,
            config,
            transports,
            keep_alive: None,
        })
    }

    /// Whether new connections announce compressed chunks (every connector
    /// does unless told: `--compress off` does not, nor a test that plays a
    /// client that predates compressed chunks).
    pub fn announce_zstd(&mut self, trust: &Trust, zstd: bool) -> Result<(), ConnectorError> {
        self.config = client_config(trust, zstd)?;
        Ok(())
    }

    /// Connections start warm from `memory`; a reconnect during the run starts
    /// from what the lost connection measured, when it got that far. `zstd`:
    /// whether they announce compressed chunks (`announce_zstd`).
    pub fn with_memory(
        trust: &Trust,
        windows: &Windows,
        memory: PathMemory,
        udp_buffer: usize,
        v6: bool,
        zstd: bool,
    ) -> Result<Self, ConnectorError> {
        let transports = Transports::Warm(*windows, memory);
        Self::bound(trust, transports, udp_buffer, any_address(v6), zstd)
    }

    /// Keep-alives every `every` (at most the default 5 s) on the connections
    /// `with_memory` builds.
    pub fn keep_alive(&mut self, every: Duration) {
        self.keep_alive = Some(every);
    }

    fn config(&self) -> quinn::ClientConfig {
        let mut config = self.config.clone();
        let transport = match &self.transports {
            Transports::Fixed(transport) => transport.clone(),
            Transports::Warm(windows, memory) => {
                let latest = memory.observer.as_ref().and_then(|o| o.estimate());
                let memory = PathMemory {
                    warm: latest.or(memory.warm),
                    observer: memory.observer.clone(),
                };
                let mut transport = windows.transport_with(memory);
                if let Some(every) = self.keep_alive {
                    transport.keep_alive_interval(Some(every.min(Duration::from_secs(5))));
                }
                Arc::new(transport)
            }
        };
        config.transport_config(transport);
        config
    }

    pub async fn connect(
        &self,
        addr: SocketAddr,
        server_name: &str,
        timeout: Duration,
    ) -> Result<Connection, ConnectError> {
        let connecting = self
            .endpoint
            .connect_with(self.config(), addr, server_name)
            .map_err(|source| ConnectError::Start { addr, source })?;
        match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(source)) if is_busy(&source) => Err(ConnectError::Busy { addr, source }),
            Ok(Err(source)) => Err(ConnectError::Handshake { addr, source }),
            Err(_) => Err(ConnectError::NoAnswer { addr, timeout }),
        }
    }

    /// Sends CONNECTION_CLOSE and returns once `conn` (this endpoint's live
    /// connection, if any) has handed it to the socket: the next datagram a
    /// closed connection sends is its close. Not the whole drain period (3 PTO,
    /// ~0.7 s at 200 ms RTT): nothing is left to deliver, and a lost close only
    /// leaves the relay to time out. A fixed wait would be most of a small
    /// upload's wall time; `CLOSE_FLUSH` only bounds a driver that cannot send.
    ///
    /// A connection this side closed before (an abort: Ctrl-C, a refusal every
    /// file would get) may not have sent its close yet, and the process exits
    /// next: then this waits until the endpoint is idle (the close goes out
    /// first, then the connection drains for 3 PTO), at most `CLOSE_DRAIN`.
    /// Without it the relay kept such a connection, and its slot, until a
    /// deadline.
    pub async fn close(&self, conn: Option<&Connection>) {
        let live = conn.filter(|c| c.close_reason().is_none());
        let aborted = conn.is_some_and(|c| {
            matches!(
                c.close_reason(),
                Some(quinn::ConnectionError::LocallyClosed)
            )
        });
        let sent_before = live.map(|c| c.stats().udp_tx.datagrams);
        self.endpoint
            .close(relay_proto::protocol::app_error::DONE.into(), b"");
        if aborted {
            let _ = tokio::time::timeout(CLOSE_DRAIN, self.endpoint.wait_idle()).await;
            return;
        }
        let (Some(conn), Some(before)) = (live, sent_before) else {
            return;
        };
        let sent = async {
            while conn.stats().udp_tx.datagrams == before {
                tokio::time::sleep(CLOSE_POLL).await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_FLUSH, sent).await;
    }
}

/// At most this long for the endpoint's driver to send CONNECTION_CLOSE (it
/// normally does on its next turn, well within `CLOSE_POLL`).
const CLOSE_FLUSH: Duration = Duration::from_millis(250);
/// At most this long for an aborted connection to drain (3 PTO: ~80 ms on
/// loopback, under a second at 200 ms RTT); its close went out at the start.
const CLOSE_DRAIN: Duration = Duration::from_secs(1);
/// How often `close` looks whether the close went out.
const CLOSE_POLL: Duration = Duration::from_millis(1);

/// Resolves `HOST:PORT`; returns the address and the TLS server name to present.
pub async fn resolve(relay: &str) -> Result<(SocketAddr, String), AddressError> {
    let host = match relay.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => {
            return Err(AddressError::NoPort {
                relay: relay.to_string(),
            });
        }
    };
    let addr = tokio::net::lookup_host(relay)
        .await
        .map_err(|source| AddressError::Lookup {
            relay: relay.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| AddressError::NoAddress {
            relay: relay.to_string(),
        })?;
    // An IP literal is not a valid TLS server name for SNI; pinning ignores the name.
    let name = if host.parse::<std::net::IpAddr>().is_ok() {
        "localhost".to_string()
    } else {
        host
    };
    Ok((addr, name))
}
