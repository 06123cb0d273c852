//! The lab pieces the `wanbench` binary and its WAN-lab tests share: the
//! `cloud` namespace's Azurite and relay, the storage delay proxy in front of
//! Azurite, CPU pinning, and the TCP congestion control of each side.

pub mod cloud;
pub mod cpu_split;
pub mod storage_delay;
pub mod tcp_cc;
