//! Where blobs are named on the command line: upload's `--to` and download's
//! sources, as `CONTAINER[/PREFIX]` or a blob URL. A URL is read as a URL:
//! its path is percent-decoded (`my%20file` is the blob `my file`, as Azure
//! reads it), and path-style URLs (Azurite, `http://127.0.0.1:10000/ACCOUNT/...`)
//! take the account from the path, as `--storage-url` does. A URL is never
//! quoted back with its SAS signature.

use relay_proto::blob_name::{ContainerNameError, validate_container};
use relay_proto::logsafe::hide_sas_signatures;

/// `CONTAINER[/PREFIX]`, or a blob URL
/// `https://ACCOUNT.blob.core.windows.net/CONTAINER[/PREFIX]` (then also the account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub account: Option<String>,
    pub container: String,
    pub prefix: String,
}

/// Why an argument names no destination; `to` as given, its SAS signature hidden.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error(
        "{:?}: expected CONTAINER[/PREFIX] or an https:// blob URL",
        hide_sas_signatures(to)
    )]
    Scheme { to: String },
    #[error("{:?}: not a URL ({reason})", hide_sas_signatures(to))]
    Url { to: String, reason: url::ParseError },
    #[error(
        "{:?}: leave the SAS out of a blob URL (the relay holds the storage credentials; \
         direct mode takes it in --storage-url)",
        hide_sas_signatures(to)
    )]
    SasInUrl { to: String },
    #[error("{to:?}: '#' starts a URL's fragment; write a '#' in a blob name as %23")]
    Fragment { to: String },
    #[error("{to:?}: the path is not UTF-8 once percent-decoded (blob names are UTF-8)")]
    NotUtf8 { to: String },
    #[error(transparent)]
    Container(#[from] ContainerNameError),
}

/// Splits `CONTAINER[/PREFIX]`, or a blob URL.
pub fn parse_destination(to: &str) -> Result<Destination, DestinationError> {
    let (account, path) = match to.split_once("://") {
        Some(_) => {
            let (account, path) = url_path(to)?;
            (account, path)
        }
        None => (None, to.to_string()),
    };
    let path = path.trim_start_matches('/');
    let (container, prefix) = path.split_once('/').unwrap_or((path, ""));
    validate_container(container)?;
    Ok(Destination {
        account,
        container: container.to_string(),
        prefix: prefix.trim_matches('/').to_string(),
    })
}

/// A blob URL's account and its path below the account, percent-decoded.
fn url_path(to: &str) -> Result<(Option<String>, String), DestinationError> {
    let url = url::Url::parse(to).map_err(|reason| DestinationError::Url {
        to: to.to_string(),
        reason,
    })?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(DestinationError::Scheme { to: to.to_string() });
    }
    if url.query().is_some() {
        return Err(DestinationError::SasInUrl { to: to.to_string() });
    }
    if url.fragment().is_some() {
        return Err(DestinationError::Fragment { to: to.to_string() });
    }
    let account = relay_storage::credentials::account_name(&url);
    let host = url.host_str().unwrap_or_default();
    let path_style = host.parse::<std::net::IpAddr>().is_ok() || host == "localhost";
    let mut segments: Vec<&str> = url
        .path_segments()
        .map(Iterator::collect)
        .unwrap_or_default();
    if path_style && !segments.is_empty() {
        segments.remove(0);
    }
    let mut path = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            path.push('/');
        }
        let decoded = percent_encoding::percent_decode_str(segment)
            .decode_utf8()
            .map_err(|_| DestinationError::NotUtf8 { to: to.to_string() })?;
        path.push_str(&decoded);
    }
    Ok((account, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(account: Option<&str>, c: &str, p: &str) -> Destination {
        Destination {
            account: account.map(str::to_string),
            container: c.into(),
            prefix: p.into(),
        }
    }

    #[test]
    fn names_and_urls() {
        assert_eq!(parse_destination("c1x"), Ok(d(None, "c1x", "")));
        assert_eq!(parse_destination("data/a/b/"), Ok(d(None, "data", "a/b")));
        assert!(parse_destination("Bad").is_err());
        let acct = Some("acct");
        let table = [
            (
                "https://acct.blob.core.windows.net/data/x/y",
                d(acct, "data", "x/y"),
            ),
            (
                "https://acct.blob.core.windows.net/data",
                d(acct, "data", ""),
            ),
            (
                "https://acct.blob.core.windows.net/data/",
                d(acct, "data", ""),
            ),
            // Percent-decoded, as Azure reads a blob URL.
            (
                "https://acct.blob.core.windows.net/c1x/my%20file",
                d(acct, "c1x", "my file"),
            ),
            (
                "https://acct.blob.core.windows.net/c1x/d%C3%A9j%C3%A0/50%25%23",
                d(acct, "c1x", "déjà/50%#"),
            ),
            // A space typed as is is the same name.
            (
                "https://acct.blob.core.windows.net/c1x/my file",
                d(acct, "c1x", "my file"),
            ),
            // Path-style (Azurite): the account is the first segment.
            (
                "http://127.0.0.1:10000/devstoreaccount1/c1x/a%2Bb",
                d(Some("devstoreaccount1"), "c1x", "a+b"),
            ),
            (
                "http://localhost:10000/devstoreaccount1/c1x",
                d(Some("devstoreaccount1"), "c1x", ""),
            ),
        ];
        for (text, want) in table {
            assert_eq!(parse_destination(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_urls_are_refused_clearly_and_never_quote_a_signature() {
        let sas = "https://acct.blob.core.windows.net/data?sv=1&sig=S3CRET";
        let e = parse_destination(sas)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("leave the SAS out") && e.contains("sig=REDACTED"),
            "{e}"
        );
        assert!(!e.contains("S3CRET"), "{e}");
        let e = parse_destination("ftp://x/y?sig=S3CRET")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("expected CONTAINER") && !e.contains("S3CRET"),
            "{e}"
        );
        let e = parse_destination("https://[::1/c?sig=S3CRET")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("not a URL") && !e.contains("S3CRET"), "{e}");
        assert!(matches!(
            parse_destination("https://acct.blob.core.windows.net/c1x/a#b"),
            Err(DestinationError::Fragment { .. })
        ));
        // %FF is no UTF-8 byte sequence: refused, not replaced by U+FFFD.
        let e = parse_destination("https://acct.blob.core.windows.net/c1x/a%FFb");
        assert!(matches!(e, Err(DestinationError::NotUtf8 { .. })), "{e:?}");
        assert!(matches!(
            parse_destination("https://acct.blob.core.windows.net/Bad/x"),
            Err(DestinationError::Container(_))
        ));
    }
}
