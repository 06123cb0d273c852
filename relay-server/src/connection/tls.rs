//! The relay's TLS identity: PEM files from the operator, or a self-signed
//! certificate (kept in the state directory, see `state`) whose SHA-256
//! fingerprint clients pin.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quinn::crypto::rustls::NoInitialCipherSuite;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the relay has no usable TLS identity.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read --tls-cert {}: {source}", path.display())]
    ReadCert {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read --tls-key {}: {source}", path.display())]
    ReadKey {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad PEM in {}: {source}", path.display())]
    BadPem {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no private key in {}", path.display())]
    NoKey { path: PathBuf },
    #[error("no certificate in {}", path.display())]
    NoCertificate { path: PathBuf },
    #[error("cannot generate a certificate: {0}")]
    Generate(#[source] rcgen::Error),
    #[error("cannot encode the generated key: {0}")]
    EncodeKey(&'static str),
    /// The crypto provider does not offer TLS 1.3.
    #[error(transparent)]
    ProtocolVersions(rustls::Error),
    #[error("TLS certificate/key rejected: {0}")]
    Rejected(#[source] rustls::Error),
    #[error("TLS config unusable for QUIC: {0}")]
    Quic(#[source] NoInitialCipherSuite),
}

pub struct Identity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// `AB:CD:...` of the leaf certificate.
    pub fingerprint: String,
}

impl Identity {
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = std::fs::read(cert).map_err(|source| TlsError::ReadCert {
            path: cert.to_path_buf(),
            source,
        })?;
        let key_pem = std::fs::read(key).map_err(|source| TlsError::ReadKey {
            path: key.to_path_buf(),
            source,
        })?;
        let certs: Vec<_> = rustls_pemfile::certs(&mut &cert_pem[..])
            .collect::<Result<_, _>>()
            .map_err(|source| TlsError::BadPem {
                path: cert.to_path_buf(),
                source,
            })?;
        let key = rustls_pemfile::private_key(&mut &key_pem[..])
            .map_err(|source| TlsError::BadPem {
                path: key.to_path_buf(),
                source,
            })?
            .ok_or_else(|| TlsError::NoKey {
                path: key.to_path_buf(),
            })?;
        let leaf = certs.first().ok_or_else(|| TlsError::NoCertificate {
            path: cert.to_path_buf(),
        })?;
        let fingerprint =
            relay_transport::tls::format_fingerprint(&relay_transport::tls::fingerprint(leaf));
        Ok(Self {
            certs,
            key,
            fingerprint,
        })
    }

    /// A new self-signed certificate, in memory only (tests).
    pub fn self_signed(names: Vec<String>) -> Result<Self, TlsError> {
        Self::self_signed_pem(names).map(|(id, _, _)| id)
    }

    /// A new self-signed certificate, with its certificate and key as PEM text to
    /// be kept.
    pub fn self_signed_pem(names: Vec<String>) -> Result<(Self, String, String), TlsError> {
        let ck = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
        let (cert_pem, key_pem) = (ck.cert.pem(), ck.signing_key.serialize_pem());
        let der = ck.cert.der().clone();
        let fingerprint =
            relay_transport::tls::format_fingerprint(&relay_transport::tls::fingerprint(&der));
        let key =
            PrivateKeyDer::try_from(ck.signing_key.serialize_der()).map_err(TlsError::EncodeKey)?;
        let id = Self {
            certs: vec![der],
            key,
            fingerprint,
        };
        Ok((id, cert_pem, key_pem))
    }

    pub fn server_crypto(&self) -> Result<Arc<quinn::crypto::rustls::QuicServerConfig>, TlsError> {
        self.server_crypto_with(true)
    }

    /// `zstd`: announce compressed chunks (every relay does; a test hook turns
    /// it off to play a relay that predates compressed chunks).
    pub fn server_crypto_with(
        &self,
        zstd: bool,
    ) -> Result<Arc<quinn::crypto::rustls::QuicServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(TlsError::ProtocolVersions)?
            .with_no_client_auth()
            .with_single_cert(self.certs.clone(), self.key.clone_key())
            .map_err(TlsError::Rejected)?;
        // rustls takes the first of ours the client also offers: compressed
        // chunks with a client that knows them, plain with any other.
        cfg.alpn_protocols = relay_transport::tls::alpn_protocols(zstd);
        cfg.max_early_data_size = 0;
        let q = quinn::crypto::rustls::QuicServerConfig::try_from(cfg).map_err(TlsError::Quic)?;
        Ok(Arc::new(q))
    }
}
