//! HTTP/1.1 front of the stand-in: parses the path (`/account/container/blob`),
//! the query (`restype`, `comp`, `blockid`, `blocklisttype`) and the headers
//! the service reads, calls `store::Account`, and answers as the service does
//! (status, `x-ms-error-code`, an XML error body, the headers the SDK reads).
//! List Blobs answers Azure's `EnumerationResults` XML; its writing is in
//! `list_xml`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::list_xml;
use super::store::{Account, Committed, Conditions, ListedBlock, MAX_RESULTS, Properties, Refusal};

type Reply = Response<Full<Bytes>>;

/// Serves one account on `listen` until the process ends.
pub async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let account = Arc::new(Account::default());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let account = account.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let account = account.clone();
                async move { Ok::<_, Infallible>(handle(&account, req).await) }
            });
            // A client that goes away mid-request ends only its connection.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(account: &Account, req: Request<Incoming>) -> Reply {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return error(refusal(400, "IncompleteBody"), false),
    };
    let head = parts.method == Method::HEAD;
    let query: Vec<(String, String)> = parts
        .uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let param = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    // Path style, as Azurite: /account/container[/blob with slashes].
    let path = percent_decode(parts.uri.path());
    let mut segments = path.trim_start_matches('/').splitn(3, '/');
    let (_account, container, blob) = (segments.next(), segments.next(), segments.next());
    let Some(container) = container.filter(|c| !c.is_empty()) else {
        return error(refusal(501, "NotImplementedByStandIn"), head);
    };
    let result = match (blob, &parts.method, param("restype"), param("comp")) {
        (None, &Method::PUT, Some("container"), None) => {
            Ok(if account.create_container(container) {
                base(StatusCode::CREATED)
            } else {
                error(refusal(409, "ContainerAlreadyExists"), false)
            })
        }
        (None, &Method::GET, Some("container"), Some("list")) => list(account, container, &param),
        (None, &Method::GET | &Method::HEAD, Some("container"), None) => account
            .has_container(container)
            .map(|()| base(StatusCode::OK)),
        (Some(blob), &Method::PUT, None, None) => {
            if header(&parts.headers, "x-ms-blob-type") != Some("BlockBlob") {
                Err(refusal(400, "InvalidHeaderValue"))
            } else if !crc64_holds(&parts.headers, &body) {
                Err(refusal(400, "Crc64Mismatch"))
            } else {
                let props = properties(&parts.headers, "x-ms-blob-content-md5", "content-md5");
                account
                    .put_blob(container, blob, body, props, &conditions(&parts.headers))
                    .map(|c| written(&c))
            }
        }
        (Some(blob), &Method::PUT, None, Some("block")) => {
            match param("blockid").and_then(|id| B64.decode(id).ok()) {
                None => Err(refusal(400, "InvalidQueryParameterValue")),
                Some(_) if !md5_holds(&parts.headers, &body) => Err(refusal(400, "Md5Mismatch")),
                Some(_) if !crc64_holds(&parts.headers, &body) => {
                    Err(refusal(400, "Crc64Mismatch"))
                }
                Some(id) => account
                    .put_block(container, blob, id, body)
                    .map(|()| base(StatusCode::CREATED)),
            }
        }
        (Some(blob), &Method::PUT, None, Some("blocklist")) => match parse_block_list(&body) {
            None => Err(refusal(400, "InvalidXmlDocument")),
            Some(list) => {
                let props = properties(&parts.headers, "x-ms-blob-content-md5", "");
                account
                    .put_block_list(container, blob, &list, props, &conditions(&parts.headers))
                    .map(|c| written(&c))
            }
        },
        (Some(blob), &Method::GET, None, Some("blocklist")) => account
            .block_lists(container, blob)
            .map(|l| block_list_xml(param("blocklisttype").unwrap_or("committed"), &l)),
        (Some(blob), &Method::GET | &Method::HEAD, None, None) => account
            .committed(container, blob)
            .and_then(|c| read(&c, &parts.headers, head)),
        (Some(blob), &Method::DELETE, None, None) => account
            .delete(container, blob)
            .map(|()| base(StatusCode::ACCEPTED)),
        _ => Err(refusal(501, "NotImplementedByStandIn")),
    };
    result.unwrap_or_else(|r| error(r, head))
}

/// List Blobs (flat): `prefix`, `marker` (one this stand-in handed out),
/// `maxresults` (default and cap 5000; 0 or not a number is refused, as the
/// service does), `include=metadata`.
fn list<'a>(
    account: &Account,
    container: &str,
    param: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Reply, Refusal> {
    let max = match param("maxresults").map(str::parse::<usize>) {
        None => MAX_RESULTS,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => return Err(refusal(400, "InvalidQueryParameterValue")),
    };
    let prefix = param("prefix").unwrap_or("");
    let metadata = param("include").is_some_and(|i| i.split(',').any(|x| x.trim() == "metadata"));
    let marker = match param("marker").filter(|m| !m.is_empty()) {
        None => None,
        Some(m) => Some(list_xml::marker_name(m).ok_or(refusal(400, "OutOfRangeInput"))?),
    };
    let page = account.list(container, prefix, marker.as_deref(), max)?;
    Ok(xml_reply(list_xml::page(
        container, prefix, max, metadata, &page,
    )))
}

fn refusal(status: u16, code: &'static str) -> Refusal {
    Refusal { status, code }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn conditions(h: &HeaderMap) -> Conditions {
    Conditions {
        if_absent: header(h, "if-none-match") == Some("*"),
        if_match: header(h, "if-match").map(str::to_string),
    }
}

fn properties(h: &HeaderMap, md5_header: &str, body_md5_header: &str) -> Properties {
    let md5 = header(h, md5_header)
        .or_else(|| {
            (!body_md5_header.is_empty())
                .then(|| header(h, body_md5_header))
                .flatten()
        })
        .and_then(|v| B64.decode(v).ok());
    Properties {
        content_type: header(h, "x-ms-blob-content-type").map(str::to_string),
        content_md5: md5,
        metadata: h
            .iter()
            .filter_map(|(k, v)| {
                let name = k.as_str().strip_prefix("x-ms-meta-")?;
                Some((name.to_string(), v.to_str().ok()?.to_string()))
            })
            .collect(),
    }
}

/// A Put Block's transactional Content-MD5, if it sent one, matches the body.
fn md5_holds(h: &HeaderMap, body: &[u8]) -> bool {
    use md5::{Digest, Md5};
    match header(h, "content-md5").and_then(|v| B64.decode(v).ok()) {
        Some(want) => Md5::digest(body).as_slice() == want.as_slice(),
        None => true,
    }
}

/// A request's `x-ms-content-crc64`, if it sent one, is Azure's CRC-64 of the
/// body. With the product's carry-less-multiply CRC: the stand-in shares two
/// cores with what it measures, and the fault proxy's table-driven one cost it
/// about 100 µs per 64 KiB (the proxy, which tests use, keeps the independent
/// check; `relay_storage::checksum` holds the product's to Microsoft's vectors).
fn crc64_holds(h: &HeaderMap, body: &[u8]) -> bool {
    match header(h, "x-ms-content-crc64") {
        Some(v) => B64
            .decode(v)
            .is_ok_and(|b| b == relay_storage::checksum::azure_crc64(body).to_le_bytes()),
        None => true,
    }
}

/// `<BlockList><Latest>ID</Latest>…</BlockList>`: the IDs in order, by list.
fn parse_block_list(body: &[u8]) -> Option<Vec<ListedBlock>> {
    let text = std::str::from_utf8(body).ok()?;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let close = rest.find('>')?;
        let tag = &rest[..close];
        rest = &rest[close + 1..];
        let make: fn(Vec<u8>) -> ListedBlock = match tag {
            "Latest" => ListedBlock::Latest,
            "Committed" => ListedBlock::Committed,
            "Uncommitted" => ListedBlock::Uncommitted,
            _ => continue,
        };
        let end = rest.find('<')?;
        out.push(make(B64.decode(rest[..end].trim()).ok()?));
        rest = &rest[end..];
    }
    Some(out)
}

fn block_list_xml(which: &str, lists: &super::store::BlockLists) -> Reply {
    let section = |name: &str, blocks: &[(Vec<u8>, u64)]| {
        let mut s = format!("<{name}>");
        for (id, size) in blocks {
            s.push_str(&format!(
                "<Block><Name>{}</Name><Size>{size}</Size></Block>",
                B64.encode(id)
            ));
        }
        s.push_str(&format!("</{name}>"));
        s
    };
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    if matches!(which, "committed" | "all") {
        xml.push_str(&section("CommittedBlocks", &lists.committed));
    }
    if matches!(which, "uncommitted" | "all") {
        xml.push_str(&section("UncommittedBlocks", &lists.uncommitted));
    }
    xml.push_str("</BlockList>");
    xml_reply(xml)
}

fn xml_reply(xml: String) -> Reply {
    let mut r = base(StatusCode::OK);
    r.headers_mut()
        .insert("content-type", "application/xml".parse().expect("static"));
    *r.body_mut() = Full::new(Bytes::from(xml));
    r
}

/// Get Blob (whole or `bytes=a-b`) or Get Blob Properties (HEAD), under
/// `If-Match` as the service reads it. A ranged answer carries the range's
/// MD5 as Content-MD5 when asked (`x-ms-range-get-content-md5`) and the
/// blob's as `x-ms-blob-content-md5`, as Azure's does: a download's first
/// Get Blob takes the blob's properties from it.
fn read(c: &Committed, h: &HeaderMap, head: bool) -> Result<Reply, Refusal> {
    use md5::{Digest, Md5};
    if header(h, "if-match").is_some_and(|want| want != "*" && want != c.etag) {
        return Err(refusal(412, "ConditionNotMet"));
    }
    let len = c.data.len() as u64;
    let range = header(h, "x-ms-range")
        .or_else(|| header(h, "range"))
        .map(|r| parse_range(r, len).ok_or(refusal(416, "InvalidRange")))
        .transpose()?;
    let (status, body) = match range {
        Some((a, b)) => (
            StatusCode::PARTIAL_CONTENT,
            c.data.slice(a as usize..=b as usize),
        ),
        None => (StatusCode::OK, c.data.clone()),
    };
    let mut r = base(status);
    let hs = r.headers_mut();
    let mut set = |k: &'static str, v: String| {
        if let Ok(v) = v.parse() {
            hs.insert(k, v);
        }
    };
    set("etag", c.etag.clone());
    set("last-modified", httpdate::fmt_http_date(c.last_modified));
    set("x-ms-blob-type", "BlockBlob".into());
    set("accept-ranges", "bytes".into());
    set(
        "content-type",
        c.props
            .content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".into()),
    );
    set("content-length", body.len().to_string());
    match range {
        Some((a, b)) => {
            set("content-range", format!("bytes {a}-{b}/{len}"));
            if header(h, "x-ms-range-get-content-md5") == Some("true") {
                set("content-md5", B64.encode(Md5::digest(&body)));
            }
            if let Some(md5) = &c.props.content_md5 {
                set("x-ms-blob-content-md5", B64.encode(md5));
            }
        }
        None => {
            if let Some(md5) = &c.props.content_md5 {
                set("content-md5", B64.encode(md5));
            }
        }
    }
    for (k, v) in &c.props.metadata {
        if let (Ok(k), Ok(v)) = (
            hyper::header::HeaderName::try_from(format!("x-ms-meta-{k}")),
            v.parse(),
        ) {
            hs.insert(k, v);
        }
    }
    if !head {
        *r.body_mut() = Full::new(body);
    }
    Ok(r)
}

/// `bytes=a-b` or `bytes=a-` within `len`: an end past the blob's is its
/// end, as the service answers (a blob shorter than the range comes whole);
/// a blob of 0 bytes has no range (416).
fn parse_range(r: &str, len: u64) -> Option<(u64, u64)> {
    let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
    let a: u64 = a.parse().ok()?;
    let last = len.checked_sub(1)?;
    let b: u64 = if b.is_empty() {
        last
    } else {
        b.parse::<u64>().ok()?.min(last)
    };
    (a <= b).then_some((a, b))
}

fn written(c: &Committed) -> Reply {
    use md5::{Digest, Md5};
    let mut r = base(StatusCode::CREATED);
    let hs = r.headers_mut();
    if let Ok(v) = c.etag.parse() {
        hs.insert("etag", v);
    }
    if let Ok(v) = httpdate::fmt_http_date(c.last_modified).parse() {
        hs.insert("last-modified", v);
    }
    if let Ok(v) = B64.encode(Md5::digest(&c.data)).parse() {
        hs.insert("content-md5", v);
    }
    hs.insert(
        "x-ms-request-server-encrypted",
        "true".parse().expect("static"),
    );
    r
}

fn base(status: StatusCode) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    let hs = r.headers_mut();
    hs.insert("x-ms-version", "2025-11-05".parse().expect("static"));
    if let Ok(v) = httpdate::fmt_http_date(SystemTime::now()).parse() {
        hs.insert("date", v);
    }
    hs.insert(
        "x-ms-request-id",
        "00000000-0000-0000-0000-000000000000"
            .parse()
            .expect("static"),
    );
    r
}

fn error(r: Refusal, head: bool) -> Reply {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut reply = base(status);
    if let Ok(v) = r.code.parse() {
        reply.headers_mut().insert("x-ms-error-code", v);
    }
    if !head {
        reply
            .headers_mut()
            .insert("content-type", "application/xml".parse().expect("static"));
        *reply.body_mut() = Full::new(Bytes::from(format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{}</Code><Message>{} (stand-in)</Message></Error>",
            r.code, r.code
        )));
    }
    reply
}

fn percent_decode(p: &str) -> String {
    percent_encoding::percent_decode_str(p)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_block_lists_and_ranges() {
        let xml = format!(
            "<?xml version=\"1.0\"?><BlockList><Latest>{}</Latest><Committed>{}</Committed></BlockList>",
            B64.encode(b"a"),
            B64.encode(b"b")
        );
        assert_eq!(
            parse_block_list(xml.as_bytes()),
            Some(vec![
                ListedBlock::Latest(b"a".to_vec()),
                ListedBlock::Committed(b"b".to_vec())
            ])
        );
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 9)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=0-4194303", 100), Some((0, 99)));
        assert_eq!(parse_range("bytes=100-200", 100), None);
        // An empty blob has no byte to range over (and no panic).
        assert_eq!(parse_range("bytes=0-0", 0), None);
    }
}
