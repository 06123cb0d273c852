//! A tiny deterministic model of the WAN lab's link (random loss, then a drop-tail
//! bottleneck queue of one BDP, then a fixed delay; acks come back over an
//! uncongested reverse path) driving controllers with simulated time, the way
//! quinn would: window-limited, paced at 1.25 × window / smoothed RTT, a packet
//! declared lost when a later one of its flow is acked. Several flows can share
//! the bottleneck (fairness against a TCP-Cubic-like flow). Seconds of link time
//! run in milliseconds.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::model::{Model, Params};
use super::warm::PathEstimate;

const MTU: u16 = 1452;
const PACKET: u64 = 1452;

struct Link {
    rate: f64, // bytes/s
    one_way: Duration,
    queue_limit: f64,
    loss: f64,
    rng: u64,
    /// How a busy receiver acks (`None`: at once).
    receiver: Option<Busy>,
}

/// A receiver that does not ack every packet the moment it arrives.
#[derive(Debug, Clone, Copy)]
enum Busy {
    /// It acks only at multiples of this period: every packet that arrived
    /// since goes out in one burst of acks.
    AcksEvery(Duration),
    /// It acks at once, except that at the start of every `every` it is away
    /// for `away` (descheduled, or hashing a block): what arrives meanwhile
    /// is acked in one burst when it is back. Its acks are mostly prompt and
    /// now and then late, as a relay's on a busy machine (WAN lab trace:
    /// samples from 20 to 40 ms on a 20 ms path).
    AwayEvery { every: Duration, away: Duration },
}

impl Busy {
    /// When a packet that `arrived` at `elapsed` into the run is acked.
    fn acked_after(self, elapsed: Duration) -> Duration {
        match self {
            Busy::AcksEvery(every) => {
                let periods = elapsed.as_nanos().div_ceil(every.as_nanos());
                every * periods as u32
            }
            Busy::AwayEvery { every, away } => {
                let start = every * (elapsed.as_nanos() / every.as_nanos()) as u32;
                if elapsed < start + away {
                    start + away
                } else {
                    elapsed
                }
            }
        }
    }
}

impl Link {
    fn new(rtt_ms: u64, loss: f64, rate_mbit: f64) -> Self {
        let rate = rate_mbit * 1e6 / 8.0;
        Self {
            rate,
            one_way: Duration::from_millis(rtt_ms / 2),
            queue_limit: (rate * rtt_ms as f64 / 1000.0).max(16.0 * 1500.0),
            loss,
            rng: 0x9E37_79B9_7F4A_7C15,
            receiver: None,
        }
    }

    /// xorshift64*: enough randomness for Bernoulli loss, and repeatable.
    fn coin(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What the simulator needs from a congestion controller.
trait Ctl {
    fn on_sent(&mut self, now: Instant);
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64);
    fn on_end_acks(&mut self, now: Instant, in_flight: u64);
    fn on_loss(&mut self, now: Instant, sent: Instant, bytes: u64);
    fn window(&self) -> u64;
    /// Whether to pace (quinn does; Linux TCP cubic without fq does not).
    fn paced(&self) -> bool;
}

impl Ctl for Model {
    fn on_sent(&mut self, now: Instant) {
        Model::on_sent(self, now, PACKET);
    }
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) {
        Model::on_ack(self, now, sent, bytes, false);
    }
    fn on_end_acks(&mut self, now: Instant, in_flight: u64) {
        Model::on_end_acks(self, now, in_flight);
    }
    fn on_loss(&mut self, now: Instant, _sent: Instant, bytes: u64) {
        Model::on_congestion(self, now, false, bytes);
    }
    fn window(&self) -> u64 {
        Model::window(self)
    }
    fn paced(&self) -> bool {
        true
    }
}

/// A plain TCP Cubic (RFC 9438 without its Reno-friendly region and HyStart),
/// standing in for the kernel flow the relay shares a bottleneck with.
struct Cubic {
    cwnd: f64, // packets
    ssthresh: f64,
    w_max: f64,
    k: f64,
    epoch: Option<Instant>,
    recovery_start: Option<Instant>,
}

impl Cubic {
    fn new() -> Self {
        Self {
            cwnd: 10.0,
            ssthresh: f64::MAX,
            w_max: 0.0,
            k: 0.0,
            epoch: None,
            recovery_start: None,
        }
    }
}

impl Ctl for Cubic {
    fn on_sent(&mut self, _now: Instant) {}
    fn on_ack(&mut self, now: Instant, sent: Instant, _bytes: u64) {
        if self.recovery_start.is_some_and(|r| sent <= r) {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
            return;
        }
        let epoch = *self.epoch.get_or_insert(now);
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let target = 0.4 * (t - self.k).powi(3) + self.w_max;
        if target > self.cwnd {
            self.cwnd += ((target - self.cwnd) / self.cwnd).min(0.5);
        } else {
            self.cwnd += 0.01 / self.cwnd;
        }
    }
    fn on_end_acks(&mut self, _now: Instant, _in_flight: u64) {}
    fn on_loss(&mut self, now: Instant, sent: Instant, _bytes: u64) {
        if self.recovery_start.is_some_and(|r| sent <= r) {
            return;
        }
        self.recovery_start = Some(now);
        self.w_max = self.cwnd;
        self.cwnd = (self.cwnd * 0.7).max(2.0);
        self.ssthresh = self.cwnd;
        self.k = (self.w_max * 0.3 / 0.4).cbrt();
        self.epoch = Some(now);
    }
    fn window(&self) -> u64 {
        (self.cwnd * PACKET as f64) as u64
    }
    fn paced(&self) -> bool {
        false
    }
}

struct Flow<'a> {
    ctl: Box<dyn Ctl + 'a>,
    in_flight: u64,
    srtt: Option<Duration>,
    next_send: Instant,
    /// Send times of this flow's packets that never arrive.
    doomed: VecDeque<Instant>,
    sent: u64,
    /// An ack came back: the handshake is over. Until then one packet (the
    /// handshake's) is all a flow sends, as a QUIC or TCP connection would;
    /// its ack gives the controller its first RTT sample before any data.
    handshaken: bool,
    early_bytes: u64,
    late_bytes: u64,
}

#[derive(Debug, Default)]
struct Outcome {
    sent: u64,
    random_drops: u64,
    queue_drops: u64,
    /// Per flow: bytes acked in the second half of the run, per second.
    late_rate: Vec<f64>,
    /// Per flow: bytes acked in the first `EARLY` of the run.
    early_bytes: Vec<u64>,
}

/// The span over which startup speed is compared.
const EARLY: Duration = Duration::from_secs(2);

impl<'a> Flow<'a> {
    fn new(ctl: Box<dyn Ctl + 'a>, t0: Instant) -> Self {
        Flow {
            ctl,
            in_flight: 0,
            srtt: None,
            next_send: t0,
            doomed: VecDeque::new(),
            sent: 0,
            handshaken: false,
            early_bytes: 0,
            late_bytes: 0,
        }
    }

    /// The ack of the packet sent at `sent`, back at `at`: every packet of
    /// this flow sent before it and doomed is declared lost first.
    fn acked(&mut self, sent: Instant, at: Instant, clock: &Clock) {
        while self.doomed.front().is_some_and(|&d| d < sent) {
            let d = self.doomed.pop_front().unwrap_or(sent);
            self.in_flight -= PACKET;
            self.ctl.on_loss(at, d, PACKET);
        }
        self.in_flight -= PACKET;
        self.handshaken = true;
        self.ctl.on_ack(at, sent, PACKET);
        self.ctl.on_end_acks(at, self.in_flight);
        let rtt = at - sent;
        self.srtt = Some(self.srtt.map_or(rtt, |s| (s * 7 + rtt) / 8));
        if at >= clock.half {
            self.late_bytes += PACKET;
        }
        if at < clock.t0 + EARLY {
            self.early_bytes += PACKET;
        }
    }

    /// When this flow may send after a packet sent `now`.
    fn after_send(&self, now: Instant) -> Instant {
        if self.ctl.paced() {
            let rtt = self
                .srtt
                .unwrap_or(Duration::from_millis(333))
                .as_secs_f64();
            let pace = 1.25 * self.ctl.window() as f64 / rtt;
            now + Duration::from_secs_f64(PACKET as f64 / pace)
        } else {
            now
        }
    }
}

/// The run's start and the start of its second half.
struct Clock {
    t0: Instant,
    half: Instant,
}

/// The bottleneck's state: when its queue drains, and the acks on their way
/// back as (flow, sent at, ack arrives at): one FIFO bottleneck and equal
/// delays keep arrivals in order across flows.
struct Bottleneck {
    busy_until: Instant,
    acks: VecDeque<(usize, Instant, Instant)>,
}

impl Bottleneck {
    /// Flow `i`'s packet sent `now` through the link: lost at random, dropped
    /// at the tail of a full queue, or queued, its ack scheduled.
    fn carry(
        &mut self,
        link: &mut Link,
        f: &mut Flow<'_>,
        i: usize,
        now: Instant,
        t0: Instant,
        out: &mut Outcome,
    ) {
        // The handshake's packet always arrives (QUIC would resend it; the
        // simulator has no timers).
        if f.sent > 1 && link.coin() < link.loss {
            out.random_drops += 1;
            f.doomed.push_back(now);
            return;
        }
        let backlog = self.busy_until.saturating_duration_since(now).as_secs_f64() * link.rate;
        if backlog + PACKET as f64 > link.queue_limit {
            out.queue_drops += 1;
            f.doomed.push_back(now);
            return;
        }
        let depart = self.busy_until.max(now) + Duration::from_secs_f64(PACKET as f64 / link.rate);
        self.busy_until = depart;
        let arrived = depart + link.one_way;
        let acked = match link.receiver {
            Some(busy) => t0 + busy.acked_after(arrived - t0),
            None => arrived,
        };
        self.acks.push_back((i, now, acked + link.one_way));
    }
}

/// The earliest thing that happens next: an ack (`None`), or a flow's next
/// send (`Some(flow)`), and when.
fn next_event(
    flows: &[Flow<'_>],
    acks: &VecDeque<(usize, Instant, Instant)>,
    now: Instant,
) -> (Option<Instant>, Option<usize>) {
    let mut next = acks.front().map(|a| a.2);
    let mut sender = None;
    for (i, f) in flows.iter().enumerate() {
        let handshake_done = f.handshaken || f.sent == 0;
        if handshake_done && f.in_flight + PACKET <= f.ctl.window() {
            let at = f.next_send.max(now);
            if next.is_none_or(|n| at < n) {
                next = Some(at);
                sender = Some(i);
            }
        }
    }
    (next, sender)
}

/// Runs the flows (all bulk, starting together) for `seconds` of simulated time.
fn run<'a>(link: &mut Link, ctls: Vec<Box<dyn Ctl + 'a>>, seconds: f64) -> Outcome {
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(seconds);
    let clock = Clock {
        t0,
        half: t0 + Duration::from_secs_f64(seconds / 2.0),
    };
    let mut flows: Vec<Flow<'a>> = ctls.into_iter().map(|ctl| Flow::new(ctl, t0)).collect();
    let mut out = Outcome::default();
    let mut path = Bottleneck {
        busy_until: t0,
        acks: VecDeque::new(),
    };
    let mut now = t0;
    while now < end {
        let (next, sender) = next_event(&flows, &path.acks, now);
        now = next.expect("something in flight or sendable");
        let Some(i) = sender else {
            let Some((i, sent, at)) = path.acks.pop_front() else {
                continue;
            };
            flows[i].acked(sent, at, &clock);
            continue;
        };
        let f = &mut flows[i];
        out.sent += 1;
        f.sent += 1;
        f.in_flight += PACKET;
        f.ctl.on_sent(now);
        path.carry(link, f, i, now, t0, &mut out);
        f.next_send = f.after_send(now);
    }
    out.late_rate = flows
        .iter()
        .map(|f| f.late_bytes as f64 / (seconds / 2.0))
        .collect();
    out.early_bytes = flows.iter().map(|f| f.early_bytes).collect();
    out
}

/// A model the caller keeps, to read its state after the run.
struct Keep<'a>(&'a mut Model);

impl Ctl for Keep<'_> {
    fn on_sent(&mut self, now: Instant) {
        self.0.on_sent(now, PACKET);
    }
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) {
        self.0.on_ack(now, sent, bytes, false);
    }
    fn on_end_acks(&mut self, now: Instant, in_flight: u64) {
        self.0.on_end_acks(now, in_flight);
    }
    fn on_loss(&mut self, now: Instant, _sent: Instant, bytes: u64) {
        self.0.on_congestion(now, false, bytes);
    }
    fn window(&self) -> u64 {
        self.0.window()
    }
    fn paced(&self) -> bool {
        true
    }
}

fn relay(params: Params) -> Box<dyn Ctl> {
    Box::new(Model::new(params, MTU))
}

/// One relay flow: (share of the link it used in the second half, queue drops / sent).
fn solo(rtt_ms: u64, loss: f64, rate_mbit: f64, params: Params, seconds: f64) -> (f64, f64) {
    let mut link = Link::new(rtt_ms, loss, rate_mbit);
    solo_on(
        &mut link,
        params,
        seconds,
        &format!("{rtt_ms}ms/{loss}/{rate_mbit}M"),
    )
}

/// `solo` on a link the caller set up, the result printed under `label`.
fn solo_on(link: &mut Link, params: Params, seconds: f64, label: &str) -> (f64, f64) {
    let o = run(link, vec![relay(params)], seconds);
    let ratio = o.late_rate[0] / link.rate;
    let self_loss = o.queue_drops as f64 / o.sent as f64;
    println!(
        "{label}: {:.1} % of link, sent {}, random drops {}, queue drops {} ({:.2} %)",
        ratio * 100.0,
        o.sent,
        o.random_drops,
        o.queue_drops,
        self_loss * 100.0
    );
    (ratio, self_loss)
}

// The scenarios run on this simulator: one file per concern, as model.rs
// keeps its tests in model_tests.rs.
#[path = "sim_scenarios.rs"]
mod scenarios;
