//! Fault-injecting HTTP/1.1 proxy between the relay and Azurite (see the fault tests).
//!
//! Why its own proxy: the relay's retry rules (503 ServerBusy, OperationTimeout,
//! 500, resets, stalls, a lost Put Block List response) only show against a storage
//! endpoint that misbehaves on cue, and Azurite never does. The proxy reads each
//! request whole, decides its fate from a seeded schedule (so a run is repeatable
//! for a given arrival order), then answers with an Azure-style error, cuts the TCP
//! connection, stalls, or forwards to Azurite. Every answer closes the connection
//! (`Connection: close`), so responses never need parsing; the relay's HTTP client
//! simply opens a new connection per request, which on loopback costs nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The Azure operation a request is, from its method and `comp=` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    PutBlock,
    PutBlockList,
    GetBlockList,
    GetProperties,
    /// Get Blob (a download's ranged read).
    GetBlob,
    Other,
}

impl Op {
    const ALL: [Op; 6] = [
        Op::PutBlock,
        Op::PutBlockList,
        Op::GetBlockList,
        Op::GetProperties,
        Op::GetBlob,
        Op::Other,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn classify(method: &str, target: &str) -> Self {
        let query = target.split_once('?').map(|(_, q)| q).unwrap_or("");
        let comp = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("comp="))
            .unwrap_or("");
        match (method, comp) {
            ("PUT", "block") => Op::PutBlock,
            ("PUT", "blocklist") => Op::PutBlockList,
            ("GET", "blocklist") => Op::GetBlockList,
            ("HEAD", "") => Op::GetProperties,
            ("GET", "") if !query.contains("restype=") => Op::GetBlob,
            _ => Op::Other,
        }
    }
}

/// What happens to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 503 ServerBusy, as Azure throttles.
    ServerBusy,
    /// 503 OperationTimeout.
    OperationTimeout,
    /// 500 InternalError.
    InternalError,
    /// Any other Azure error status and code (e.g. 403 AuthorizationFailure).
    Status(u16, &'static str),
    /// The connection is reset (RST) after the request was read; Azure never saw it.
    Reset,
    /// Forwarded and done by Azure, but the response is lost (RST instead).
    LostResponse,
    /// No answer for this long, then the connection closes (a read timeout if the
    /// client's timeout is shorter).
    Stall(Duration),
    /// Forwarded after this delay (slow storage).
    Delay(Duration),
}

/// Which requests fail, decided in arrival order.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// Seed of the random draws below.
    pub seed: u64,
    /// Faults for the first requests of each operation, in order: an entry is used
    /// by the next request of its `Op` and then consumed.
    pub script: Vec<(Op, Fault)>,
    /// After the script: each request of a listed `Op` draws once; the first entry
    /// whose cumulative probability covers the draw applies.
    pub chances: Vec<(Op, f64, Fault)>,
    /// Every forwarded request of these operations waits this long first.
    pub delays: Vec<(Op, Duration)>,
    /// The next request of each listed `Op` (one per entry, then consumed) has
    /// one bit of its body flipped on arrival, as a corrupting path would: the
    /// checksum check below then refuses it as the service would.
    pub corrupt: Vec<Op>,
}

impl Schedule {
    pub fn seeded(seed: u64) -> Self {
        Self {
            seed,
            ..Default::default()
        }
    }
}

struct State {
    schedule: Schedule,
    rng: rand::rngs::StdRng,
}

impl State {
    fn take_corruption(&mut self, op: Op) -> bool {
        let found = self.schedule.corrupt.iter().position(|o| *o == op);
        if let Some(i) = found {
            self.schedule.corrupt.remove(i);
        }
        found.is_some()
    }

    fn decide(&mut self, op: Op) -> Option<Fault> {
        if let Some(i) = self.schedule.script.iter().position(|(o, _)| *o == op) {
            return Some(self.schedule.script.remove(i).1);
        }
        let applicable: Vec<(f64, Fault)> = self
            .schedule
            .chances
            .iter()
            .filter(|(o, _, _)| *o == op)
            .map(|(_, p, f)| (*p, f.clone()))
            .collect();
        if !applicable.is_empty() {
            let draw: f64 = self.rng.random();
            let mut acc = 0.0;
            for (p, f) in applicable {
                acc += p;
                if draw < acc {
                    return Some(f);
                }
            }
        }
        self.schedule
            .delays
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, d)| Fault::Delay(*d))
    }
}

/// Counts of what the proxy did, for assertions.
#[derive(Debug, Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub forwarded: AtomicU64,
    /// Requests that got an error status, a reset, a stall or a lost response.
    pub faults: AtomicU64,
    /// Per `Op` (indexed by `Op as usize`): requests read whole.
    requests_by_op: [AtomicU64; Op::ALL.len()],
    /// Per `Op`: requests forwarded to Azurite (body written; the answer may
    /// still be on its way).
    forwarded_by_op: [AtomicU64; Op::ALL.len()],
    /// Per `Op`: forwarded requests whose whole answer reached the relay.
    answered_by_op: [AtomicU64; Op::ALL.len()],
    /// Requests waiting at the gate (`FaultProxy::hold`) right now.
    pub held: AtomicU64,
    /// Requests with `x-ms-content-crc64` whose body matched it / did not (those
    /// are refused with 400 Crc64Mismatch, as Azure does; Azurite cannot check
    /// it, so the header is not forwarded).
    pub crc64_matched: AtomicU64,
    pub crc64_mismatched: AtomicU64,
    /// Bodies corrupted on purpose (`Schedule::corrupt`).
    pub corrupted: AtomicU64,
    /// Every request's target path (without its query), in arrival order:
    /// which blobs were asked about (`Stats::paths`).
    paths: Mutex<Vec<String>>,
}

impl Stats {
    pub fn requests_of(&self, op: Op) -> u64 {
        self.requests_by_op[op.index()].load(Ordering::SeqCst)
    }

    pub fn forwarded_of(&self, op: Op) -> u64 {
        self.forwarded_by_op[op.index()].load(Ordering::SeqCst)
    }

    pub fn answered_of(&self, op: Op) -> u64 {
        self.answered_by_op[op.index()].load(Ordering::SeqCst)
    }

    /// Target paths (`/account/container/blob`, URL-encoded) of the requests
    /// read so far, in arrival order.
    pub fn paths(&self) -> Vec<String> {
        self.paths.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Requests whose `x-ms-content-crc64` matched their body / did not.
    pub fn crc64_checks(&self) -> (u64, u64) {
        (
            self.crc64_matched.load(Ordering::SeqCst),
            self.crc64_mismatched.load(Ordering::SeqCst),
        )
    }
}

/// Holds requests of chosen operations until released, so a test can act while
/// the relay is known to be at that step (e.g. committing), whatever the timing.
#[derive(Debug)]
struct Gate {
    /// Operations held while the gate is closed.
    ops: Mutex<Vec<Op>>,
    /// True once released: everything held goes on, nothing more is held.
    open: tokio::sync::watch::Sender<bool>,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    state: Arc<Mutex<State>>,
    gate: Arc<Gate>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on an ephemeral loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr, schedule: Schedule) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("proxy bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy addr: {e}"));
        let state = Arc::new(Mutex::new(State {
            rng: rand::rngs::StdRng::seed_from_u64(schedule.seed),
            schedule,
        }));
        let stats = Arc::new(Stats::default());
        let gate = Arc::new(Gate {
            ops: Mutex::new(Vec::new()),
            open: tokio::sync::watch::Sender::new(false),
        });
        let (st, sx, gx) = (state.clone(), stats.clone(), gate.clone());
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, upstream, st.clone(), sx.clone(), gx.clone()));
            }
        });
        Self {
            addr,
            stats,
            state,
            gate,
            task,
        }
    }

    /// From now on, requests of `op` wait (after being read whole, before their
    /// fate is decided) until `release`. `stats.held` counts the waiting ones.
    pub fn hold(&self, op: Op) {
        if let Ok(mut ops) = self.gate.ops.lock() {
            ops.push(op);
        }
    }

    /// Lets every held request go on; nothing is held any more.
    pub fn release(&self) {
        self.gate.open.send_replace(true);
    }

    /// Waits (up to `limit`, a guard against hangs) until `n` requests are held.
    pub async fn wait_held(&self, n: u64, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.stats.held.load(Ordering::SeqCst) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {n} requests held within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Storage URL for the development account through this proxy.
    pub fn url(&self) -> String {
        format!("http://{}/{}", self.addr, crate::DEV_ACCOUNT)
    }

    /// Replaces the schedule (the random sequence continues).
    pub fn set_schedule(&self, schedule: Schedule) {
        if let Ok(mut s) = self.state.lock() {
            s.schedule = schedule;
        }
    }

    pub fn faults(&self) -> u64 {
        self.stats.faults.load(Ordering::Relaxed)
    }

    pub fn requests(&self) -> u64 {
        self.stats.requests.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request per connection: read it whole, then apply its fate.
async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: Arc<Mutex<State>>,
    stats: Arc<Stats>,
    gate: Arc<Gate>,
) {
    let Some((head, mut body)) = read_request(&mut client).await else {
        return;
    };
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
    stats.requests_by_op[op.index()].fetch_add(1, Ordering::SeqCst);
    // Only a body can be corrupted: a bodiless request (Create Container, a
    // Get) leaves the scheduled corruption for the next one with a body.
    let corrupt = !body.is_empty() && state.lock().is_ok_and(|mut s| s.take_corruption(op));
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
    let held = !*gate.open.borrow() && gate.ops.lock().is_ok_and(|ops| ops.contains(&op));
    if held {
        let mut open = gate.open.subscribe();
        stats.held.fetch_add(1, Ordering::SeqCst);
        let _ = open.wait_for(|o| *o).await;
        stats.held.fetch_sub(1, Ordering::SeqCst);
    }
    let fault = state.lock().ok().and_then(|mut s| s.decide(op));
    if !matches!(fault, None | Some(Fault::Delay(_))) {
        stats.faults.fetch_add(1, Ordering::Relaxed);
    }
    let (status, code, message) = match fault {
        None => return forward(client, upstream, op, &head, &body, &stats, false).await,
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            return forward(client, upstream, op, &head, &body, &stats, false).await;
        }
        Some(Fault::LostResponse) => {
            return forward(client, upstream, op, &head, &body, &stats, true).await;
        }
        Some(Fault::Reset) => return reset(client),
        Some(Fault::Stall(d)) => {
            tokio::time::sleep(d).await;
            return;
        }
        Some(Fault::ServerBusy) => (
            503,
            "ServerBusy",
            "The server is currently unable to receive requests. Please retry your request.",
        ),
        Some(Fault::OperationTimeout) => (
            503,
            "OperationTimeout",
            "The operation could not be completed within the permitted time.",
        ),
        Some(Fault::InternalError) => (
            500,
            "InternalError",
            "The server encountered an internal error. Please retry the request.",
        ),
        Some(Fault::Status(s, c)) => (s, c, "Injected by the fault proxy."),
    };
    refuse(client, status, code, message).await;
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

/// Sends the request to Azurite with `Connection: close` and copies the answer back
/// until Azurite closes; with `lose`, the answer is dropped and the client reset.
async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    op: Op,
    head: &str,
    body: &[u8],
    stats: &Stats,
    lose: bool,
) {
    let Ok(mut up) = TcpStream::connect(upstream).await else {
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
    if lose {
        // Let Azure finish the operation, then make sure the caller never hears of it.
        let mut sink = Vec::new();
        let _ = up.read_to_end(&mut sink).await;
        return reset(client);
    }
    let copied = tokio::io::copy(&mut up, &mut client).await;
    if copied.is_ok() && client.shutdown().await.is_ok() {
        stats.answered_by_op[op.index()].fetch_add(1, Ordering::SeqCst);
    }
}

/// Closes with RST rather than FIN, as a broken middlebox or a crashed front end would.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}

/// A schedule with random 503s, 500s, resets and stalls on the three operations
/// the relay retries, each with probability `p` per request in total.
pub fn chaos(seed: u64, p: f64, stall: Duration) -> Schedule {
    let mut chances = Vec::new();
    for op in [Op::PutBlock, Op::PutBlockList, Op::GetBlockList] {
        chances.push((op, p * 0.3, Fault::ServerBusy));
        chances.push((op, p * 0.2, Fault::OperationTimeout));
        chances.push((op, p * 0.2, Fault::InternalError));
        chances.push((op, p * 0.2, Fault::Reset));
        chances.push((op, p * 0.1, Fault::Stall(stall)));
    }
    Schedule {
        seed,
        chances,
        ..Default::default()
    }
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
