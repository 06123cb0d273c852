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
