//! Transfers that ended without a commit, counted by cause and by whose problem
//! it is: the client's (bad token, bad name, a file that changed, a blob that
//! exists), the relay's (out of budget, a bug) or storage's (Azure failed or
//! refused). Operators alert on the last two; the first is the users' business.

use std::sync::atomic::{AtomicU64, Ordering};

use relay_proto::protocol::Code;

use crate::telemetry::exposition::{Exposition, Kind};
use crate::telemetry::rejections::{REASON_COUNT, Reason};

/// Whose problem a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Client,
    Relay,
    Storage,
}

impl Class {
    pub fn label(self) -> &'static str {
        match self {
            Class::Client => "client",
            Class::Relay => "relay",
            Class::Storage => "storage",
        }
    }

    /// Exhaustive over codes, so a new code must be classed to compile.
    pub fn of(reason: Reason) -> Self {
        match reason {
            Reason::BadFrame | Reason::NotOffer | Reason::OfferTimeout | Reason::ClosedEarly => {
                Class::Client
            }
            Reason::Code(code) => match code {
                Code::Unauthorized
                | Code::Forbidden
                | Code::InvalidName
                | Code::InvalidOffer
                | Code::UnsupportedVersion
                | Code::TooLarge
                | Code::Exists
                // The client's bytes did not match its own SHA-256 (a source
                // that changed), it stopped early, or the blob changed under
                // its If-Match.
                | Code::HashMismatch
                | Code::Truncated
                | Code::Conflict
                // Its compressed chunks were refused (`relay_proto::inflate`).
                | Code::BadEncoding
                // Downloads: no such blob, or it changed while being read.
                | Code::NotFound
                | Code::Changed => Class::Client,
                Code::Busy | Code::Internal => Class::Relay,
                Code::Storage | Code::StorageRefused => Class::Storage,
            },
        }
    }
}

/// One counter per reason; every series rendered from the start (at 0 too).
#[derive(Debug)]
pub struct Failures {
    counts: [AtomicU64; REASON_COUNT],
}

impl Default for Failures {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Failures {
    pub fn record(&self, reason: Reason) {
        self.counts[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, reason: Reason) -> u64 {
        self.counts[reason.index()].load(Ordering::Relaxed)
    }

    pub fn render(&self, out: &mut Exposition) {
        out.labelled(
            "blob_relay_failures_total",
            Kind::Counter,
            "Transfers that ended without a commit, by code and by class: client (the user's input or source), relay (busy, internal) or storage (Azure failed or refused).",
            Reason::all().map(|r| {
                let labels = [("class", Class::of(r).label()), ("code", r.label())];
                (labels, self.get(r))
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_rendered_with_its_class() {
        let f = Failures::default();
        f.record(Reason::Code(Code::Storage));
        f.record(Reason::Code(Code::Storage));
        f.record(Reason::Code(Code::Unauthorized));
        let mut e = Exposition::default();
        f.render(&mut e);
        let out = e.encode();
        // HELP, TYPE, a line per reason, EOF.
        assert_eq!(out.lines().count(), 3 + REASON_COUNT, "{out}");
        assert!(out.contains("blob_relay_failures_total{class=\"storage\",code=\"storage\"} 2\n"));
        assert!(
            out.contains("blob_relay_failures_total{class=\"client\",code=\"unauthorized\"} 1\n")
        );
        assert!(out.contains("blob_relay_failures_total{class=\"relay\",code=\"busy\"} 0\n"));
        assert!(
            out.contains("blob_relay_failures_total{class=\"client\",code=\"offer_timeout\"} 0\n")
        );
    }
}
