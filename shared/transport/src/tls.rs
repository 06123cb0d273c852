//! Certificate fingerprints as people handle them: SHA-256 of the DER certificate,
//! printed like `openssl x509 -fingerprint -sha256` (colons optional when parsing).

use relay_proto::limits::{ALPN, ALPN_ZSTD};
use sha2::{Digest, Sha256};

/// The ALPN protocols an end announces, preferred first: compressed chunks
/// when it may use them, and the plain protocol every version knows.
pub fn alpn_protocols(zstd: bool) -> Vec<Vec<u8>> {
    match zstd {
        true => vec![ALPN_ZSTD.to_vec(), ALPN.to_vec()],
        false => vec![ALPN.to_vec()],
    }
}

/// Whether the handshake settled on compressed chunks: both ends announced
/// them (an end that does not know `ALPN_ZSTD` settles on `ALPN`).
pub fn agreed_zstd(conn: &quinn::Connection) -> bool {
    conn.handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|h| h.protocol)
        .is_some_and(|p| p == ALPN_ZSTD)
}

pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

/// `AB:CD:...` upper-case, colon-separated, as openssl prints it.
pub fn format_fingerprint(fp: &[u8; 32]) -> String {
    fp.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Why text is not a certificate fingerprint; `text` as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintError {
    #[error("certificate fingerprint {text:?} is not hex")]
    NotHex { text: String },
    #[error("certificate fingerprint {text:?} is not 32 bytes (SHA-256)")]
    WrongLength { text: String },
}

/// Accepts `ab:cd:...`, `ABCD...`, with or without a `sha256 Fingerprint=` prefix.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], FingerprintError> {
    let t = text.trim();
    let t = t.rsplit_once('=').map_or(t, |(_, v)| v);
    let hex_only: String = t.chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(&hex_only).map_err(|_| FingerprintError::NotHex {
        text: text.to_string(),
    })?;
    bytes.try_into().map_err(|_| FingerprintError::WrongLength {
        text: text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_forms() {
        let fp = fingerprint(b"cert");
        let text = format_fingerprint(&fp);
        assert_eq!(parse_fingerprint(&text), Ok(fp));
        assert_eq!(parse_fingerprint(&hex::encode(fp)), Ok(fp));
        assert_eq!(
            parse_fingerprint(&format!("sha256 Fingerprint={text}")),
            Ok(fp)
        );
        assert!(parse_fingerprint("abcd").is_err());
        assert!(parse_fingerprint("zz").is_err());
    }
}
