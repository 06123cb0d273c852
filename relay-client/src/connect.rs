//! The client's QUIC endpoint and how it trusts the relay: a pinned certificate
//! fingerprint, a CA file, or (labs only, loudly) nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Connection, Endpoint, TokioRuntime};
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

fn tls_config(trust: &Trust) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?;
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
    cfg.alpn_protocols = vec![relay_proto::limits::ALPN.to_vec()];
    Ok(cfg)
}

fn load_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read --relay-ca {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &pem[..]) {
        let cert = cert.map_err(|e| format!("bad PEM in {}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("unusable CA certificate in {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("no certificates in {}", path.display()));
    }
    Ok(roots)
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectError {
    /// The relay refused for now (too many connections); try again later.
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Failed(String),
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
    /// With warm start: the windows and path memory each new connection's
    /// transport is built from (see `connect`).
    memory: Option<(Windows, PathMemory)>,
}

impl Connector {
    pub fn new(
        trust: &Trust,
        windows: &Windows,
        udp_buffer: usize,
        v6: bool,
    ) -> Result<Self, String> {
        Self::with_transport(trust, windows.transport(), udp_buffer, v6)
    }

    pub fn with_transport(
        trust: &Trust,
        transport: quinn::TransportConfig,
        udp_buffer: usize,
        v6: bool,
    ) -> Result<Self, String> {
        let bind: SocketAddr = if v6 { "[::]:0" } else { "0.0.0.0:0" }
            .parse()
            .map_err(|e| format!("{e}"))?;
        Self::bound_at(trust, transport, udp_buffer, bind)
    }

    /// As `with_transport`, from a chosen local address (tests use several
    /// loopback addresses to play several hosts).
    pub fn bound_at(
        trust: &Trust,
        transport: quinn::TransportConfig,
        udp_buffer: usize,
        bind: SocketAddr,
    ) -> Result<Self, String> {
        let crypto = QuicClientConfig::try_from(tls_config(trust)?).map_err(|e| e.to_string())?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(Arc::new(transport));
        let socket = bind_udp(bind, udp_buffer).map_err(|e| format!("cannot bind UDP: {e}"))?;
        let endpoint = Endpoint::new(
            relay_transport::quic::endpoint_config(),
            None,
            socket,
            Arc::new(TokioRuntime),
        )
        .map_err(|e| format!("cannot start QUIC: {e}"))?;
        Ok(Self {
            endpoint,
            config,
            memory: None,
        })
    }

    /// Connections start warm from `memory`; a reconnect during the run starts
    /// from what the lost connection measured, when it got that far.
    pub fn with_memory(
        trust: &Trust,
        windows: &Windows,
        memory: PathMemory,
        udp_buffer: usize,
        v6: bool,
    ) -> Result<Self, String> {
        let mut c = Self::with_transport(
            trust,
            windows.transport_with(memory.clone()),
            udp_buffer,
            v6,
        )?;
        c.memory = Some((*windows, memory));
        Ok(c)
    }

    fn config(&self) -> quinn::ClientConfig {
        let mut config = self.config.clone();
        if let Some((windows, memory)) = &self.memory {
            let latest = memory.observer.as_ref().and_then(|o| o.estimate());
            let memory = PathMemory {
                warm: latest.or(memory.warm),
                observer: memory.observer.clone(),
            };
            config.transport_config(Arc::new(windows.transport_with(memory)));
        }
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
            .map_err(|e| ConnectError::Failed(format!("cannot connect to relay {addr}: {e}")))?;
        match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) if is_busy(&e) => Err(ConnectError::Busy(format!(
                "relay {addr} is busy ({e}); retrying later"
            ))),
            Ok(Err(e)) => Err(ConnectError::Failed(format!(
                "cannot connect to relay {addr}: {e}"
            ))),
            Err(_) => Err(ConnectError::Failed(format!(
                "cannot connect to relay {addr}: no QUIC handshake within {} s (is UDP blocked?)",
                timeout.as_secs()
            ))),
        }
    }

    /// Sends CONNECTION_CLOSE and gives the endpoint a moment to put it on the
    /// wire. Not the whole drain period (3 PTO, ~0.7 s at 200 ms RTT): nothing is
    /// left to deliver, and a lost close only leaves the relay to time out.
    pub async fn close(&self) {
        self.endpoint
            .close(relay_proto::protocol::app_error::DONE.into(), b"");
        let _ = tokio::time::timeout(Duration::from_millis(100), self.endpoint.wait_idle()).await;
    }
}

/// Resolves `HOST:PORT`; returns the address and the TLS server name to present.
pub async fn resolve(relay: &str) -> Result<(SocketAddr, String), String> {
    let host = match relay.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => return Err(format!("--relay {relay:?} must be HOST:PORT")),
    };
    let addr = tokio::net::lookup_host(relay)
        .await
        .map_err(|e| format!("cannot resolve relay {relay:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("relay {relay:?} resolves to no address"))?;
    // An IP literal is not a valid TLS server name for SNI; pinning ignores the name.
    let name = if host.parse::<std::net::IpAddr>().is_ok() {
        "localhost".to_string()
    } else {
        host
    };
    Ok((addr, name))
}
