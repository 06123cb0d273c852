//! The relay's own congestion controller for quinn 0.11 (`--congestion relay`).
//!
//! Why: on long paths with random loss, loss-based controllers (quinn's Cubic and
//! NewReno, like TCP Cubic) read every lost packet as congestion and collapse to a
//! few Mbit/s; quinn 0.11's experimental BBR keeps a window of 2–3 × BDP while
//! quinn paces at 1.25 × window / RTT, so it overfills a one-BDP bottleneck queue
//! and loses 3–11 % of its own packets. This controller models the path (bottleneck
//! bandwidth × min RTT) and expresses that as a window, treats random loss as
//! non-congestive, and keeps its own queue small. See `model` for the rules and
//! docs/TRANSPORT.md for the measurements behind them.
//!
//! `model` is the pure logic (time passed in); this file is the thin adapter to
//! quinn's `Controller` trait and the factory quinn builds one controller per
//! connection from.

mod delivery;
mod fair;
mod filters;
mod model;
#[cfg(test)]
mod sim;
mod train;
mod warm;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};

pub use model::{GAIN_CYCLE, Mode, Model, Params, Snapshot};
pub use warm::{PathEstimate, Warm};

/// Factory for `--congestion relay` (one `Relay` per connection).
#[derive(Debug, Clone, Default)]
pub struct RelayConfig {
    pub params: Params,
    /// Receives the connection's path estimate, so the application can save it
    /// for the next connection's warm start.
    pub observer: Option<Arc<PathObserver>>,
}

impl ControllerFactory for RelayConfig {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Relay {
            model: Model::new(self.params, current_mtu),
            observer: self.observer.clone(),
            trace: ModelTrace::new(),
        })
    }
}

/// The latest path estimate of a connection, readable from outside quinn (the
/// controller lives inside quinn's connection state).
#[derive(Debug, Default)]
pub struct PathObserver {
    bandwidth: AtomicU64,
    min_rtt_us: AtomicU64,
    warm_started: AtomicBool,
    /// What the cold-start train measured, bytes per second (0: nothing).
    train_rate: AtomicU64,
}

impl PathObserver {
    pub fn estimate(&self) -> Option<PathEstimate> {
        let bandwidth = self.bandwidth.load(Ordering::Relaxed);
        let rtt = self.min_rtt_us.load(Ordering::Relaxed);
        (bandwidth > 0 && rtt > 0).then(|| PathEstimate {
            bandwidth,
            min_rtt: Duration::from_micros(rtt),
        })
    }

    /// Drops the estimate: the connection that made it ended in an outage,
    /// and what a path measured just before it went away is no start for the
    /// next connection or run. A later connection's estimate replaces nothing
    /// then, and is saved alone.
    pub fn forget(&self) {
        self.bandwidth.store(0, Ordering::Relaxed);
        self.min_rtt_us.store(0, Ordering::Relaxed);
    }

    /// Whether a connection started warm (jumped on a saved estimate).
    pub fn warm_started(&self) -> bool {
        self.warm_started.load(Ordering::Relaxed)
    }

    /// The bottleneck rate a cold start's packet train measured, bytes per second.
    pub fn train_rate(&self) -> Option<u64> {
        Some(self.train_rate.load(Ordering::Relaxed)).filter(|r| *r > 0)
    }

    /// `train_rate` in Mbit/s, as reports print it.
    pub fn train_mbit(&self) -> Option<f64> {
        self.train_rate().map(|r| r as f64 * 8.0 / 1e6)
    }

    fn record(&self, model: &Model) {
        if let Some(rate) = model.train_rate() {
            self.train_rate.store(rate, Ordering::Relaxed);
        }
        if let Some(e) = model.estimate() {
            self.bandwidth.store(e.bandwidth, Ordering::Relaxed);
            let us = u64::try_from(e.min_rtt.as_micros()).unwrap_or(u64::MAX);
            self.min_rtt_us.store(us, Ordering::Relaxed);
        }
        if matches!(model.warm(), Warm::Jumped | Warm::Done { jumped: true }) {
            self.warm_started.store(true, Ordering::Relaxed);
        }
    }
}

/// The bottleneck rate (bytes per second) the relay controller measured on
/// `conn`, once it has one that the sender did not limit (`Model::estimate`):
/// what the link carries, not what the window allows (about twice that).
/// None before, and for other controllers.
pub fn bottleneck_rate(conn: &quinn::Connection) -> Option<u64> {
    let relay = conn
        .congestion_state()
        .into_any()
        .downcast::<Relay>()
        .ok()?;
    relay.model.estimate().map(|e| e.bandwidth)
}

/// quinn's view of the model.
#[derive(Debug, Clone)]
pub struct Relay {
    model: Model,
    observer: Option<Arc<PathObserver>>,
    trace: ModelTrace,
}

/// The model's state every `ModelTrace::EVERY` at debug level
/// (`RELAY_LOG=relay_transport::model=debug`): what the window is made of,
/// for telling a slow path from a slow peer's acks.
#[derive(Debug, Clone)]
struct ModelTrace {
    next: Option<Instant>,
}

impl ModelTrace {
    const EVERY: Duration = Duration::from_millis(250);

    fn new() -> Self {
        Self { next: None }
    }

    fn tick(&mut self, now: Instant, model: &Model) {
        if !tracing::enabled!(target: "relay_transport::model", tracing::Level::DEBUG) {
            return;
        }
        if self.next.is_some_and(|n| now < n) {
            return;
        }
        self.next = Some(now + Self::EVERY);
        let s = model.snapshot();
        let ms = |d: Option<Duration>| d.map_or(-1.0, |d| d.as_secs_f64() * 1e3);
        let phase = match s.mode {
            Mode::Startup => "startup".to_string(),
            Mode::ProbeBw { phase, .. } => format!("gain {}", GAIN_CYCLE[phase]),
        };
        tracing::debug!(
            target: "relay_transport::model",
            mode = phase,
            bw_mbit = format!("{:.1}", s.bandwidth as f64 * 8.0 / 1e6),
            min_rtt_ms = format!("{:.1}", ms(s.min_rtt)),
            latest_rtt_ms = format!("{:.1}", ms(s.latest_rtt)),
            cycle_floor_ms = format!("{:.1}", ms(s.cycle_floor)),
            extra_acked_kb = s.extra_acked / 1000,
            window_kb = s.window / 1000,
            in_flight_kb = s.in_flight / 1000,
            "model"
        );
    }
}

impl Relay {
    pub fn model(&self) -> &Model {
        &self.model
    }
}

impl Controller for Relay {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        // quinn 0.11 calls this once per batch (GSO buffer), with the batch's
        // size; in-flight bytes come from `on_end_acks` instead.
        self.model.on_sent(now, bytes);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        _rtt: &quinn_proto::RttEstimator,
    ) {
        self.model.on_ack(now, sent, bytes, app_limited);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        _app_limited: bool,
        _largest_packet_num_acked: Option<u64>,
    ) {
        self.model.on_end_acks(now, in_flight);
        self.trace.tick(now, &self.model);
        if let Some(o) = &self.observer {
            o.record(&self.model);
        }
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        _sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.model
            .on_congestion(now, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.model.on_mtu(new_mtu);
    }

    fn window(&self) -> u64 {
        self.model.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.model.window();
        m.pacing_rate = Some(self.model.pacing_rate().saturating_mul(8));
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.model.params().initial_window
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
