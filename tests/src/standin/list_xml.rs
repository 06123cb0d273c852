//! A List Blobs page as Azure writes it: `EnumerationResults` with the
//! request's `Prefix`, `Marker` and `MaxResults`, one `Blob` per name (its
//! `Properties`: `Last-Modified` in RFC 1123, `Etag` unquoted, as the
//! service lists it, `Content-Length`, `Content-Type`, `Content-MD5`; its
//! `Metadata` when asked for) and `NextMarker`. A name or value XML 1.0
//! cannot hold (a control character) is written as the service does:
//! `<Name Encoded="true">` and percent-encoded. The marker is the last name
//! returned, base64 (URL-safe) as an opaque token: whatever the name holds,
//! the marker is plain text in XML and in a query.

use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as MARKER;

use super::store::{ListPage, ListedBlob};

/// The answer's body for `page`, listed from `container` with `prefix`.
pub fn page(container: &str, prefix: &str, max: usize, metadata: bool, page: &ListPage) -> String {
    let mut x = String::with_capacity(256 + page.blobs.len() * 512);
    x.push_str("\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?>");
    let _ = write!(
        x,
        "<EnumerationResults ServiceEndpoint=\"http://127.0.0.1/\" ContainerName=\"{}\">",
        escape(container)
    );
    if !prefix.is_empty() {
        let _ = write!(x, "<Prefix>{}</Prefix>", escape(prefix));
    }
    let _ = write!(x, "<MaxResults>{max}</MaxResults><Blobs>");
    for b in &page.blobs {
        blob(&mut x, b, metadata);
    }
    x.push_str("</Blobs>");
    match &page.next_marker {
        Some(m) => {
            let _ = write!(x, "<NextMarker>{}</NextMarker>", MARKER.encode(m));
        }
        None => x.push_str("<NextMarker />"),
    }
    x.push_str("</EnumerationResults>");
    x
}

/// The name a marker a client handed back stands for; `None`: not one of
/// ours (the service refuses such a marker too).
pub fn marker_name(marker: &str) -> Option<String> {
    String::from_utf8(MARKER.decode(marker).ok()?).ok()
}

fn blob(x: &mut String, b: &ListedBlob, metadata: bool) {
    if xml_safe(&b.name) {
        let _ = write!(x, "<Blob><Name>{}</Name>", escape(&b.name));
    } else {
        let encoded =
            percent_encoding::utf8_percent_encode(&b.name, percent_encoding::NON_ALPHANUMERIC);
        let _ = write!(x, "<Blob><Name Encoded=\"true\">{encoded}</Name>");
    }
    let when = httpdate::fmt_http_date(b.last_modified);
    let content_type = b
        .props
        .content_type
        .as_deref()
        .unwrap_or("application/octet-stream");
    let _ = write!(
        x,
        "<Properties><Creation-Time>{when}</Creation-Time><Last-Modified>{when}</Last-Modified>\
         <Etag>{}</Etag><Content-Length>{}</Content-Length><Content-Type>{}</Content-Type>",
        escape(b.etag.trim_matches('"')),
        b.size,
        escape(content_type)
    );
    if let Some(md5) = &b.props.content_md5 {
        let _ = write!(x, "<Content-MD5>{}</Content-MD5>", B64.encode(md5));
    }
    x.push_str(
        "<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier>\
         <AccessTierInferred>true</AccessTierInferred><LeaseStatus>unlocked</LeaseStatus>\
         <LeaseState>available</LeaseState><ServerEncrypted>true</ServerEncrypted></Properties>",
    );
    if metadata {
        x.push_str("<Metadata>");
        for (k, v) in &b.props.metadata {
            // Metadata names are C# identifiers (the service refuses others),
            // so only the value needs escaping.
            let _ = write!(x, "<{k}>{}</{k}>", escape(v));
        }
        x.push_str("</Metadata>");
    }
    x.push_str("<OrMetadata /></Blob>");
}

/// Whether every character of `s` may stand in XML 1.0 text.
fn xml_safe(s: &str) -> bool {
    s.chars().all(|c| {
        matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && !matches!(c, '\u{FFFE}' | '\u{FFFF}'))
    })
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::standin::store::Properties;

    /// The relay's own parser reads the page back: names (escaped and
    /// encoded), sizes, ETags, Last-Modified, the relay's metadata, the marker.
    #[test]
    fn the_relays_parser_reads_a_page() {
        let listed = |name: &str, meta: Vec<(String, String)>| ListedBlob {
            name: name.into(),
            size: 12,
            etag: "\"0x8DD000000000001\"".into(),
            last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_689_600),
            props: Properties {
                metadata: meta,
                ..Properties::default()
            },
        };
        let meta = vec![
            ("sha256".to_string(), "ab".to_string()),
            ("relay_seal".to_string(), "s&l".to_string()),
            ("other".to_string(), "x".to_string()),
        ];
        let p = ListPage {
            blobs: vec![
                listed("p/a&<b>", meta),
                listed("p/\u{1F600}", vec![]),
                listed("p/ctl\u{1}x", vec![]),
            ],
            next_marker: Some("p/ctl\u{1}x".into()),
        };
        let xml = page("c", "p/", 3, true, &p);
        let got = relay_storage::listing::parse_page(xml.as_bytes(), "p/").expect("parse");
        let names: Vec<&str> = got.blobs.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["p/a&<b>", "p/\u{1F600}", "p/ctl\u{1}x"]);
        let first = &got.blobs[0];
        assert_eq!(
            (first.size, first.etag.as_str(), first.last_modified),
            (12, "\"0x8DD000000000001\"", Some(1_735_689_600))
        );
        assert_eq!(
            (first.sha256.as_deref(), first.seal.as_deref()),
            (Some("ab"), Some("s&l"))
        );
        assert_eq!(got.blobs[1].seal, None);
        let marker = got.next_marker.as_deref().expect("a marker");
        assert_eq!(marker_name(marker).as_deref(), Some("p/ctl\u{1}x"));
        assert_eq!(marker_name("not base64!"), None);
        let last = ListPage {
            next_marker: None,
            ..p
        };
        let got =
            relay_storage::listing::parse_page(page("c", "", 5000, false, &last).as_bytes(), "")
                .expect("parse");
        assert_eq!((got.blobs.len(), got.next_marker), (3, None));
        assert_eq!(got.blobs[0].sha256, None, "no metadata asked for");
    }
}
