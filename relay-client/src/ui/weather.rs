//! What the person (and `--json-lines`) is told while the relay cannot be
//! reached: the link's notices (`relay::patience` decides when), and how a
//! wait is written.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the link tells the person (and `--json-lines`) while the network is away.
#[derive(Debug, Clone)]
pub enum Weather {
    /// The relay cannot be reached; `error` says why on the first notice.
    Unreachable {
        relay: String,
        waited: Duration,
        /// When patience runs out (wall clock, for "still trying until 14:52").
        until: SystemTime,
        patience: Duration,
        error: Option<String>,
    },
    /// The relay answered again after `after`.
    Reachable { relay: String, after: Duration },
    /// Patience ran out: the run stops, resumably.
    GaveUp {
        relay: String,
        waited: Duration,
        patience: Duration,
    },
}

/// Where `Weather` goes (the reporter, in the upload command).
pub type WeatherSink = Arc<dyn Fn(&Weather) + Send + Sync>;

/// `40 s`, `2 min 5 s`, `1 h 3 min`: how long, for people.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 if s.is_multiple_of(60) => format!("{} min", s / 60),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn human_durations() {
        assert_eq!(human(40 * S), "40 s");
        assert_eq!(human(600 * S), "10 min");
        assert_eq!(human(125 * S), "2 min 5 s");
        assert_eq!(human(3780 * S), "1 h 3 min");
    }
}
