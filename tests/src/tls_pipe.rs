//! TLS on either side of the fault proxy, for the deployment rehearsal
//! (scripts/rehearse): storage there is HTTPS end to end, as on Azure, while
//! the fault proxy (`proxy.rs`) reads plain HTTP. A terminator accepts TLS
//! with the storage certificate and pipes the plaintext to the proxy; an
//! originator accepts the proxy's plaintext and pipes it over TLS to Azurite,
//! verifying Azurite's certificate against the run's CA. Both are byte pipes:
//! what the proxy decides is all that changes a request.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certs(path: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not PEM certificates", path.display()))
}

/// Accepts TLS on `listen` (certificate chain and key from PEM files) and pipes
/// each connection's plaintext to `to`.
pub async fn terminate(listen: SocketAddr, cert: &Path, key: &Path, to: SocketAddr) -> Result<()> {
    let chain = certs(cert)?;
    let key_pem = std::fs::read(key).with_context(|| format!("{}", key.display()))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())?
        .with_context(|| format!("{}: no private key", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("bind {listen}"))?;
    loop {
        let (sock, _) = listener.accept().await?;
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(sock).await else {
                return;
            };
            let Ok(mut plain) = TcpStream::connect(to).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
        });
    }
}

/// Listens for plaintext on an ephemeral loopback port and pipes each connection
/// over TLS to `upstream`, which must present a certificate for `server_name`
/// issued by the CA in `ca`. Returns the plaintext address.
pub async fn originate(upstream: SocketAddr, server_name: &str, ca: &Path) -> Result<SocketAddr> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut plain, _)) = listener.accept().await {
            let (connector, name) = (connector.clone(), name.clone());
            tokio::spawn(async move {
                let Ok(up) = TcpStream::connect(upstream).await else {
                    return;
                };
                let Ok(mut tls) = connector.connect(name, up).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut plain, &mut tls).await;
            });
        }
    });
    Ok(addr)
}
