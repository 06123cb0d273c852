//! Weather the lab can make while a test runs: an outage (every packet dropped,
//! both ways, until it is lifted) and a NAT in front of the site that can
//! rebind (the client's source port, or its address, changes mid-transfer, as
//! a home router's mapping does after an idle spell or a laptop moving from
//! Wi-Fi to wired).
//!
//! Like Tailscale's natlab, the network is an object the test rewires
//! (`Lab::outage`, `Lab::rebind_port`, `Lab::rebind_address`), not a script
//! around it. `Nat` is pure (packets in, rewritten packets or a drop out,
//! unit-tested here); `Weather` is the state both forwarder threads share.
//!
//! The NAT rewrites IPv4/UDP only (QUIC is what it is for); other packets pass
//! as they are. Like a real NAT it forgets its mappings when it rebinds: a
//! packet from the cloud to a mapping it no longer has is dropped.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::offload::{fold, pseudo_header_sum, sum_words};

const IPPROTO_UDP: u8 = 17;
/// Outer ports a rebinding hands out start here (ports in use are skipped).
const FIRST_OUTER_PORT: u16 = 20_000;

/// A NAT for the site's UDP flows: inner (site address, port) to outer
/// (`outer` address, mapped port). At start the mapping is the identity, so a
/// lab with the NAT on behaves as one without until the first rebinding.
#[derive(Debug)]
pub struct Nat {
    inner: Ipv4Addr,
    outer: Ipv4Addr,
    /// Whether new flows keep their own port (true until the first rebinding).
    identity: bool,
    next_port: u16,
    /// inner port → outer port, and back.
    out_map: HashMap<u16, u16>,
    in_map: HashMap<u16, u16>,
}

impl Nat {
    pub fn new(inner: Ipv4Addr) -> Self {
        Self {
            inner,
            outer: inner,
            identity: true,
            next_port: FIRST_OUTER_PORT,
            out_map: HashMap::new(),
            in_map: HashMap::new(),
        }
    }

    /// The address the cloud sees the site's UDP flows come from.
    pub fn outer(&self) -> Ipv4Addr {
        self.outer
    }

    /// Forget every mapping: each flow's next packet gets a new outer port.
    pub fn rebind_port(&mut self) {
        self.identity = false;
        self.out_map.clear();
        self.in_map.clear();
    }

    /// Forget every mapping and send from `outer` from now on.
    pub fn rebind_address(&mut self, outer: Ipv4Addr) {
        self.rebind_port();
        self.outer = outer;
    }

    fn map(&mut self, inner_port: u16) -> u16 {
        if let Some(p) = self.out_map.get(&inner_port) {
            return *p;
        }
        let outer_port = if self.identity {
            inner_port
        } else {
            loop {
                let p = self.next_port;
                self.next_port = self.next_port.checked_add(1).unwrap_or(FIRST_OUTER_PORT);
                if !self.in_map.contains_key(&p) {
                    break p;
                }
            }
        };
        self.out_map.insert(inner_port, outer_port);
        self.in_map.insert(outer_port, inner_port);
        outer_port
    }

    /// A packet from the site to the cloud: a UDP one from the inner address
    /// leaves from its mapping. Always forwarded.
    pub fn outbound(&mut self, packet: &mut [u8]) {
        let Some(l4) = udp_v4(packet) else { return };
        if src(packet) != self.inner {
            return;
        }
        let port = u16::from_be_bytes([packet[l4], packet[l4 + 1]]);
        let mapped = self.map(port);
        packet[12..16].copy_from_slice(&self.outer.octets());
        packet[l4..l4 + 2].copy_from_slice(&mapped.to_be_bytes());
        fix_checksums(packet, l4);
    }

    /// A packet from the cloud to the site: UDP to a current mapping goes to
    /// its inner address and port; UDP to anything else of the site's
    /// (a mapping forgotten, the address it had) is dropped (false).
    pub fn inbound(&mut self, packet: &mut [u8]) -> bool {
        let Some(l4) = udp_v4(packet) else {
            return true;
        };
        let to = dst(packet);
        let port = u16::from_be_bytes([packet[l4 + 2], packet[l4 + 3]]);
        if to != self.outer {
            // The old address (after a rebinding) or one the NAT never had.
            return to != self.inner && to != self.outer;
        }
        let Some(&inner_port) = self.in_map.get(&port) else {
            return false;
        };
        packet[16..20].copy_from_slice(&self.inner.octets());
        packet[l4 + 2..l4 + 4].copy_from_slice(&inner_port.to_be_bytes());
        fix_checksums(packet, l4);
        true
    }
}

/// The UDP header's offset in an IPv4/UDP packet long enough to rewrite.
fn udp_v4(packet: &[u8]) -> Option<usize> {
    if packet.len() < 20 || packet[0] >> 4 != 4 || packet[9] != IPPROTO_UDP {
        return None;
    }
    let l4 = usize::from(packet[0] & 0x0f) * 4;
    (l4 >= 20 && packet.len() >= l4 + 8).then_some(l4)
}

fn src(packet: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15])
}

fn dst(packet: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19])
}

/// IPv4 header checksum and (unless the sender left it 0: none) the UDP
/// checksum over the pseudo-header, after addresses or ports changed.
fn fix_checksums(packet: &mut [u8], l4: usize) {
    packet[10..12].copy_from_slice(&[0, 0]);
    let ip = !fold(sum_words(0, &packet[..l4]));
    packet[10..12].copy_from_slice(&ip.to_be_bytes());
    if packet[l4 + 6..l4 + 8] == [0, 0] {
        return;
    }
    let udp_len = u16::from_be_bytes([packet[l4 + 4], packet[l4 + 5]]);
    let end = (l4 + usize::from(udp_len)).min(packet.len());
    packet[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
    let mut sum = !fold(sum_words(
        pseudo_header_sum(packet, udp_len),
        &packet[l4..end],
    ));
    if sum == 0 {
        sum = 0xffff;
    }
    packet[l4 + 6..l4 + 8].copy_from_slice(&sum.to_be_bytes());
}

/// What both forwarder threads read on every packet: whether the link is down,
/// and the NAT (when the lab has one).
#[derive(Debug, Default)]
pub struct Weather {
    down: AtomicBool,
    nat: Option<Mutex<Nat>>,
    /// Packets dropped by an outage, both directions.
    dropped_outage: AtomicU64,
    /// Packets from the cloud to a mapping the NAT no longer has.
    dropped_nat: AtomicU64,
}

impl Weather {
    pub fn new(nat: Option<Nat>) -> Self {
        Self {
            nat: nat.map(Mutex::new),
            ..Self::default()
        }
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    pub fn dropped_outage(&self) -> u64 {
        self.dropped_outage.load(Ordering::Relaxed)
    }

    pub fn dropped_nat(&self) -> u64 {
        self.dropped_nat.load(Ordering::Relaxed)
    }

    /// Runs `f` on the NAT, if there is one.
    pub fn with_nat<T>(&self, f: impl FnOnce(&mut Nat) -> T) -> Option<T> {
        self.nat
            .as_ref()
            .map(|n| f(&mut n.lock().unwrap_or_else(|p| p.into_inner())))
    }

    /// A packet read from one side: false to drop it. `outbound` is site to
    /// cloud.
    pub fn admit(&self, packet: &mut [u8], outbound: bool) -> bool {
        if self.is_down() {
            self.dropped_outage.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let pass = match (outbound, &self.nat) {
            (_, None) => true,
            (true, Some(_)) => {
                self.with_nat(|n| n.outbound(packet));
                true
            }
            (false, Some(_)) => self.with_nat(|n| n.inbound(packet)).unwrap_or(true),
        };
        if !pass {
            self.dropped_nat.fetch_add(1, Ordering::Relaxed);
        }
        pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const CLOUD: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const MOVED: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 5);

    fn udp(from: (Ipv4Addr, u16), to: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = IPPROTO_UDP;
        p[12..16].copy_from_slice(&from.0.octets());
        p[16..20].copy_from_slice(&to.0.octets());
        p[20..22].copy_from_slice(&from.1.to_be_bytes());
        p[22..24].copy_from_slice(&to.1.to_be_bytes());
        p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p[26..28].copy_from_slice(&[0x12, 0x34]);
        p[28..].copy_from_slice(payload);
        fix_checksums(&mut p, 20);
        p
    }

    fn ends(p: &[u8]) -> ((Ipv4Addr, u16), (Ipv4Addr, u16)) {
        (
            (src(p), u16::from_be_bytes([p[20], p[21]])),
            (dst(p), u16::from_be_bytes([p[22], p[23]])),
        )
    }

    fn valid(p: &[u8]) -> bool {
        let udp_len = u16::from_be_bytes([p[24], p[25]]);
        fold(sum_words(0, &p[..20])) == 0xffff
            && fold(sum_words(pseudo_header_sum(p, udp_len), &p[20..])) == 0xffff
    }

    #[test]
    fn identity_until_the_first_rebinding() {
        let mut nat = Nat::new(SITE);
        let mut out = udp((SITE, 5000), (CLOUD, 4433), b"hello");
        let before = out.clone();
        nat.outbound(&mut out);
        assert_eq!(out, before);
        let mut back = udp((CLOUD, 4433), (SITE, 5000), b"hi");
        assert!(nat.inbound(&mut back));
        assert_eq!(ends(&back).1, (SITE, 5000));
    }

    #[test]
    fn a_port_rebinding_gives_a_new_port_and_forgets_the_old_one() {
        let mut nat = Nat::new(SITE);
        nat.outbound(&mut udp((SITE, 5000), (CLOUD, 4433), b"x"));
        nat.rebind_port();
        let mut out = udp((SITE, 5000), (CLOUD, 4433), b"after");
        nat.outbound(&mut out);
        let (from, to) = ends(&out);
        assert_eq!(from.0, SITE);
        assert_ne!(from.1, 5000, "a new outer port");
        assert_eq!(to, (CLOUD, 4433));
        assert!(valid(&out), "checksums rewritten");
        // The relay answers the new mapping: delivered to the client's own port.
        let mut back = udp((CLOUD, 4433), from, b"ok");
        assert!(nat.inbound(&mut back));
        assert_eq!(ends(&back).1, (SITE, 5000));
        assert!(valid(&back));
        // The old mapping is gone.
        assert!(!nat.inbound(&mut udp((CLOUD, 4433), (SITE, 5000), b"stale")));
    }

    #[test]
    fn an_address_rebinding_moves_the_flow_and_drops_the_old_address() {
        let mut nat = Nat::new(SITE);
        nat.rebind_address(MOVED);
        let mut out = udp((SITE, 6000), (CLOUD, 4433), &[7u8; 1001]);
        nat.outbound(&mut out);
        let (from, _) = ends(&out);
        assert_eq!(from.0, MOVED);
        assert!(valid(&out));
        let mut back = udp((CLOUD, 4433), from, &[9u8; 333]);
        assert!(nat.inbound(&mut back));
        assert_eq!(ends(&back).1, (SITE, 6000));
        assert!(valid(&back));
        assert!(!nat.inbound(&mut udp((CLOUD, 4433), (SITE, 6000), b"old address")));
    }

    #[test]
    fn other_packets_pass_untouched() {
        let mut nat = Nat::new(SITE);
        nat.rebind_address(MOVED);
        let mut tcp = udp((SITE, 5000), (CLOUD, 80), b"not udp");
        tcp[9] = 6;
        let before = tcp.clone();
        nat.outbound(&mut tcp);
        assert_eq!(tcp, before);
        assert!(nat.inbound(&mut tcp));
    }

    #[test]
    fn an_outage_drops_both_ways_until_lifted() {
        let w = Weather::new(Some(Nat::new(SITE)));
        let mut p = udp((SITE, 5000), (CLOUD, 4433), b"x");
        assert!(w.admit(&mut p, true));
        w.set_down(true);
        assert!(!w.admit(&mut p, true));
        assert!(!w.admit(&mut udp((CLOUD, 4433), (SITE, 5000), b"y"), false));
        assert_eq!(w.dropped_outage(), 2);
        w.set_down(false);
        assert!(w.admit(&mut udp((CLOUD, 4433), (SITE, 5000), b"y"), false));
    }
}
