//! Unit tests of the controller's model (events in, window out).

use super::*;

const PKT: u64 = 1452;

/// Feeds a steady ack clock: `rate` bytes/s over a path of `rtt`, for `secs`
/// seconds, every packet acked one `rtt` after it was sent (no queue).
fn steady(m: &mut Model, t0: Instant, rtt: Duration, rate: f64, secs: f64) -> Instant {
    let gap = Duration::from_secs_f64(PKT as f64 / rate);
    let n = (secs * rate / PKT as f64) as u32;
    let lag = (rtt.as_secs_f64() / gap.as_secs_f64()) as u32;
    for i in 0..n {
        let now = t0 + gap * i;
        m.on_sent(now, PKT);
        if i >= lag {
            m.on_ack(now, t0 + gap * (i - lag), PKT, false);
            m.on_end_acks(now, u64::from(lag) * PKT);
        }
    }
    t0 + gap * n
}

fn probing() -> (Model, Instant) {
    let mut m = Model::new(Params::default(), 1452);
    let t0 = Instant::now();
    let end = steady(&mut m, t0, Duration::from_millis(100), 5e6, 3.0);
    (m, end)
}

#[test]
fn random_loss_does_not_shrink_the_window() {
    let (mut m, now) = probing();
    assert!(matches!(m.mode(), Mode::ProbeBw { .. }));
    let before = m.window();
    for _ in 0..20 {
        m.on_congestion(now, false, PKT);
    }
    assert_eq!(m.window(), before);
    // About one BDP (5 MB/s × 100 ms), times the phase's gain.
    let bdp = 500_000.0;
    let ratio = before as f64 / bdp;
    assert!((0.9..1.4).contains(&ratio), "window/BDP {ratio}");
}

#[test]
fn fair_mode_backs_off_only_when_a_queue_stands() {
    let mut m = Model::new(
        Params {
            fair: true,
            ..Params::default()
        },
        1452,
    );
    let t0 = Instant::now();
    let now = steady(&mut m, t0, Duration::from_millis(100), 5e6, 3.0);
    let before = m.window();
    m.on_congestion(now, false, PKT);
    assert_eq!(m.window(), before, "loss on an empty queue is random loss");
    // An ack that waited 80 ms in someone's queue, then a loss.
    m.on_ack(now, now - Duration::from_millis(180), PKT, false);
    m.on_congestion(now, false, PKT);
    let after = m.window();
    assert!((after as f64) < 0.75 * before as f64, "{after} vs {before}");
    // At most once per round.
    m.on_congestion(now, false, PKT);
    assert_eq!(m.window(), after);
}

#[test]
fn persistent_congestion_starts_over() {
    let (mut m, now) = probing();
    m.on_congestion(now, true, 10 * PKT);
    assert_eq!(m.mode(), Mode::Startup);
    assert_eq!(m.window(), 4 * 1452);
}

#[test]
fn startup_ends_when_the_queue_builds() {
    // HyStart on its own: no train (whose acks it ignores) in the second flight.
    let plain = Params {
        train: false,
        ..Params::default()
    };
    let mut m = Model::new(plain, 1452);
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    // A first flight acked at the path's 100 ms, then a second one whose acks
    // come 30 ms late: a queue is building.
    let flight = |m: &mut Model, start: u64, n: u64, rtt: u64| {
        for i in 0..n {
            m.on_sent(t0 + ms(start + i), PKT);
        }
        for i in 0..n {
            let sent = t0 + ms(start + i);
            m.on_ack(sent + ms(rtt), sent, PKT, false);
            m.on_end_acks(sent + ms(rtt), (n - i - 1) * PKT);
        }
    };
    flight(&mut m, 0, 10, 100);
    assert_eq!(m.mode(), Mode::Startup);
    flight(&mut m, 200, 20, 130);
    assert!(matches!(m.mode(), Mode::ProbeBw { .. }), "{:?}", m.mode());
}

#[test]
fn startup_sees_a_queue_within_the_round() {
    let mut m = Model::new(Params::default(), 1452);
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    // One flight, all sent before the first ack (one round): its first acks
    // come at the path's 100 ms, the later ones 30 ms late. The round's
    // minimum stays 100 ms; the run of late samples is the signal.
    for i in 0..30 {
        m.on_sent(t0 + ms(i), PKT);
    }
    for i in 0..30u64 {
        let sent = t0 + ms(i);
        let rtt = if i < 12 { 100 } else { 130 };
        m.on_ack(sent + ms(rtt), sent, PKT, false);
        m.on_end_acks(sent + ms(rtt), (29 - i) * PKT);
        if i < 12 + HYSTART_MIN_SAMPLES as u64 - 1 {
            assert_eq!(m.mode(), Mode::Startup, "ack {i}");
        }
    }
    assert!(matches!(m.mode(), Mode::ProbeBw { .. }), "{:?}", m.mode());
}

#[test]
fn max_rate_caps_the_window() {
    let mut m = Model::new(
        Params {
            max_rate: Some(1_000_000),
            ..Params::default()
        },
        1452,
    );
    let t0 = Instant::now();
    steady(&mut m, t0, Duration::from_millis(100), 5e6, 3.0);
    // 1 MB/s × (100 ms + 25 ms of ACK delay).
    assert!(m.window() <= 125_000, "{}", m.window());
}

#[test]
fn under_a_cap_the_window_leaves_room_for_late_acks() {
    // Loopback: a 1 ms path sending at the cap (the client's meter). The
    // bandwidth estimate is the cap, so without the larger allowance the window
    // is bw × (1 ms + 2 ms) and any ACK later than that starves the rate.
    let rate = 62_500_000.0; // 500 Mbit/s
    let capped = |max_rate: Option<u64>| {
        let mut m = Model::new(
            Params {
                max_rate,
                ..Params::default()
            },
            1452,
        );
        steady(&mut m, Instant::now(), Duration::from_millis(1), rate, 2.0);
        assert!(matches!(m.mode(), Mode::ProbeBw { .. }), "{:?}", m.mode());
        m.window() as f64
    };
    let w = capped(Some(rate as u64));
    assert!(w >= rate * 0.020, "{w}");
    assert!(w <= rate * 0.026 * 1.05, "{w}");
    // Uncapped, the model keeps its 2 ms (it probes above its estimate).
    assert!(capped(None) < rate * 0.005, "{}", capped(None));
}

#[test]
fn no_train_under_a_cap_or_in_fair_mode() {
    // The first send after an RTT sample would start the train: its window is
    // far above Startup's. Under a cap or in fair mode, Startup's stays.
    let opened = |params: Params| {
        let mut m = Model::new(params, 1452);
        let t0 = Instant::now();
        m.on_sent(t0, 1200);
        let rtt = Duration::from_millis(200);
        m.on_ack(t0 + rtt, t0, 1200, false);
        m.on_end_acks(t0 + rtt, 0);
        m.on_sent(t0 + rtt, 14_520);
        m.window()
    };
    let startup = 14_720 + 1200;
    assert!(opened(Params::default()) > 100 * startup);
    let capped = Params {
        max_rate: Some(25_000_000),
        ..Params::default()
    };
    let fair = Params {
        fair: true,
        ..Params::default()
    };
    let off = Params {
        train: false,
        ..Params::default()
    };
    for params in [capped, fair, off] {
        assert!(opened(params) <= startup, "{params:?}: {}", opened(params));
    }
}

/// A model that warm-starts from 25 MB/s at 200 ms (a 5 MB BDP), after the
/// handshake (its RTT sample makes the jump) and the client's first two
/// packets (a round the application did not fill).
fn warm_after_handshake(t0: Instant) -> Model {
    let ms = Duration::from_millis;
    let saved = PathEstimate {
        bandwidth: 25_000_000,
        min_rtt: ms(200),
    };
    let mut m = Model::new(
        Params {
            warm: Some(saved),
            ..Params::default()
        },
        1452,
    );
    m.on_sent(t0, 1200);
    m.on_ack(t0 + ms(200), t0, 1200, true);
    m.on_end_acks(t0 + ms(200), 0);
    for i in 0..2 {
        m.on_sent(t0 + ms(200 + i), PKT);
    }
    for i in 0..2 {
        let sent = t0 + ms(200 + i);
        m.on_ack(sent + ms(200), sent, PKT, true);
        m.on_end_acks(sent + ms(200), (1 - i) * PKT);
    }
    assert!(m.window() >= 2_500_000, "jumped: {}", m.window());
    m
}

/// One flight of `n` packets sent 100 µs apart from `start`, acked `rtt`
/// later; every `lose_every`th packet is lost instead.
fn flight(m: &mut Model, start: Instant, n: u64, rtt: Duration, lose_every: Option<u64>) {
    let gap = Duration::from_micros(100);
    let sent_at = |i: u64| start + gap * u32::try_from(i).unwrap_or(u32::MAX);
    for i in 0..n {
        m.on_sent(sent_at(i), PKT);
    }
    for i in 0..n {
        let (sent, now) = (sent_at(i), sent_at(i) + rtt);
        if lose_every.is_some_and(|k| i % k == 0) {
            m.on_congestion(now, false, PKT);
        } else {
            m.on_ack(now, sent, PKT, false);
        }
        m.on_end_acks(now, (n - i - 1) * PKT);
    }
}

#[test]
fn a_busy_receiver_does_not_end_startup_after_a_warm_jump() {
    // The jump's flight (1.2 MB, the connection's first data) is acked 30 ms
    // late throughout: the relay is opening hundreds of streams. Judged by
    // HyStart, that ended Startup at a trickle (lab: 2 Mbit/s on 200).
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut m = warm_after_handshake(t0);
    flight(&mut m, t0 + ms(402), 800, ms(230), None);
    assert_eq!(m.mode(), Mode::Startup);
    // The next round's acks are prompt and show no queue: Startup goes on
    // growing from the jump.
    flight(&mut m, t0 + ms(640), 1600, ms(200), None);
    assert_eq!(m.mode(), Mode::Startup);
    assert!(m.window() > 3_000_000, "{}", m.window());
    // A queue after the jump was validated still ends it.
    flight(&mut m, t0 + ms(850), 100, ms(200), None);
    flight(&mut m, t0 + ms(1100), 1600, ms(240), None);
    assert!(matches!(m.mode(), Mode::ProbeBw { .. }), "{:?}", m.mode());
}

#[test]
fn a_warm_jump_is_validated_by_the_round_that_carried_it() {
    // The round after the jump's is the client's first two packets; the jump's
    // own flight comes a round later and loses a third of its packets: less
    // room than remembered, so Startup must end on what was delivered rather
    // than keep doubling (the round of two packets proved nothing).
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut m = warm_after_handshake(t0);
    flight(&mut m, t0 + ms(402), 800, ms(200), Some(3));
    // A round ends when a packet sent after it began is acked.
    flight(&mut m, t0 + ms(700), 10, ms(200), None);
    assert!(matches!(m.mode(), Mode::ProbeBw { .. }), "{:?}", m.mode());
}
