//! Scenarios on the link simulator (`sim.rs`): a flow alone on long, lossy
//! and short links, receivers that ack late, the path estimate, fairness
//! against a Cubic flow, and warm starts. Seconds of link time run in
//! milliseconds.

use super::*;

#[test]
fn acks_in_bursts_from_a_busy_receiver_do_not_starve_the_window() {
    // A relay busy hashing and staging blocks acks late and in bursts (WAN lab,
    // 500 Mbit/s: RTT samples 103-137 ms on a 100 ms path, no queue). Here the
    // receiver acks every 25 ms. A window of gain x bw x min RTT + bw x 2 ms
    // covers only part of that stretched ack clock (91.0 % of the link, and
    // 69.7 % with acks every 40 ms); room for the bursts the acks showed
    // (extra acked, at most a quarter BDP) fills it (99.7 %; 98.4 % at 40 ms).
    let mut link = Link::new(100, 0.005, 40.0);
    link.receiver = Some(Busy::AcksEvery(Duration::from_millis(25)));
    let (ratio, self_loss) = solo_on(&mut link, Params::default(), 20.0, "acks every 25 ms");
    assert!(ratio > 0.97, "goodput {ratio}");
    assert!(self_loss < 0.02, "self-inflicted loss {self_loss}");
}

#[test]
fn room_for_late_acks_is_not_read_as_someone_elses_queue() {
    // The window keeps room for late acks (at least bw x 2 ms, more when the
    // acks come in bursts) through the 0.95 phase too, so on a short path
    // whose receiver mostly acks at once our own queue never drains all the
    // way. Read as a queue someone else keeps standing, it grew the window,
    // which grew the queue: the RTT floor settled ~10 ms above a 20 ms path
    // and 2 % of the packets overflowed the one-BDP buffer (the WAN lab
    // showed the same: floors of 28-31 ms, 1 % queue loss). A receiver away
    // now and then is what a relay on a busy machine looks like.
    for away_ms in [0, 5] {
        let mut link = Link::new(20, 0.0, 50.0);
        if away_ms > 0 {
            link.receiver = Some(Busy::AwayEvery {
                every: Duration::from_millis(150),
                away: Duration::from_millis(away_ms),
            });
        }
        let mut m = Model::new(Params::default(), MTU);
        let o = run(&mut link, vec![Box::new(Keep(&mut m))], 10.0);
        let ratio = o.late_rate[0] / link.rate;
        let self_loss = o.queue_drops as f64 / o.sent as f64;
        let s = m.snapshot();
        let (Some(min), Some(floor)) = (s.min_rtt, s.cycle_floor) else {
            panic!("no RTT floor after 10 s: {s:?}");
        };
        println!(
            "receiver away {away_ms} ms every 150 ms: {:.1} % of link, queue drops {:.2} %, RTT floor {:.1} ms over min RTT {:.1} ms",
            ratio * 100.0,
            self_loss * 100.0,
            floor.as_secs_f64() * 1e3,
            min.as_secs_f64() * 1e3
        );
        // Before: floors 10.4 and 10.9 ms over min RTT, 0.63 and 2.09 % drops.
        assert!(floor < min + min / 4, "floor {floor:?} over min {min:?}");
        assert!(self_loss < 0.005, "self-inflicted loss {self_loss}");
        assert!(ratio > 0.97, "goodput {ratio}");
    }
}

#[test]
fn fills_a_long_lossy_link() {
    // 200 ms, 1 % loss; 40 Mbit/s keeps the debug-build test short, the BDP
    // (1 MB, ~690 packets) is still far beyond what a loss-based window survives.
    let (ratio, self_loss) = solo(200, 0.01, 40.0, Params::default(), 20.0);
    assert!(ratio > 0.95, "goodput {ratio}");
    assert!(self_loss < 0.02, "queue loss {self_loss}");
}

#[test]
fn survives_five_percent_loss() {
    let (ratio, self_loss) = solo(200, 0.05, 20.0, Params::default(), 20.0);
    assert!(ratio > 0.9, "goodput {ratio}");
    assert!(self_loss < 0.02, "queue loss {self_loss}");
}

#[test]
fn short_rtt_without_loss_is_near_line_rate() {
    let (ratio, self_loss) = solo(20, 0.0, 50.0, Params::default(), 10.0);
    assert!(ratio > 0.97, "goodput {ratio}");
    assert!(self_loss < 0.01, "queue loss {self_loss}");
}

/// One stretch of a replayed connection: `packets` sent `gap` apart, each acked
/// one RTT later (or lost at the link's rate); `app_limited` marks the acks as
/// taken while the application had nothing more to send.
struct Phase {
    packets: u64,
    gap: Duration,
    app_limited: bool,
}

/// A bare model driven by an ack clock over a 100 ms, 1 % loss, 40 Mbit/s link
/// (no queue: sending at or below the link's rate).
fn replay_ack_clock(phases: &[Phase]) -> (Model, Link) {
    let mut link = Link::new(100, 0.01, 40.0);
    let rtt = Duration::from_millis(100);
    let mut m = Model::new(Params::default(), MTU);
    let mut sent: VecDeque<(Instant, bool)> = VecDeque::new();
    let mut now = Instant::now();
    for phase in phases {
        for _ in 0..phase.packets {
            m.on_sent(now, PACKET);
            sent.push_back((now, phase.app_limited));
            while let Some(&(s, app_limited)) = sent.front() {
                if s + rtt > now {
                    break;
                }
                sent.pop_front();
                if link.coin() < link.loss {
                    m.on_congestion(now, false, PACKET);
                } else {
                    m.on_ack(now, s, PACKET, app_limited);
                }
                m.on_end_acks(now, sent.len() as u64 * PACKET);
            }
            now += phase.gap;
        }
    }
    (m, link)
}

/// 40,000 packets at the link's rate: a bandwidth-limited connection.
fn at_link_rate(link_rate: f64) -> Phase {
    Phase {
        packets: 40_000,
        gap: Duration::from_secs_f64(PACKET as f64 / link_rate),
        app_limited: false,
    }
}

const LINK_RATE: f64 = 40e6 / 8.0;

#[test]
fn estimates_the_path() {
    let (m, link) = replay_ack_clock(&[at_link_rate(LINK_RATE)]);
    let rtt = Duration::from_millis(100);
    let bw = m.bandwidth() as f64;
    assert!(
        (bw / link.rate - 1.0).abs() < 0.1,
        "bw {bw} vs {}",
        link.rate
    );
    let min = m.min_rtt().unwrap_or_default();
    assert!(
        min >= rtt && min < rtt + Duration::from_millis(1),
        "{min:?}"
    );
    assert!(matches!(m.mode(), crate::congestion::Mode::ProbeBw { .. }));
}

#[test]
fn application_limited_periods_never_become_the_saved_estimate() {
    // A connection that first moved a large file at the link's rate, then only
    // small files: a packet every 20 ms, the application never filling the
    // window (what a relay connection carrying small files looks like).
    let small_files = || Phase {
        packets: 3_000,
        gap: Duration::from_millis(20),
        app_limited: true,
    };
    let (m, link) = replay_ack_clock(&[at_link_rate(LINK_RATE)]);
    let e = m.estimate().unwrap_or_else(|| panic!("no estimate"));
    assert!((e.bandwidth as f64 / link.rate - 1.0).abs() < 0.1, "{e:?}");
    let (m, _) = replay_ack_clock(&[at_link_rate(LINK_RATE), small_files()]);
    // Its filter now holds what the small files measured (their demand)...
    assert!(m.bandwidth() < 200_000, "bw {}", m.bandwidth());
    assert!(matches!(m.mode(), crate::congestion::Mode::ProbeBw { .. }));
    // ...which is no estimate of the path: what it saves for the next warm start
    // is still what it measured while bandwidth-limited.
    let saved = m.estimate().unwrap_or_else(|| panic!("no estimate"));
    assert!(
        (saved.bandwidth as f64 / link.rate - 1.0).abs() < 0.1,
        "{saved:?}"
    );
    // A connection that only ever carried small files saves nothing.
    let (m, _) = replay_ack_clock(&[small_files()]);
    assert_eq!(m.estimate(), None);
}

#[test]
fn implausible_estimates_are_not_trusted() {
    let iw = Params::default().initial_window;
    let est = |bandwidth: u64, rtt_ms: u64| PathEstimate {
        bandwidth,
        min_rtt: Duration::from_millis(rtt_ms),
    };
    assert!(est(25_000_000, 200).plausible(iw), "200 Mbit/s at 200 ms");
    assert!(!est(7, 200).plausible(iw), "7 B/s: an idle connection");
    assert!(
        !est(50_000, 100).plausible(iw),
        "BDP below the initial window"
    );
    assert!(!est(125_000_000_000, 1).plausible(iw), "1 Tbit/s");
    assert!(!est(25_000_000, 0).plausible(iw), "no RTT");
    assert!(!est(25_000_000, 60_000).plausible(iw), "a minute of RTT");
}

#[test]
fn max_rate_caps_the_sending_rate() {
    let mut link = Link::new(100, 0.01, 50.0);
    let cap = 2_000_000.0; // 16 Mbit/s
    let params = Params {
        max_rate: Some(cap as u64),
        ..Params::default()
    };
    let o = run(&mut link, vec![relay(params)], 10.0);
    let rate = o.late_rate[0];
    // The window leaves room for 25 ms of ACK delay the simulated peer does not
    // take: at most cap × (100 + 25) / 100 here. The exact cap is the client's
    // metering of its writes (relay-client `rate.rs`); this bound keeps the
    // window from starving the rate, and from bursting far above it.
    assert!(
        rate <= cap * 1.25 * 1.02 && rate >= cap * 0.9,
        "rate {rate}"
    );
}

#[test]
fn heavy_loss_still_moves_data() {
    // 30 % loss, far beyond `loss_tolerance`: treated as congestion, but data
    // still flows and the window stays finite.
    let mut link = Link::new(50, 0.30, 20.0);
    let o = run(&mut link, vec![relay(Params::default())], 5.0);
    assert!(o.late_rate[0] > 0.2 * link.rate, "{}", o.late_rate[0]);
}

/// Shares against one Cubic flow, (relay, cubic) as fractions of the link.
fn against_cubic(fair: bool, rtt_ms: u64, loss: f64, rate_mbit: f64) -> (f64, f64) {
    let mut link = Link::new(rtt_ms, loss, rate_mbit);
    let params = Params {
        fair,
        ..Params::default()
    };
    let o = run(&mut link, vec![relay(params), Box::new(Cubic::new())], 30.0);
    let (r, c) = (o.late_rate[0] / link.rate, o.late_rate[1] / link.rate);
    println!(
        "fair={fair} {rtt_ms}ms/{loss}/{rate_mbit}M: relay {:.1} %, cubic {:.1} %, queue drops {:.2} %",
        r * 100.0,
        c * 100.0,
        o.queue_drops as f64 * 100.0 / o.sent as f64
    );
    (r, c)
}

/// What one Cubic flow gets alone, as a fraction of the link.
fn cubic_alone(rtt_ms: u64, loss: f64, rate_mbit: f64) -> f64 {
    let mut link = Link::new(rtt_ms, loss, rate_mbit);
    let o = run(&mut link, vec![Box::new(Cubic::new())], 30.0);
    o.late_rate[0] / link.rate
}

#[test]
fn fair_mode_leaves_cubic_a_share() {
    // Two flows starting together on a drop-tail queue are chaotic in this
    // simulator: a few milliseconds or Mbit/s more or less and the same rules
    // leave Cubic 1 % or 57 % (its Cubic has no HyStart and every flow sees the
    // same synchronized drops). So the claim is over a grid of links: fair mode
    // leaves Cubic, on average, a share and far more than default mode does.
    // The lab measures real kernel Cubic (docs/bench/transport/README.md, "Fairness").
    let mut shares = [Vec::new(), Vec::new()];
    for rtt_ms in [16, 20, 24, 30] {
        for mbit in [30.0, 40.0, 50.0] {
            for (i, fair) in [true, false].into_iter().enumerate() {
                shares[i].push(against_cubic(fair, rtt_ms, 0.0, mbit).1);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (fair, default) = (mean(&shares[0]), mean(&shares[1]));
    println!(
        "  cubic's mean share: {:.1} % beside fair mode, {:.1} % beside default",
        fair * 100.0,
        default * 100.0
    );
    assert!(fair >= 0.1, "cubic's mean share beside fair mode {fair}");
    assert!(fair >= 2.0 * default, "fair {fair} vs default {default}");
    // On a lossy link Cubic cannot use half even alone: fair mode leaves it
    // most of what it gets alone.
    let alone = cubic_alone(50, 0.001, 40.0);
    let (r, c) = against_cubic(true, 50, 0.001, 40.0);
    println!("  cubic alone {:.1} %", alone * 100.0);
    assert!(c >= 0.4 * alone.min(0.5), "cubic got {c}, alone {alone}");
    assert!(r > 0.3, "relay got {r}");
}

#[test]
fn default_mode_against_cubic_is_reported() {
    // Not an assertion on fairness (default mode does not promise it); printed for
    // docs/TRANSPORT.md.
    let (r, c) = against_cubic(false, 20, 0.0, 40.0);
    assert!(r + c > 0.9);
}

/// (bytes acked in the first 2 s, queue drops / sent) of one relay flow over 6 s.
fn startup(rtt_ms: u64, rate_mbit: f64, warm: Option<PathEstimate>) -> (u64, f64) {
    startup_with(rtt_ms, rate_mbit, warm, true)
}

/// As `startup`, with or without the cold-start train.
fn startup_with(
    rtt_ms: u64,
    rate_mbit: f64,
    warm: Option<PathEstimate>,
    train: bool,
) -> (u64, f64) {
    let mut link = Link::new(rtt_ms, 0.01, rate_mbit);
    let params = Params {
        warm,
        train,
        ..Params::default()
    };
    let o = run(&mut link, vec![relay(params)], 6.0);
    let self_loss = o.queue_drops as f64 / o.sent as f64;
    println!(
        "{rtt_ms}ms/{rate_mbit}M warm {warm:?} train {train}: {} bytes in 2 s, queue drops {:.2} %",
        o.early_bytes[0],
        self_loss * 100.0
    );
    (o.early_bytes[0], self_loss)
}

fn saved(rate_mbit: f64, rtt_ms: u64) -> Option<PathEstimate> {
    Some(PathEstimate {
        bandwidth: (rate_mbit * 1e6 / 8.0) as u64,
        min_rtt: Duration::from_millis(rtt_ms),
    })
}

#[test]
fn warm_start_skips_most_of_startup() {
    let (cold, cold_loss) = startup_with(200, 40.0, None, false);
    let (warm, warm_loss) = startup(200, 40.0, saved(40.0, 200));
    // 2 s at 40 Mbit/s is 10 MB; plain Startup spends most of it doubling.
    assert!(
        warm as f64 > 1.4 * cold as f64,
        "warm {warm} vs cold {cold}"
    );
    assert!(
        warm_loss < 0.02 && cold_loss < 0.02,
        "{warm_loss} {cold_loss}"
    );
}

#[test]
fn warm_start_retreats_when_the_path_shrank() {
    // Saved on a path 8× faster: the jump overfills the queue once, then the
    // flow must settle on what is delivered, not keep the remembered rate.
    let mut link = Link::new(200, 0.01, 10.0);
    let params = Params {
        warm: saved(80.0, 200),
        ..Params::default()
    };
    let (ratio, self_loss) = solo_on(&mut link, params, 20.0, "shrunk path");
    assert!(ratio > 0.9, "goodput {ratio}");
    assert!(self_loss < 0.05, "queue loss {self_loss}");
}

#[test]
fn warm_start_ignores_another_path() {
    // Saved at 20 ms; the path now has 200 ms: not the same path, no jump, so
    // the first 2 s look like a cold start.
    let (cold, _) = startup(200, 40.0, None);
    let (other, _) = startup(200, 40.0, saved(40.0, 20));
    let diff = (other as f64 - cold as f64).abs() / cold as f64;
    assert!(diff < 0.1, "other path {other} vs cold {cold}");
}

#[test]
fn a_cold_start_is_nearly_as_fast_as_a_warm_one() {
    // The train measures the bottleneck one round trip after the handshake;
    // a warm start knows it at the handshake. Both far ahead of plain Startup,
    // and neither fills the queue.
    for (rtt_ms, mbit) in [(200, 40.0), (100, 40.0)] {
        let (plain, _) = startup_with(rtt_ms, mbit, None, false);
        let (cold, cold_loss) = startup(rtt_ms, mbit, None);
        let (warm, _) = startup(rtt_ms, mbit, saved(mbit, rtt_ms));
        // The train closes at least two thirds of plain Startup's gap to warm.
        let (gap, left) = (warm as f64 - plain as f64, warm as f64 - cold as f64);
        assert!(
            gap > 0.0 && left < gap / 3.0,
            "{rtt_ms} ms: plain {plain}, train {cold}, warm {warm}"
        );
        assert!(cold_loss < 0.02, "{rtt_ms} ms: queue loss {cold_loss}");
    }
}

#[test]
fn a_cold_start_jumps_to_the_whole_measured_bdp() {
    // With prompt acks both of the train's readings agree, and the round after
    // the train carries the whole BDP: within 7 % of a warm start's bytes in
    // the first 2 s at 200 ms (a jump to half of it left 12 % behind).
    let (cold, cold_loss) = startup(200, 40.0, None);
    let (warm, _) = startup(200, 40.0, saved(40.0, 200));
    assert!(
        cold as f64 >= 0.93 * warm as f64,
        "train {cold}, warm {warm}"
    );
    assert!(cold_loss < 0.02, "queue loss {cold_loss}");
}

#[test]
fn the_train_is_measured_and_reported() {
    let mut link = Link::new(200, 0.01, 40.0);
    let mut m = Model::new(Params::default(), MTU);
    let _ = run(&mut link, vec![Box::new(Keep(&mut m))], 1.0);
    let rate = m.train_rate().expect("the train measured the link") as f64;
    assert!(
        (rate / link.rate - 1.0).abs() < 0.05,
        "{rate} vs {}",
        link.rate
    );
}

#[test]
fn an_observer_forgets_what_a_connection_measured_before_an_outage() {
    // What the client's watchdog does when a connection ends in an outage:
    // the estimate it had recorded is no start for the next connection or run.
    let (m, _) = replay_ack_clock(&[at_link_rate(LINK_RATE)]);
    let observer = crate::congestion::PathObserver::default();
    observer.record(&m);
    assert!(observer.estimate().is_some());
    observer.forget();
    assert_eq!(observer.estimate(), None);
    // A later connection's estimate is kept again.
    observer.record(&m);
    assert_eq!(observer.estimate(), m.estimate());
}
