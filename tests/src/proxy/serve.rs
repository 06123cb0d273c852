//! One accepted connection of the fault proxy: its request read whole, its
//! fate decided by the schedule, and the answer (Azurite's, edited or held,
//! or one of the proxy's own) written back.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Fault, Gate, Op, State, Stats};

/// What one accepted connection shares with the proxy.
pub(super) struct Proxy {
    pub(super) upstream: SocketAddr,
    pub(super) state: Arc<Mutex<State>>,
    pub(super) stats: Arc<Stats>,
    pub(super) gate: Arc<Gate>,
    pub(super) closed: tokio::sync::watch::Receiver<bool>,
}

/// What becomes of a forwarded request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Copied back as it came.
    Copy,
    /// Dropped; the caller is reset (a lost response).
    Lose,
    /// One bit of its body flipped.
    Corrupt,
    /// Its head and half its body sent, then held.
    HoldHalf,
    /// Its head and half its body sent, then closed.
    Short,
    /// Its body in 64 KiB pieces this far apart.
    Trickle(Duration),
}

impl Proxy {
    /// One request per connection: read it whole, then apply its fate.
    pub(super) async fn serve(self, mut client: TcpStream) {
        let Some((head, mut body)) = read_request(&mut client).await else {
            return;
        };
        let stats = &self.stats;
        stats.requests.fetch_add(1, Ordering::Relaxed);
        let target = head.lines().next().and_then(|l| l.split(' ').nth(1));
        if let (Some(t), Ok(mut paths)) = (target, stats.paths.lock()) {
            paths.push(t.split('?').next().unwrap_or(t).to_string());
        }
        let op = head
            .lines()
            .next()
            .and_then(|l| {
                let mut parts = l.split(' ');
                Some(Op::classify(parts.next()?, parts.next()?))
            })
            .unwrap_or(Op::Other);
        let nth = stats.requests_by_op[op.index()].fetch_add(1, Ordering::SeqCst) + 1;
        // Only a body can be corrupted: a bodiless request (Create Container, a
        // Get) leaves the scheduled corruption for the next one with a body.
        let corrupt =
            !body.is_empty() && self.state.lock().is_ok_and(|mut s| s.take_corruption(op));
        if corrupt {
            let mid = body.len() / 2;
            body[mid] ^= 0x01;
            stats.corrupted.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(claimed) = header(&head, "x-ms-content-crc64") {
            if crc64_header_matches(&claimed, &body) {
                stats.crc64_matched.fetch_add(1, Ordering::SeqCst);
            } else {
                stats.crc64_mismatched.fetch_add(1, Ordering::SeqCst);
                return refuse(
                    client,
                    400,
                    "Crc64Mismatch",
                    "The CRC64 value specified in the request did not match with the CRC64 value calculated by the server.",
                )
                .await;
            }
        }
        self.wait_at_gate(op, nth).await;
        let (fault, list_page) = self
            .state
            .lock()
            .map(|mut s| (s.decide(op), s.schedule.list_page))
            .unwrap_or((None, None));
        let head = match (op, list_page) {
            (Op::ListBlobs, Some(page)) => shorter_pages(&head, page),
            _ => head,
        };
        if !matches!(fault, None | Some(Fault::Delay(_))) {
            stats.faults.fetch_add(1, Ordering::Relaxed);
        }
        self.apply(fault, client, op, &head, &body).await;
    }

    /// Does to the request what `fault` says (`None`: forward it).
    async fn apply(self, fault: Option<Fault>, client: TcpStream, op: Op, head: &str, body: &[u8]) {
        let answer = match fault {
            None => {
                let corrupt = self
                    .state
                    .lock()
                    .is_ok_and(|mut s| s.take_answer_corruption(op));
                if corrupt {
                    Answer::Corrupt
                } else {
                    Answer::Copy
                }
            }
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Answer::Copy
            }
            Some(Fault::LostResponse) => Answer::Lose,
            Some(Fault::HoldBody) => Answer::HoldHalf,
            Some(Fault::ShortBody) => Answer::Short,
            Some(Fault::Trickle(d)) => Answer::Trickle(d),
            Some(Fault::HoldAnswer) => return self.hold_open(client).await,
            Some(Fault::Reset) => return reset(client),
            Some(Fault::Swallowed) => return acknowledge(client).await,
            Some(Fault::Stall(d)) => return tokio::time::sleep(d).await,
            Some(Fault::ServerBusy) => {
                return refuse(
                    client,
                    503,
                    "ServerBusy",
                    "The server is currently unable to receive requests. Please retry your request.",
                )
                .await;
            }
            Some(Fault::OperationTimeout) => {
                return refuse(
                    client,
                    503,
                    "OperationTimeout",
                    "The operation could not be completed within the permitted time.",
                )
                .await;
            }
            Some(Fault::InternalError) => {
                return refuse(
                    client,
                    500,
                    "InternalError",
                    "The server encountered an internal error. Please retry the request.",
                )
                .await;
            }
            Some(Fault::Status(s, c)) => {
                return refuse(client, s, c, "Injected by the fault proxy.").await;
            }
        };
        self.forward(client, op, head, body, answer).await;
    }

    /// Waits while the gate holds the `nth` request of `op`.
    async fn wait_at_gate(&self, op: Op, nth: u64) {
        let gate = &self.gate;
        let held = !*gate.open.borrow()
            && gate
                .ops
                .lock()
                .is_ok_and(|ops| ops.iter().any(|(o, passed)| *o == op && nth > *passed));
        if held {
            let mut open = gate.open.subscribe();
            self.stats.held.fetch_add(1, Ordering::SeqCst);
            let _ = open.wait_for(|o| *o).await;
            self.stats.held.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sends nothing more and keeps the connection open until the caller
    /// closes it (counted: it gave up, as a reader must) or the proxy is dropped.
    async fn hold_open(mut self, mut client: TcpStream) {
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                read = client.read(&mut buf) => match read {
                    Ok(0) | Err(_) => {
                        self.stats.given_up.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    // A caller has nothing more to say; whatever comes is ignored.
                    Ok(_) => {}
                },
                _ = self.closed.wait_for(|c| *c) => return,
            }
        }
    }

    /// Sends the request to Azurite with `Connection: close` and hands the
    /// answer back as `answer` says.
    async fn forward(self, mut client: TcpStream, op: Op, head: &str, body: &[u8], answer: Answer) {
        let stats = &self.stats;
        let Ok(mut up) = TcpStream::connect(self.upstream).await else {
            return reset(client);
        };
        let mut out = String::with_capacity(head.len() + 32);
        for line in head.trim_end_matches("\r\n").split("\r\n") {
            // The proxy has checked `x-ms-content-crc64` as the service would (see
            // `serve`); Azurite refuses the header in strict mode, so it stops here.
            if line.split_once(':').is_some_and(|(k, _)| {
                let k = k.trim();
                k.eq_ignore_ascii_case("connection") || k.eq_ignore_ascii_case("x-ms-content-crc64")
            }) {
                continue;
            }
            out.push_str(line);
            out.push_str("\r\n");
        }
        out.push_str("Connection: close\r\n\r\n");
        if up.write_all(out.as_bytes()).await.is_err() || up.write_all(body).await.is_err() {
            return reset(client);
        }
        stats.forwarded.fetch_add(1, Ordering::Relaxed);
        stats.forwarded_by_op[op.index()].fetch_add(1, Ordering::SeqCst);
        if answer == Answer::Copy {
            let copied = tokio::io::copy(&mut up, &mut client).await;
            if copied.is_ok() && client.shutdown().await.is_ok() {
                stats.answered_by_op[op.index()].fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        // The whole answer first (Azurite closes after it): to edit it.
        let mut reply = Vec::new();
        let _ = up.read_to_end(&mut reply).await;
        let body_at = reply
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(reply.len(), |i| i + 4);
        match answer {
            Answer::Copy => {}
            // Azure finished the operation; the caller never hears of it.
            Answer::Lose => reset(client),
            Answer::Corrupt => {
                let ok = reply.starts_with(b"HTTP/1.1 2");
                if ok && body_at < reply.len() {
                    let mid = body_at + (reply.len() - body_at) / 2;
                    reply[mid] ^= 0x01;
                    stats.answers_corrupted.fetch_add(1, Ordering::SeqCst);
                }
                if client.write_all(&reply).await.is_ok() && client.shutdown().await.is_ok() {
                    stats.answered_by_op[op.index()].fetch_add(1, Ordering::SeqCst);
                }
            }
            Answer::HoldHalf | Answer::Short => {
                let half = body_at + (reply.len() - body_at) / 2;
                if client.write_all(&reply[..half]).await.is_ok() {
                    if answer == Answer::Short {
                        let _ = client.shutdown().await;
                    } else {
                        self.hold_open(client).await;
                    }
                }
            }
            Answer::Trickle(gap) => {
                let (head, body) = reply.split_at(body_at);
                if client.write_all(head).await.is_err() {
                    return;
                }
                for piece in body.chunks(64 << 10) {
                    tokio::time::sleep(gap).await;
                    if client.write_all(piece).await.is_err() {
                        return;
                    }
                }
                if client.shutdown().await.is_ok() {
                    stats.answered_by_op[op.index()].fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

/// The request head with `maxresults` at most `page` (added if absent).
fn shorter_pages(head: &str, page: u32) -> String {
    let Some((line, rest)) = head.split_once("\r\n") else {
        return head.to_string();
    };
    let mut parts = line.splitn(3, ' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return head.to_string();
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("maxresults="))
        .map(str::to_string)
        .collect();
    let asked = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("maxresults=")?.parse::<u32>().ok())
        .unwrap_or(u32::MAX);
    pairs.push(format!("maxresults={}", asked.min(page)));
    format!("{method} {path}?{} {version}\r\n{rest}", pairs.join("&"))
}

/// Answers 201 Created, as Azure acknowledges a Put Block, and closes.
async fn acknowledge(mut client: TcpStream) {
    let reply = "HTTP/1.1 201 Created\r\nContent-Length: 0\r\nx-ms-request-id: 00000000-0000-0000-0000-000000000000\r\nx-ms-version: 2025-11-05\r\nx-ms-request-server-encrypted: true\r\nConnection: close\r\n\r\n";
    let _ = client.write_all(reply.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Answers with an Azure-style error and closes.
async fn refuse(mut client: TcpStream, status: u16, code: &str, message: &str) {
    let body = format!(
        "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>{message}\nRequestId:00000000-0000-0000-0000-000000000000\nTime:2026-01-01T00:00:00.0000000Z</Message></Error>"
    );
    let reply = format!(
        "HTTP/1.1 {status} {code}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nx-ms-error-code: {code}\r\nx-ms-request-id: 00000000-0000-0000-0000-000000000000\r\nx-ms-version: 2025-11-05\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(reply.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// A request header's value (the first one of that name).
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// Azure Storage's CRC-64, written here from its definition (Microsoft's
/// `Crc64.cs`: reflected polynomial 0x9A6C9329AC4BC9B5, all-ones init and final
/// xor), independently of the product's implementation, so the proxy checks the
/// relay's `x-ms-content-crc64` as the service would.
pub fn reference_crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x9A6C_9329_AC4B_C9B5;
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, entry) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            }
            *entry = c;
        }
        t
    });
    let mut crc = !0u64;
    for &b in data {
        crc = table[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Whether `x-ms-content-crc64` (base64 of the CRC's 8 bytes, little-endian)
/// names `body`.
fn crc64_header_matches(claimed: &str, body: &[u8]) -> bool {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(claimed)
        .is_ok_and(|b| b == reference_crc64(body).to_le_bytes())
}

/// Reads the request head and its Content-Length body; `None` if the peer went away
/// or sent something this proxy does not handle (it then just closes).
async fn read_request(sock: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::with_capacity(8192);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut len = 0usize;
    for line in head.lines().skip(1) {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if k.trim().eq_ignore_ascii_case("content-length") {
            len = v.trim().parse().ok()?;
        }
        if k.trim().eq_ignore_ascii_case("transfer-encoding") {
            // The Azure SDK sends sized bodies; chunked requests are not supported here.
            return None;
        }
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut chunk = vec![0u8; (len - body.len()).min(1 << 20)];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// Closes with RST rather than FIN, as a broken middlebox or a crashed front end would.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}

#[cfg(test)]
mod crc64_tests {
    use super::*;

    #[test]
    fn reference_crc64_matches_microsofts_vectors() {
        // azure-storage-extensions 0.1.0, `checksums.crc64.compute(data, 0)`.
        assert_eq!(reference_crc64(b""), 0);
        assert_eq!(reference_crc64(b"123456789"), 0xae8b_1486_0a79_9888);
        assert_eq!(reference_crc64(b"a"), 0x8c2f_8445_b4cb_fc3c);
        assert!(crc64_header_matches("iJh5CoYUi64=", b"123456789"));
        assert!(!crc64_header_matches("iJh5CoYUi64=", b"123456780"));
        assert!(!crc64_header_matches("not base64!", b"123456789"));
    }
}
