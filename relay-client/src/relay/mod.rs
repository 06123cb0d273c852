//! The link to the relay: the QUIC endpoint and how it trusts the relay
//! (`connect`), one connection kept up through outages (`link`, `patience`),
//! a run's N connections and how files are spread over them (`links`,
//! `spread`), what the path measured for the next run (`path_cache`), the
//! pace of what is written into QUIC (`open_turns`, `rate`), and how a unit
//! of work over the link is tried again (`retry`, with every wait's numbers
//! in `backoff`).
//!
//! May import `ui`; never `transfer`, a command or `cli`.

pub mod backoff;
pub mod connect;
pub mod link;
pub mod links;
pub mod open_turns;
pub mod path_cache;
pub mod patience;
pub mod rate;
pub mod retry;
pub mod spread;
