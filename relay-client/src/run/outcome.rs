//! How a run ended: done, or stopped before every file was (Ctrl-C, or the
//! relay unreachable past `--patience`), or stopped by a refusal every file
//! would get.

use std::time::Duration;

use crate::transfer::refusal::Refusal;
use crate::ui::progress::Progress;
use crate::ui::report::Summary;

/// How a run ended (setup errors aside).
pub enum Outcome {
    Done(Summary),
    /// Ctrl-C, or patience ran out: what was done, and what was stopped.
    Interrupted {
        summary: Summary,
        in_flight: usize,
        in_flight_bytes: u64,
        cause: Cause,
    },
}

impl Outcome {
    /// Ctrl-C before the first file: nothing done, nothing in flight.
    pub fn before_start(summary: Summary) -> Self {
        Outcome::Interrupted {
            summary,
            in_flight: 0,
            in_flight_bytes: 0,
            cause: Cause::Interrupt,
        }
    }
}

/// Why a run stopped before every file was done (exit 130 either way: the
/// rerun resumes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Ctrl-C.
    Interrupt,
    /// The relay could not be reached for longer than `--patience`.
    Patience(Duration),
}

/// Why the runner stopped taking items.
#[derive(Debug)]
pub enum Stop {
    Finished,
    Interrupted,
    /// The relay stayed unreachable for longer than `--patience`.
    OutOfPatience,
    /// A refusal every file would get: one setup error.
    Fatal(Refusal),
}

impl Stop {
    pub fn finished(&self) -> bool {
        matches!(self, Stop::Finished)
    }

    /// The run's outcome with its `summary`; `stopped` is what was in flight
    /// when it stopped (bars still active), `patience` the `--patience` given.
    pub fn outcome(
        self,
        summary: Summary,
        stopped: &Progress,
        patience: Duration,
    ) -> Result<Outcome, Refusal> {
        let interrupted = |summary, cause| Outcome::Interrupted {
            summary,
            in_flight: stopped.files_in_flight,
            in_flight_bytes: stopped.in_flight_bytes,
            cause,
        };
        match self {
            Stop::Finished => Ok(Outcome::Done(summary)),
            Stop::Interrupted => Ok(interrupted(summary, Cause::Interrupt)),
            Stop::OutOfPatience => Ok(interrupted(summary, Cause::Patience(patience))),
            Stop::Fatal(refusal) => Err(refusal),
        }
    }
}
