//! The relay controller's model, pure and deterministic (quinn-proto style): events
//! come in with the time they happened, the window comes out. No clock, no I/O.
//!
//! What it does, in BBR's terms but expressed as a window, because quinn 0.11
//! paces at 1.25 × window / smoothed RTT and gives the controller no other knob:
//! - **Startup**: the window grows by what is acknowledged (doubling per round
//!   trip) until the queue starts to build (HyStart++-style: the round's smallest
//!   RTT rises by min_rtt/8, clamped to 4–16 ms), or the delivery rate stops growing
//!   by 25 % for three rounds, or a round loses more than `loss_tolerance`.
//! - **ProbeBw**: window = gain × bottleneck bandwidth × min RTT, with the gain
//!   cycling 1.25 (probe for more), 0.95 (drain that probe's queue so min RTT stays
//!   fresh), then 1.1 for six phases (a small standing queue that covers ACK delay
//!   and jitter), plus room for late and batched acks: bw × 2 ms (which
//!   dominates on sub-millisecond paths) or, when acks arrive in bursts, the
//!   most the acks ran ahead of the bandwidth estimate in the last 10 rounds
//!   (BBR's "extra acked", at most a quarter BDP), plus room for a queue
//!   someone else keeps standing (the RTT floor of the last gain cycle above
//!   min RTT, less the queue our own ack allowance can explain; the rest of
//!   our queue drains in the 0.95 phase). Each phase lasts one min RTT. The
//!   bandwidth is the largest delivery rate of the last 10 rounds; the min
//!   RTT the smallest sample of the last 5–10 s. The queue we add is at most
//!   0.35 BDP, well inside a one-BDP drop-tail buffer, so we inflict (almost)
//!   no loss on ourselves.
//! - **Loss is not congestion** unless a round loses more than `loss_tolerance`
//!   (default 15 %; random loss on real long paths is a few %): then the bandwidth
//!   estimate restarts from what that round delivered.
//! - **Fair mode** (`fair.rs`) adds a TCP-Cubic-shaped cap that backs off (× 0.7, once per
//!   round) on losses seen while the RTT is inflated by a queue (> min RTT + half
//!   of it): that is when a loss-based flow shares the bottleneck with us. Random
//!   loss on an empty queue still costs nothing.
//! - **max_rate** bounds the window at max_rate × (min RTT + `RATE_ACK_ALLOWANCE`):
//!   room for the peer's ACK delay, without which a short path (loopback: RTT
//!   tens of µs, ACK delay up to 25 ms) runs far below the rate. The window is then
//!   no exact cap (prompt ACKs let it run above); the client meters its writes to
//!   the rate (`relay-client`'s `rate.rs`), and this bound keeps bursts small.
//!   Under a cap the model's own window also allows the 25 ms, not 2: its
//!   bandwidth estimate is then the cap itself (the meter's rate), so a window
//!   of bw × (min RTT + 2 ms) would leave no room for late ACKs and run below
//!   the cap.
//! - **Warm start** (after draft-ietf-tsvwg-careful-resume): given what an earlier
//!   connection measured on this path, Startup jumps to half of that BDP once the
//!   first RTT sample confirms the path (RTT within ×2/3–×3/2 of the saved one),
//!   instead of doubling up from 14.7 KB for ~8 round trips. If the first round
//!   the application fills after the jump (the one carrying it) loses more than
//!   `loss_tolerance` (less capacity than remembered), Startup ends at once on
//!   what was actually delivered (the draft's safe retreat).
//! - **Cold start** (no saved estimate): the first flight after the handshake is
//!   a packet train whose acks, spread out by the bottleneck, measure its rate
//!   (`train.rs`); Startup then jumps to that BDP (the smaller of the train's
//!   two readings) one round trip in,
//!   validated and retreated from exactly as a warm start's jump.

use std::time::{Duration, Instant};

use super::delivery::Sampler;
use super::fair::{self, FairCap};
use super::filters::{BW_WINDOW_ROUNDS, MinRtt, RoundMax};
use super::train::{Measured, Train};
use super::warm::{PathEstimate, WARM_JUMP, Warm};

/// Window gains of the ProbeBw cycle, one min RTT each.
pub const GAIN_CYCLE: [f64; 8] = [1.25, 0.95, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1];
/// Index of the drain phase, entered right after Startup.
const DRAIN_PHASE: usize = 1;
/// Startup ends when the bandwidth grew less than this factor for `STARTUP_FLAT_ROUNDS`.
const STARTUP_GROWTH: f64 = 1.25;
const STARTUP_FLAT_ROUNDS: u32 = 3;
/// RTT samples a round needs before its minimum says anything about a queue.
const HYSTART_MIN_SAMPLES: u32 = 8;
const HYSTART_MIN_ETA: Duration = Duration::from_millis(4);
const HYSTART_MAX_ETA: Duration = Duration::from_millis(16);
/// Bandwidth estimate after a round lost more than `loss_tolerance`.
const HEAVY_LOSS_CUT: f64 = 0.85;
/// Largest queueing delay of someone else's that the window makes room for, as a
/// fraction of min RTT (BBR's cwnd cap of 2 × BDP, in other words).
const MAX_FOREIGN_QUEUE: f64 = 1.0;
/// Extra window for acks that arrive late or in bursts (delayed acks, batched
/// processing, scheduling): negligible on a WAN, but on sub-millisecond paths
/// (loopback, LAN) a window of bw × min RTT alone would starve the sender.
const ACK_ALLOWANCE: Duration = Duration::from_millis(2);

/// The most room the window keeps for acks arriving in bursts, as a share of
/// the BDP: a receiver that acks late (a relay busy hashing and staging
/// blocks acks in bursts) otherwise holds the sender below the link over the
/// stretched ack clock, while a prompt receiver lets the extra room become a
/// queue. A quarter keeps that queue well inside a one-BDP buffer, where half
/// would fill it and lose packets.
const MAX_AGGREGATION_BDP: f64 = 0.25;

/// With `max_rate`: the peer's ACK delay the window leaves room for (QUIC's
/// default max_ack_delay).
const RATE_ACK_ALLOWANCE: Duration = Duration::from_millis(25);
/// Half of the min-RTT filter's span (see `MinRtt`).
const MIN_RTT_WINDOW: Duration = Duration::from_secs(5);
/// Before any RTT sample (RFC 9002's initial RTT).
const INITIAL_RTT: Duration = Duration::from_millis(333);
/// Knobs of the relay controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Window before anything is known, bytes.
    pub initial_window: u64,
    /// Upper bound on the sending rate, bytes per second.
    pub max_rate: Option<u64>,
    /// Yield to loss-based flows sharing the bottleneck (see module docs).
    pub fair: bool,
    /// Fraction of a round's packets that may be lost before the loss counts as
    /// congestion.
    pub loss_tolerance: f64,
    /// What an earlier connection measured on this path (warm start).
    pub warm: Option<PathEstimate>,
    /// Without a usable `warm` estimate, measure the bottleneck with a packet
    /// train after the handshake (cold start; never under `max_rate` or `fair`).
    pub train: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            // RFC 9002's recommendation for 1200-byte datagrams.
            initial_window: 14_720,
            max_rate: None,
            fair: false,
            loss_tolerance: 0.15,
            warm: None,
            train: true,
        }
    }
}

/// The model's state at one moment, for the per-connection trace
/// (`RELAY_LOG=relay_transport::model=debug`).
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub mode: Mode,
    pub bandwidth: u64,
    pub min_rtt: Option<Duration>,
    pub latest_rtt: Option<Duration>,
    /// The last whole gain cycle's RTT floor.
    pub cycle_floor: Option<Duration>,
    pub extra_acked: u64,
    pub window: u64,
    pub in_flight: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    ProbeBw { phase: usize, since: Instant },
}

#[derive(Debug, Clone)]
pub struct Model {
    params: Params,
    mtu: u64,
    mode: Mode,
    sampler: Sampler,
    bw: RoundMax,
    /// Like `bw`, but only from samples taken while the sender had more to send
    /// than the window allowed: what a warm start may trust (an application-
    /// limited connection, e.g. one carrying small files, measures its own
    /// demand, not the path). It only advances with such samples, so it holds
    /// the last bandwidth-limited period's maximum through idle stretches.
    bw_limited: RoundMax,
    min_rtt: MinRtt,
    latest_rtt: Option<Duration>,
    in_flight: u64,
    /// Round-trip counting: a round ends when a packet sent after it began is acked.
    round: u64,
    next_round_delivered: u64,
    round_ended: bool,
    round_min_rtt: Option<Duration>,
    round_samples: u32,
    /// Consecutive RTT samples above min RTT + eta (Startup's early queue signal).
    elevated: u32,
    round_acked: u64,
    round_lost: u64,
    round_max_rate: u64,
    /// Some ack of this round came while the application had nothing to send.
    round_app_limited: bool,
    startup_window: u64,
    full_bw: u64,
    full_bw_rounds: u32,
    fair: Option<FairCap>,
    last_loss_cut_round: u64,
    /// Smallest RTT seen in the gain cycle under way, and in the last whole one.
    /// Our own queue drains in every cycle's 0.95 phase but for what the ack
    /// allowance holds, so what the last cycle's floor shows above min RTT
    /// beyond that is a queue someone else keeps standing (`foreign_queue`).
    cycle_min_rtt: Option<Duration>,
    cycle_floor: Option<Duration>,
    warm: Warm,
    train: Train,
    /// Round in which Startup jumped (warm start or the train): the first later
    /// round the application filled validates the jump; until then HyStart
    /// does not end Startup.
    jump_round: Option<u64>,
    /// Ack aggregation (BBR's extra acked): since when acks have run ahead of
    /// the bandwidth estimate, by how many bytes acked in that epoch, and the
    /// most they ran ahead per round over the last 10 rounds.
    aggregation_start: Option<Instant>,
    aggregation_acked: u64,
    extra_acked: RoundMax,
    /// Bytes acked since the last `on_end_acks`.
    batch_acked: u64,
    window: u64,
}

/// HyStart++'s queue threshold: min RTT / 8, clamped to 4–16 ms.
fn hystart_eta(min_rtt: Duration) -> Duration {
    (min_rtt / 8).clamp(HYSTART_MIN_ETA, HYSTART_MAX_ETA)
}

impl Model {
    pub fn new(params: Params, mtu: u16) -> Self {
        let mtu = u64::from(mtu).max(1200);
        let mut m = Self {
            params,
            mtu,
            mode: Mode::Startup,
            sampler: Sampler::default(),
            bw: RoundMax::default(),
            bw_limited: RoundMax::default(),
            min_rtt: MinRtt::new(MIN_RTT_WINDOW),
            latest_rtt: None,
            in_flight: 0,
            round: 0,
            next_round_delivered: 0,
            round_ended: false,
            round_min_rtt: None,
            round_samples: 0,
            elevated: 0,
            round_acked: 0,
            round_lost: 0,
            round_max_rate: 0,
            round_app_limited: false,
            startup_window: params.initial_window,
            full_bw: 0,
            full_bw_rounds: 0,
            fair: None,
            last_loss_cut_round: 0,
            cycle_min_rtt: None,
            cycle_floor: None,
            warm: params.warm.map_or(Warm::Off, Warm::Pending),
            train: Train::new(params.warm.is_none() && Self::train_allowed(&params)),
            jump_round: None,
            aggregation_start: None,
            aggregation_acked: 0,
            extra_acked: RoundMax::default(),
            batch_acked: 0,
            window: params.initial_window,
        };
        m.window = m.compute_window(None);
        m
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Bytes that may be in flight.
    pub fn window(&self) -> u64 {
        self.window
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            mode: self.mode,
            bandwidth: self.bw.get(),
            min_rtt: self.min_rtt.get(),
            latest_rtt: self.latest_rtt,
            cycle_floor: self.cycle_floor,
            extra_acked: self.extra_acked.get(),
            window: self.window,
            in_flight: self.in_flight,
        }
    }

    /// Bottleneck bandwidth estimate, bytes per second.
    pub fn bandwidth(&self) -> u64 {
        self.bw.get()
    }

    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt.get()
    }

    pub fn warm(&self) -> Warm {
        self.warm
    }

    /// The bottleneck rate the cold-start train measured, bytes per second.
    pub fn train_rate(&self) -> Option<u64> {
        self.train.rate()
    }

    /// No train under a rate cap (it would burst above the cap), nor in fair
    /// mode: a flow that starts at half the path's BDP takes the link from a
    /// TCP flow starting beside it, and `--fair` asks to start as TCP does.
    fn train_allowed(params: &Params) -> bool {
        params.train && params.max_rate.is_none() && !params.fair
    }

    /// The path as measured, once Startup is over (Startup's numbers are still
    /// climbing, so they would make the next warm start too timid), from
    /// bandwidth-limited samples only, and only if plausible.
    pub fn estimate(&self) -> Option<PathEstimate> {
        match (self.mode, self.min_rtt.get(), self.bw_limited.get()) {
            (Mode::ProbeBw { .. }, Some(min_rtt), bandwidth) if bandwidth > 0 => {
                Some(PathEstimate { bandwidth, min_rtt })
                    .filter(|e| e.plausible(self.params.initial_window))
            }
            _ => None,
        }
    }

    /// Rate the window allows at the current gain, bytes per second (for metrics).
    pub fn pacing_rate(&self) -> u64 {
        let rtt = self.min_rtt.get().unwrap_or(INITIAL_RTT).as_secs_f64();
        (self.window as f64 / rtt.max(1e-6)) as u64
    }

    fn min_window(&self) -> u64 {
        4 * self.mtu
    }

    /// A batch of `bytes` (one or more packets) left at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.sampler.on_sent(now, self.in_flight == 0);
        // Only the first send after idle restarts sampling; the true count comes
        // with the next `on_end_acks`.
        self.in_flight = self.in_flight.max(1);
        let was_sending = self.train.sending();
        self.train.on_sent(now, bytes, self.min_rtt.get());
        if was_sending || self.train.sending() {
            self.window = self.compute_window(Some(now));
        }
    }

    /// One ack-eliciting packet sent at `sent`, `bytes` long, was acknowledged.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool) {
        self.in_flight = self.in_flight.saturating_sub(bytes);
        let rtt = now.saturating_duration_since(sent);
        self.min_rtt.update(now, rtt);
        self.latest_rtt = Some(rtt);
        // The train's packets queue behind each other at the bottleneck by
        // design: their RTTs are no sign of a queue Startup should stop for.
        if !self.train.on_ack(sent, bytes) {
            self.round_min_rtt = Some(self.round_min_rtt.map_or(rtt, |m| m.min(rtt)));
            self.round_samples += 1;
            self.elevated = match self.min_rtt.get() {
                Some(min) if rtt > min + hystart_eta(min) => self.elevated + 1,
                _ => 0,
            };
        }
        self.round_acked += bytes;
        self.batch_acked += bytes;
        self.round_app_limited |= app_limited;
        self.cycle_min_rtt = Some(self.cycle_min_rtt.map_or(rtt, |m| m.min(rtt)));
        if let Some(s) = self.sampler.on_ack(now, sent, bytes) {
            if s.delivered_at_send >= self.next_round_delivered {
                self.round_ended = true;
            }
            let min_rtt = self.min_rtt.get().unwrap_or(rtt);
            // Shorter intervals than most of a round trip measure ack bursts, not the path.
            let reliable = s.interval >= min_rtt * 3 / 4;
            // While the application had nothing to send, a low rate says nothing about
            // the path; a high one still does.
            if reliable && (!app_limited || s.rate > self.bw.get()) {
                self.bw.update(self.round, s.rate);
                self.round_max_rate = self.round_max_rate.max(s.rate);
            }
            if reliable && !app_limited {
                self.bw_limited.update(self.round, s.rate);
            }
        }
        if let Warm::Pending(saved) = self.warm {
            self.warm_jump(saved, rtt);
        }
        if self.mode == Mode::Startup && !app_limited {
            self.startup_window = self.startup_window.saturating_add(bytes);
            if self.queue_building() {
                self.enter_probe_bw(now);
            }
        }
    }

    /// The end of one batch of acks (quinn processes an ACK frame as a batch).
    pub fn on_end_acks(&mut self, now: Instant, in_flight: u64) {
        self.in_flight = in_flight;
        if let Some(measured) = self.train.on_end_acks(now, self.min_rtt.get()) {
            self.train_jump(measured);
        }
        if self.round_ended {
            self.end_round(now);
        }
        let acked = std::mem::take(&mut self.batch_acked);
        self.update_ack_aggregation(now, acked);
        if let Mode::ProbeBw { phase, since } = self.mode {
            let min_rtt = self.min_rtt.get().unwrap_or(INITIAL_RTT);
            if now.saturating_duration_since(since) >= min_rtt {
                let next = (phase + 1) % GAIN_CYCLE.len();
                if next == 0 {
                    self.cycle_floor = self.cycle_min_rtt.take();
                }
                self.mode = Mode::ProbeBw {
                    phase: next,
                    since: now,
                };
            }
        }
        self.window = self.compute_window(Some(now));
    }

    /// How far the acks ran ahead of the bandwidth estimate (BBR's extra
    /// acked): an epoch starts whenever the bytes acked since the last one fall
    /// behind bw × its age; what they exceed it by is a burst of late acks the
    /// window has to leave room for, or the sender stalls until it arrives.
    fn update_ack_aggregation(&mut self, now: Instant, acked: u64) {
        let bw = self.bw.get();
        // In Startup the acks run ahead of an estimate that is still climbing:
        // that is growth, not late acks. Epochs start in ProbeBw.
        if !matches!(self.mode, Mode::ProbeBw { .. }) {
            self.aggregation_start = None;
            self.aggregation_acked = 0;
            return;
        }
        if bw == 0 || acked == 0 {
            return;
        }
        let expected =
            |start: Instant| bw as f64 * now.saturating_duration_since(start).as_secs_f64();
        let mut start = *self.aggregation_start.get_or_insert(now);
        if self.aggregation_acked as f64 <= expected(start) {
            start = now;
            self.aggregation_start = Some(now);
            self.aggregation_acked = 0;
        }
        self.aggregation_acked += acked;
        let extra = (self.aggregation_acked as f64 - expected(start)).max(0.0) as u64;
        self.extra_acked.update(self.round, extra.min(self.window));
    }

    /// Room in the window for acks that come late or in bursts. Not in fair
    /// mode: beside a loss-based flow, the acks' bursts follow its queue's
    /// swings, and room for them took that flow's share (simulation: cubic's
    /// share beside a fair flow fell to 9 %).
    fn ack_allowance(&self, bw: f64, rtt: f64) -> f64 {
        let fixed = bw * ACK_ALLOWANCE.as_secs_f64();
        if self.params.fair {
            return fixed;
        }
        let bursts = (self.extra_acked.get() as f64).min(MAX_AGGREGATION_BDP * bw * rtt);
        fixed.max(bursts)
    }

    /// Room for a queue someone else keeps standing, in seconds: without it
    /// our window would buy ever less rate as their queue grows (a window of
    /// bw × min RTT over a doubled RTT is half the rate). It is what the last
    /// gain cycle's RTT floor shows above min RTT, less the queue our own
    /// `allowance` stands in when the acks come promptly after all: the
    /// allowance stays in the window through the 0.95 phase, so our queue
    /// does not drain all the way there, and read as someone else's it would
    /// grow the window, which grows the queue until it overflows the buffer.
    fn foreign_queue(&self, bw: f64, allowance: f64) -> f64 {
        let (Some(floor), Some(min)) = (self.cycle_floor, self.min_rtt.get()) else {
            return 0.0;
        };
        if floor <= min || bw <= 0.0 {
            return 0.0;
        }
        ((floor - min).as_secs_f64() - allowance / bw).max(0.0)
    }

    /// Packets sent up to `sent` were declared lost (`lost_bytes` = 0: an ECN mark).
    pub fn on_congestion(&mut self, now: Instant, persistent: bool, lost_bytes: u64) {
        self.in_flight = self.in_flight.saturating_sub(lost_bytes);
        self.round_lost += lost_bytes;
        if persistent {
            // Nothing got through for several PTOs: the path changed or went down.
            // Start over rather than trust a model of a path that may be gone.
            self.mode = Mode::Startup;
            self.startup_window = self.min_window();
            self.full_bw = 0;
            self.full_bw_rounds = 0;
            self.bw.reset(self.round, 0);
            if self.train.sending() {
                self.train = Train::Done {
                    rate: None,
                    span: None,
                };
            }
        }
        if self.params.fair && fair::congestive(lost_bytes, self.latest_rtt, self.min_rtt.get()) {
            self.fair = FairCap::backoff(self.fair, self.window, self.mtu, now, self.round);
        }
        self.window = self.compute_window(Some(now));
    }

    pub fn on_mtu(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu).max(1200);
        self.window = self.window.max(self.min_window());
    }

    /// The first RTT sample decides: same path, jump to half its saved BDP at the
    /// RTT measured now; otherwise forget the saved estimate.
    fn warm_jump(&mut self, saved: PathEstimate, rtt: Duration) {
        if self.mode != Mode::Startup || !saved.matches_rtt(rtt) {
            self.warm = Warm::Done { jumped: false };
            // Another path: measure this one as a cold start would.
            self.train = Train::new(Self::train_allowed(&self.params));
            return;
        }
        let jump = (saved.bandwidth as f64 * rtt.as_secs_f64() * WARM_JUMP) as u64;
        self.startup_window = self.startup_window.max(jump);
        self.warm = Warm::Jumped;
        self.jump_round = Some(self.round);
    }

    /// The train measured the bottleneck: jump to the BDP of the smaller of its
    /// two readings (train.rs: one reading's error puts at most one BDP in flight).
    fn train_jump(&mut self, measured: Measured) {
        let Some(min_rtt) = self.min_rtt.get() else {
            return;
        };
        if self.mode != Mode::Startup {
            return;
        }
        let jump = (measured.jump_rate as f64 * min_rtt.as_secs_f64()) as u64;
        if jump > self.startup_window {
            self.startup_window = jump;
            self.jump_round = Some(self.round);
        }
    }

    /// HyStart++: this round's RTT floor rose above the path's by eta.
    /// Also when the latest samples all are: a round's minimum is set by its
    /// first acks (packets sent while the queue was still short), so on its own
    /// it sees the queue a round late, after one more doubling has overfilled it.
    ///
    /// Not before a jump is validated: the jump's flight, at most half the
    /// estimated BDP paced over a round trip, builds no queue on the path that
    /// was measured, but it is the connection's first data and lands on a
    /// receiver that is still opening its streams (many small files: hundreds
    /// at once) and acks late: judged by HyStart, those acks would end Startup
    /// far below the path's rate, and a warm start would be slower than a cold
    /// one. A path smaller than
    /// measured shows as loss in the validating round (retreat below), a
    /// queue without loss in the next.
    fn queue_building(&self) -> bool {
        if self.jump_round.is_some() {
            return false;
        }
        if self.elevated >= HYSTART_MIN_SAMPLES {
            return true;
        }
        let (Some(round_min), Some(min)) = (self.round_min_rtt, self.min_rtt.get()) else {
            return false;
        };
        self.round_samples >= HYSTART_MIN_SAMPLES && round_min > min + hystart_eta(min)
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        if self.bw.get() == 0 {
            return; // nothing measured yet: keep growing
        }
        self.mode = Mode::ProbeBw {
            phase: DRAIN_PHASE,
            since: now,
        };
    }

    fn end_round(&mut self, now: Instant) {
        self.round_ended = false;
        self.round += 1;
        self.next_round_delivered = self.sampler.delivered();
        self.bw.advance(self.round);
        let total = self.round_acked + self.round_lost;
        let loss = if total == 0 {
            0.0
        } else {
            self.round_lost as f64 / total as f64
        };
        let heavy_loss = loss > self.params.loss_tolerance && self.round_lost > 2 * self.mtu;
        if let Some(round) = self.jump_round {
            // The first round after the jump's that the application filled
            // carried the jump: it validates it. Not simply the next round: a
            // warm start jumps on the handshake's RTT sample, and the round
            // after that carries the client's first packets, not the jump.
            let ended = self.round - 1;
            if ended > round && !self.round_app_limited {
                self.jump_round = None;
                if self.warm == Warm::Jumped {
                    self.warm = Warm::Done { jumped: true };
                }
                if heavy_loss && self.mode == Mode::Startup {
                    // Safe retreat: the path has less room than remembered. Go
                    // by what was delivered (ProbeBw) rather than keep doubling.
                    self.enter_probe_bw(now);
                }
            }
        }
        match self.mode {
            Mode::Startup => {
                let bw = self.bw.get();
                if bw as f64 >= self.full_bw as f64 * STARTUP_GROWTH {
                    self.full_bw = bw;
                    self.full_bw_rounds = 0;
                } else if !self.round_app_limited {
                    // A round the application left idle (the Offer/Plan exchange,
                    // the relay waiting on Azure) says nothing about the path:
                    // counting it would end Startup at a trickle.
                    self.full_bw_rounds += 1;
                }
                // Heavy loss ends Startup only once the rate stopped growing too:
                // random loss alone, however high, does not stop delivery from
                // doubling, an overflowing (shallow) queue does.
                let overflow = heavy_loss && self.full_bw_rounds > 0;
                if overflow || self.full_bw_rounds >= STARTUP_FLAT_ROUNDS {
                    self.enter_probe_bw(now);
                }
            }
            Mode::ProbeBw { .. } => {
                let since_cut = self.round.saturating_sub(self.last_loss_cut_round);
                if heavy_loss && since_cut >= BW_WINDOW_ROUNDS as u64 {
                    // Far more loss than random loss explains: step the estimate
                    // down once per filter window and let the probe phases find
                    // out whether it was us. Cutting every round would collapse
                    // on a path whose random loss alone exceeds the tolerance.
                    let cut = (self.bw.get() as f64 * HEAVY_LOSS_CUT) as u64;
                    self.bw.reset(self.round, cut);
                    self.last_loss_cut_round = self.round;
                }
            }
        }
        self.round_min_rtt = None;
        self.round_samples = 0;
        self.round_acked = 0;
        self.round_lost = 0;
        self.round_max_rate = 0;
        self.round_app_limited = false;
    }

    fn compute_window(&mut self, now: Option<Instant>) -> u64 {
        let min_rtt = self.min_rtt.get();
        let rtt = min_rtt.unwrap_or(INITIAL_RTT).as_secs_f64();
        let mut w = match self.mode {
            Mode::Startup => {
                let train = self.train.window(min_rtt.unwrap_or(INITIAL_RTT));
                self.startup_window.max(train.unwrap_or(0))
            }
            Mode::ProbeBw { phase, .. } => {
                let bw = self.bw.get() as f64;
                let allowance = if self.params.max_rate.is_some() {
                    bw * RATE_ACK_ALLOWANCE.as_secs_f64()
                } else {
                    self.ack_allowance(bw, rtt)
                };
                let foreign = self
                    .foreign_queue(bw, allowance)
                    .min(MAX_FOREIGN_QUEUE * rtt);
                let bdp = bw * (rtt + foreign);
                (GAIN_CYCLE[phase] * bdp + allowance) as u64 + 2 * self.mtu
            }
        };
        if let (Some(rate), Some(_)) = (self.params.max_rate, min_rtt) {
            w = w.min((rate as f64 * (rtt + RATE_ACK_ALLOWANCE.as_secs_f64())) as u64);
        }
        if let (Some(f), Some(now)) = (&self.fair, now) {
            let cap = f.cap(now, self.mtu);
            // Once the cap is far above the model it no longer binds; stop it
            // growing without bound so the next backoff starts from a sane value.
            if cap > 2 * w.max(self.min_window()) {
                self.fair = None;
            } else {
                w = w.min(cap);
            }
        }
        w.max(self.min_window())
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
