//! The relay's TLS identity: PEM files from the operator, or a self-signed
//! certificate (kept in the state directory, see `state`) whose SHA-256
//! fingerprint clients pin.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Identity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// `AB:CD:...` of the leaf certificate.
    pub fingerprint: String,
}

impl Identity {
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, String> {
        let cert_pem = std::fs::read(cert)
            .map_err(|e| format!("cannot read --tls-cert {}: {e}", cert.display()))?;
        let key_pem = std::fs::read(key)
            .map_err(|e| format!("cannot read --tls-key {}: {e}", key.display()))?;
        let certs: Vec<_> = rustls_pemfile::certs(&mut &cert_pem[..])
            .collect::<Result<_, _>>()
            .map_err(|e| format!("bad PEM in {}: {e}", cert.display()))?;
        let key = rustls_pemfile::private_key(&mut &key_pem[..])
            .map_err(|e| format!("bad PEM in {}: {e}", key.display()))?
            .ok_or_else(|| format!("no private key in {}", key.display()))?;
        let leaf = certs
            .first()
            .ok_or_else(|| format!("no certificate in {}", cert.display()))?;
        let fingerprint =
            relay_transport::tls::format_fingerprint(&relay_transport::tls::fingerprint(leaf));
        Ok(Self {
            certs,
            key,
            fingerprint,
        })
    }

    /// A new self-signed certificate, in memory only (tests).
    pub fn self_signed(names: Vec<String>) -> Result<Self, String> {
        Self::self_signed_pem(names).map(|(id, _, _)| id)
    }

    /// A new self-signed certificate, with its certificate and key as PEM text to
    /// be kept.
    pub fn self_signed_pem(names: Vec<String>) -> Result<(Self, String, String), String> {
        let ck = rcgen::generate_simple_self_signed(names)
            .map_err(|e| format!("cannot generate a certificate: {e}"))?;
        let (cert_pem, key_pem) = (ck.cert.pem(), ck.signing_key.serialize_pem());
        let der = ck.cert.der().clone();
        let fingerprint =
            relay_transport::tls::format_fingerprint(&relay_transport::tls::fingerprint(&der));
        let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der())
            .map_err(|e| format!("cannot encode the generated key: {e}"))?;
        let id = Self {
            certs: vec![der],
            key,
            fingerprint,
        };
        Ok((id, cert_pem, key_pem))
    }

    pub fn server_crypto(&self) -> Result<Arc<quinn::crypto::rustls::QuicServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(self.certs.clone(), self.key.clone_key())
            .map_err(|e| format!("TLS certificate/key rejected: {e}"))?;
        cfg.alpn_protocols = vec![relay_proto::limits::ALPN.to_vec()];
        cfg.max_early_data_size = 0;
        let q = quinn::crypto::rustls::QuicServerConfig::try_from(cfg)
            .map_err(|e| format!("TLS config unusable for QUIC: {e}"))?;
        Ok(Arc::new(q))
    }
}
