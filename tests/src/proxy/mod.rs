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
//!
//! The read side has faults of its own: an answer held before its head or
//! halfway through its body (until the caller gives up, counted), a byte of
//! an answer's body flipped, List Blobs answered in shorter pages than asked
//! (as Azure may), and a gate that lets the first requests of an operation
//! through and holds the rest (a blob changed between two ranges).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::net::TcpListener;

mod serve;

use serve::Proxy;
pub use serve::reference_crc64;

/// The Azure operation a request is, from its method and `comp=` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    PutBlock,
    PutBlockList,
    GetBlockList,
    GetProperties,
    /// Get Blob (a download's ranged read).
    GetBlob,
    /// List Blobs (`restype=container&comp=list`).
    ListBlobs,
    /// Get Container Properties (`restype=container`, no `comp`): the relay's
    /// check that a container is there before its listing's first page.
    ContainerProperties,
    Other,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::PutBlock,
        Op::PutBlockList,
        Op::GetBlockList,
        Op::GetProperties,
        Op::GetBlob,
        Op::ListBlobs,
        Op::ContainerProperties,
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
            ("GET" | "HEAD", "") if query.split('&').any(|kv| kv == "restype=container") => {
                Op::ContainerProperties
            }
            ("PUT", "block") => Op::PutBlock,
            ("PUT", "blocklist") => Op::PutBlockList,
            ("GET", "blocklist") => Op::GetBlockList,
            ("HEAD", "") => Op::GetProperties,
            ("GET", "") if !query.contains("restype=") => Op::GetBlob,
            ("GET", "list") if query.split('&').any(|kv| kv == "restype=container") => {
                Op::ListBlobs
            }
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
    /// Answered 201 Created and never forwarded: storage that acknowledges a
    /// write (a Put Block) it does not keep.
    Swallowed,
    /// Never answered: the connection stays open, silent, until the caller
    /// gives up on it (`Stats::given_up`) or the proxy is dropped.
    HoldAnswer,
    /// Forwarded; the answer's head and the first half of its body are sent,
    /// then nothing more, held as `HoldAnswer` is.
    HoldBody,
    /// Forwarded; the answer's head and the first half of its body are sent,
    /// then the connection closes: a body cut short.
    ShortBody,
    /// Forwarded; the answer's body comes in 64 KiB pieces this far apart: a
    /// slow read that keeps moving.
    Trickle(Duration),
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
    /// The next forwarded answer of each listed `Op` with a body (one per
    /// entry, then consumed) has one bit of its body flipped on the way back:
    /// storage's bytes corrupted in transit to the reader.
    pub corrupt_answers: Vec<Op>,
    /// List Blobs asks storage for at most this many names a page, whatever
    /// the caller asked (Azure may answer with fewer than `maxresults`).
    pub list_page: Option<u32>,
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

/// Removes one `op` from `list`; whether there was one.
fn take(list: &mut Vec<Op>, op: Op) -> bool {
    let found = list.iter().position(|o| *o == op);
    if let Some(i) = found {
        list.remove(i);
    }
    found.is_some()
}

impl State {
    fn take_corruption(&mut self, op: Op) -> bool {
        take(&mut self.schedule.corrupt, op)
    }

    fn take_answer_corruption(&mut self, op: Op) -> bool {
        take(&mut self.schedule.corrupt_answers, op)
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
    /// Answers' bodies corrupted on purpose (`Schedule::corrupt_answers`).
    pub answers_corrupted: AtomicU64,
    /// Held answers (`Fault::HoldAnswer`, `Fault::HoldBody`) whose caller
    /// closed the connection: it gave up waiting, as it must.
    pub given_up: AtomicU64,
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

    /// Held answers whose caller gave up on them.
    pub fn given_up(&self) -> u64 {
        self.given_up.load(Ordering::SeqCst)
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
    /// Operations held while the gate is closed, each after how many of its
    /// requests have gone through.
    ops: Mutex<Vec<(Op, u64)>>,
    /// True once released: everything held goes on, nothing more is held.
    open: tokio::sync::watch::Sender<bool>,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    state: Arc<Mutex<State>>,
    gate: Arc<Gate>,
    /// Turns true when the proxy is dropped: held answers end then.
    closed: tokio::sync::watch::Sender<bool>,
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
        let closed = tokio::sync::watch::Sender::new(false);
        let (st, sx, gx, cx) = (state.clone(), stats.clone(), gate.clone(), closed.clone());
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let proxy = Proxy {
                    upstream,
                    state: st.clone(),
                    stats: sx.clone(),
                    gate: gx.clone(),
                    closed: cx.subscribe(),
                };
                tokio::spawn(proxy.serve(sock));
            }
        });
        Self {
            addr,
            stats,
            state,
            gate,
            closed,
            task,
        }
    }

    /// From now on, requests of `op` wait (after being read whole, before their
    /// fate is decided) until `release`. `stats.held` counts the waiting ones.
    pub fn hold(&self, op: Op) {
        self.hold_after(op, 0);
    }

    /// As `hold`, but the first `passed` requests of `op` go on.
    pub fn hold_after(&self, op: Op, passed: u64) {
        if let Ok(mut ops) = self.gate.ops.lock() {
            ops.push((op, passed));
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
        self.closed.send_replace(true);
        self.task.abort();
    }
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

/// Relay-side HTTP settings for tests behind the proxy: quick retries, and a
/// patience far shorter than the proxy's stalls (which never answer) so a
/// stall is always a timeout, then a retry. The timeouts are far longer than
/// Azurite takes on a busy machine; `attempts` are as many as a test's faults
/// need (twenty outlast 5 scripted faults, then 15 % random ones: twenty in a
/// row is below 1e-9), so a healthy request never fails for being slow or
/// unlucky.
pub fn quick_writer(attempts: u32) -> relay_storage::blob::WriterOptions {
    relay_storage::blob::WriterOptions {
        backoff: relay_storage::retry::Backoff {
            initial: Duration::from_millis(20),
            cap: Duration::from_millis(300),
            max_attempts: attempts,
        },
        connect_timeout: Duration::from_secs(10),
        patience: relay_storage::watch::Patience::both(Duration::from_secs(10)),
        ..relay_storage::blob::WriterOptions::default()
    }
}
