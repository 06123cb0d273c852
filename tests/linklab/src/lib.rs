//! WAN lab: a user-space link emulator between two network namespaces.
//!
//! `Lab::start(LinkProfile)` creates namespaces `site` and `cloud`, each with
//! a TUN device, and forwards IP packets between them through a model of a
//! WAN path: random loss, a bottleneck rate behind a drop-tail queue of about
//! one BDP, and a one-way delay of RTT/2. Dropping the `Lab` tears it down.
//!
//! Layout: `link` is the pure model (time passed in, unit-tested), `tun` and
//! `netns` the system plumbing, `offload` what a NIC's offloads do (pure),
//! `weather` the outage and NAT tests drive, `forwarder` the I/O loop, `lab` the guard
//! object, `tcp_tool` a small iperf with per-socket congestion control,
//! `calibrate` the accuracy report (`linklab calibrate`).

pub mod calibrate;
pub mod forwarder;
pub mod lab;
pub mod link;
pub mod netns;
pub mod offload;
pub mod tcp_tool;
pub mod tun;
pub mod weather;

pub use lab::{
    CLOUD_ADDR, Lab, LabStats, LinkProfile, MOVED_ADDRS, Outage, SECOND_CLOUD_ADDR, SITE_ADDR,
    Side, check_privileges,
};
pub use link::{DelayLine, Link, LinkConfig, LinkStats, Verdict};
