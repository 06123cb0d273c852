//! What a NIC's offloads do, done by the emulator (pure logic, unit-tested).
//!
//! Why: a plain TUN device offers no offloads, so every UDP segment a sender
//! hands the kernel in one GSO `sendmsg` is cut up by the kernel in software
//! and pushed through the TUN one at a time, each waking the emulator; every
//! datagram the receiver reads has its checksum verified by the receiver's own
//! CPU. A server NIC does all of that in hardware: it takes the GSO batch
//! whole (UDP segmentation offload), computes checksums on transmit and checks
//! them on receive. Measuring CPU per bit through a TUN without offloads
//! charges the processes under test for work their NIC would do.
//!
//! With offloads on (`LinkProfile::offload`), each TUN is opened with a
//! `virtio_net_hdr` in front of every packet (`IFF_VNET_HDR`) and announces
//! checksum and UDP segmentation offload (`TUNSETOFFLOAD`). The emulator then
//! reads a sender's GSO batch as one packet, cuts it into the datagrams a NIC
//! would put on the wire (each then meets the link model alone: loss, queue,
//! rate), computes every checksum the sender left to the "hardware", and
//! writes each datagram to the far side with its checksum marked as handled
//! (`delivered_header`), so the receiver does not verify it again in
//! software, as with a NIC's receive checksum offload.

use thiserror::Error;

/// Bytes of `struct virtio_net_hdr` in front of each packet (no mergeable buffers).
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at csum_start + csum_offset is to be filled in.
const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: UDP segmentation (`UDP_SEGMENT` sockets).
const GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_ECN` bit, ignored.
const GSO_ECN: u8 = 0x80;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const UDP_HDR_LEN: usize = 8;
/// Where the checksum sits in a TCP and in a UDP header.
const TCP_CSUM_OFFSET: u16 = 16;
const UDP_CSUM_OFFSET: u16 = 6;

/// The header the emulator writes in front of a packet it delivers: no
/// segmentation, and for TCP and UDP the checksum marked as the NIC's
/// business (`NEEDS_CSUM`, i.e. `CHECKSUM_PARTIAL`), which the receiving
/// stack counts as verified, as it does a NIC's receive checksum offload.
/// (TUN ignores `DATA_VALID` on writes.) The checksum itself is valid too.
pub fn delivered_header(packet: &[u8]) -> [u8; VNET_HDR_LEN] {
    let mut hdr = [0u8; VNET_HDR_LEN];
    let l4 = match packet.first().map(|b| b >> 4) {
        Some(4) => packet
            .get(9)
            .map(|&p| (p, usize::from(packet[0] & 0x0f) * 4)),
        Some(6) => packet.get(6).map(|&p| (p, 40)),
        _ => None,
    };
    let offset = match l4 {
        Some((IPPROTO_TCP, start)) if packet.len() >= start + 20 => Some((start, TCP_CSUM_OFFSET)),
        Some((IPPROTO_UDP, start)) if packet.len() >= start + UDP_HDR_LEN => {
            Some((start, UDP_CSUM_OFFSET))
        }
        _ => None,
    };
    if let Some((start, csum_offset)) = offset {
        hdr[0] = F_NEEDS_CSUM;
        hdr[6..8].copy_from_slice(&(start as u16).to_le_bytes());
        hdr[8..10].copy_from_slice(&csum_offset.to_le_bytes());
    }
    hdr
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum OffloadError {
    #[error("packet shorter than its virtio_net_hdr")]
    NoHeader,
    #[error("segmentation type {0} is not offered")]
    UnsupportedGso(u8),
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// `struct virtio_net_hdr`, fields little-endian (x86 and every virtio 1.0 device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(bytes: &[u8]) -> Result<Self, OffloadError> {
        let b = bytes.get(..VNET_HDR_LEN).ok_or(OffloadError::NoHeader)?;
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Ok(Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        })
    }

    #[cfg(test)]
    fn to_bytes(self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }
}

/// One packet read from an offloading TUN, seen as the datagrams a NIC would send.
#[derive(Debug)]
pub struct Wire<'a> {
    packet: &'a [u8],
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// One datagram; `Some(start, offset)`: its checksum is left to the NIC.
    Single { csum: Option<(usize, usize)> },
    /// A UDP GSO batch: headers up to `l4 + 8`, then `gso_size`-byte payloads.
    UdpBatch {
        l4: usize,
        gso_size: usize,
        count: usize,
    },
}

impl<'a> Wire<'a> {
    /// `packet` is the IP packet after its `hdr`.
    pub fn new(hdr: &VnetHdr, packet: &'a [u8]) -> Result<Self, OffloadError> {
        let csum = if hdr.flags & F_NEEDS_CSUM != 0 {
            let start = usize::from(hdr.csum_start);
            let field = start + usize::from(hdr.csum_offset);
            if field + 2 > packet.len() {
                return Err(OffloadError::Malformed("checksum offsets"));
            }
            Some((start, usize::from(hdr.csum_offset)))
        } else {
            None
        };
        let kind = match hdr.gso_type & !GSO_ECN {
            GSO_NONE => Kind::Single { csum },
            GSO_UDP_L4 => {
                // The kernel sets csum_start to the UDP header for UDP GSO.
                let (l4, _) = csum.ok_or(OffloadError::Malformed("UDP GSO without checksum"))?;
                let gso_size = usize::from(hdr.gso_size);
                ip_l4_protocol(packet, l4)?;
                let payload = packet
                    .len()
                    .checked_sub(l4 + UDP_HDR_LEN)
                    .ok_or(OffloadError::Malformed("UDP GSO headers"))?;
                if gso_size == 0 || payload == 0 {
                    return Err(OffloadError::Malformed("UDP GSO sizes"));
                }
                Kind::UdpBatch {
                    l4,
                    gso_size,
                    count: payload.div_ceil(gso_size),
                }
            }
            other => return Err(OffloadError::UnsupportedGso(other)),
        };
        Ok(Self { packet, kind })
    }

    /// Datagrams this packet becomes on the wire.
    pub fn count(&self) -> usize {
        match self.kind {
            Kind::Single { .. } => 1,
            Kind::UdpBatch { count, .. } => count,
        }
    }

    /// Length of datagram `index` (< `count()`).
    pub fn datagram_len(&self, index: usize) -> usize {
        match self.kind {
            Kind::Single { .. } => self.packet.len(),
            Kind::UdpBatch { l4, gso_size, .. } => {
                let headers = l4 + UDP_HDR_LEN;
                let from = headers + index * gso_size;
                headers + (from + gso_size).min(self.packet.len()) - from
            }
        }
    }

    /// Write datagram `index` (< `count()`) into `out` (at least
    /// `datagram_len(index)` bytes), complete with its checksums; returns its length.
    pub fn write(&self, index: usize, out: &mut [u8]) -> usize {
        match self.kind {
            Kind::Single { csum } => {
                let len = self.packet.len();
                out[..len].copy_from_slice(self.packet);
                if let Some((start, offset)) = csum {
                    complete_partial_checksum(&mut out[..len], start, offset);
                }
                len
            }
            Kind::UdpBatch { l4, gso_size, .. } => {
                let headers = l4 + UDP_HDR_LEN;
                let from = headers + index * gso_size;
                let to = (from + gso_size).min(self.packet.len());
                let len = headers + (to - from);
                out[..headers].copy_from_slice(&self.packet[..headers]);
                out[headers..len].copy_from_slice(&self.packet[from..to]);
                finish_udp_segment(&mut out[..len], l4, index);
                len
            }
        }
    }
}

/// The layer-4 protocol of an IPv4 or IPv6 packet whose L4 header starts at
/// `l4`; UDP GSO needs it to be UDP right there (no IPv6 extension headers).
fn ip_l4_protocol(packet: &[u8], l4: usize) -> Result<(), OffloadError> {
    let version = packet.first().ok_or(OffloadError::Malformed("IP header"))? >> 4;
    let (proto, header_len) = match version {
        4 => (packet.get(9), usize::from(packet[0] & 0x0f) * 4),
        6 => (packet.get(6), 40),
        _ => return Err(OffloadError::Malformed("IP version")),
    };
    if proto != Some(&IPPROTO_UDP) || header_len != l4 || packet.len() < l4 + UDP_HDR_LEN {
        return Err(OffloadError::Malformed("UDP GSO packet"));
    }
    Ok(())
}

/// Fix the IP and UDP headers of segment `index` (lengths, IPv4 ID and
/// header checksum, UDP checksum), as `__udp_gso_segment` and a NIC would.
fn finish_udp_segment(seg: &mut [u8], l4: usize, index: usize) {
    let total = seg.len() as u16;
    let udp_len = total - l4 as u16;
    if seg[0] >> 4 == 4 {
        seg[2..4].copy_from_slice(&total.to_be_bytes());
        let id = u16::from_be_bytes([seg[4], seg[5]]).wrapping_add(index as u16);
        seg[4..6].copy_from_slice(&id.to_be_bytes());
        seg[10..12].copy_from_slice(&[0, 0]);
        let sum = !fold(sum_words(0, &seg[..l4]));
        seg[10..12].copy_from_slice(&sum.to_be_bytes());
    } else {
        seg[4..6].copy_from_slice(&udp_len.to_be_bytes());
    }
    seg[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
    seg[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
    let pseudo = pseudo_header_sum(seg, udp_len);
    let mut sum = !fold(sum_words(pseudo, &seg[l4..]));
    if sum == 0 {
        sum = 0xffff; // 0 means "no checksum" in UDP
    }
    seg[l4 + 6..l4 + 8].copy_from_slice(&sum.to_be_bytes());
}

/// A checksum the sender left to the NIC (`CHECKSUM_PARTIAL`): the field
/// holds the pseudo-header sum; the NIC sums from `start` to the end and
/// stores the result there.
fn complete_partial_checksum(packet: &mut [u8], start: usize, offset: usize) {
    let mut sum = !fold(sum_words(0, &packet[start..]));
    let is_udp = match packet[0] >> 4 {
        4 => packet.get(9) == Some(&IPPROTO_UDP),
        6 => packet.get(6) == Some(&IPPROTO_UDP),
        _ => false,
    };
    if sum == 0 && is_udp {
        sum = 0xffff;
    }
    packet[start + offset..start + offset + 2].copy_from_slice(&sum.to_be_bytes());
}

/// Most datagrams one coalesced write carries (the kernel's `UDP_GRO_CNT_MAX`).
pub const GRO_MAX_SEGMENTS: usize = 64;
const IPV4_HDR_LEN: usize = 20;

/// Receive coalescing (GRO), as a NIC driver's NAPI poll does it for a UDP
/// socket that asked for it (`UDP_GRO`, which quinn sets): consecutive
/// datagrams of one flow, all of one size but the last, which may be
/// shorter, become one packet the socket reads in one go. Only plain IPv4
/// UDP (no options, not fragmented) is coalesced, as the kernel's own GRO.
#[derive(Debug, Default)]
pub struct Coalescer {
    /// (src, dst, ports) of the run, and its segment size.
    flow: Option<([u8; 12], usize)>,
    segments: usize,
    payload: usize,
    /// The run ended with a short datagram: nothing more may join.
    closed: bool,
}

impl Coalescer {
    /// Would `packet` join the run? If so it is counted in.
    pub fn offer(&mut self, packet: &[u8]) -> bool {
        let Some((flow, size)) = gro_flow(packet) else {
            return false;
        };
        match self.flow {
            None => {
                self.flow = Some((flow, size));
                self.segments = 1;
                self.payload = size;
                self.closed = false;
                true
            }
            Some((run, gso)) => {
                let fits = run == flow
                    && !self.closed
                    && size <= gso
                    && size > 0
                    && self.segments < GRO_MAX_SEGMENTS
                    && IPV4_HDR_LEN + UDP_HDR_LEN + self.payload + size <= 0xffff;
                if fits {
                    self.segments += 1;
                    self.payload += size;
                    self.closed = size < gso;
                }
                fits
            }
        }
    }

    /// Datagrams in the run.
    pub fn segments(&self) -> usize {
        self.segments
    }

    /// The `virtio_net_hdr` and IPv4 + UDP headers for the run, whose first
    /// datagram is `first`; the payloads follow them in order. A run of one
    /// is delivered as it is (`delivered_header`), not through here.
    pub fn headers(&self, first: &[u8]) -> ([u8; VNET_HDR_LEN], [u8; IPV4_HDR_LEN + UDP_HDR_LEN]) {
        let gso = self.flow.map_or(0, |(_, size)| size);
        let mut vnet = [0u8; VNET_HDR_LEN];
        vnet[0] = F_NEEDS_CSUM;
        vnet[1] = GSO_UDP_L4;
        vnet[2..4].copy_from_slice(&((IPV4_HDR_LEN + UDP_HDR_LEN) as u16).to_le_bytes());
        vnet[4..6].copy_from_slice(&(gso as u16).to_le_bytes());
        vnet[6..8].copy_from_slice(&(IPV4_HDR_LEN as u16).to_le_bytes());
        vnet[8..10].copy_from_slice(&UDP_CSUM_OFFSET.to_le_bytes());
        let mut h = [0u8; IPV4_HDR_LEN + UDP_HDR_LEN];
        h.copy_from_slice(&first[..IPV4_HDR_LEN + UDP_HDR_LEN]);
        let total = (IPV4_HDR_LEN + UDP_HDR_LEN + self.payload) as u16;
        let udp_len = total - IPV4_HDR_LEN as u16;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let ip_sum = !fold(sum_words(0, &h[..IPV4_HDR_LEN]));
        h[10..12].copy_from_slice(&ip_sum.to_be_bytes());
        h[24..26].copy_from_slice(&udp_len.to_be_bytes());
        // CHECKSUM_PARTIAL: the field holds the pseudo-header sum, as a
        // kernel that segments the packet again (a socket without UDP_GRO)
        // expects.
        let pseudo = fold(pseudo_header_sum(&h, udp_len));
        h[26..28].copy_from_slice(&pseudo.to_be_bytes());
        (vnet, h)
    }

    /// Start over (after the run was written).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Flow key and payload size of a plain IPv4 UDP datagram GRO may coalesce.
fn gro_flow(packet: &[u8]) -> Option<([u8; 12], usize)> {
    let plain_ipv4 = packet.len() >= IPV4_HDR_LEN + UDP_HDR_LEN
        && packet[0] == 0x45
        && packet[9] == IPPROTO_UDP
        // neither more fragments nor a fragment offset
        && u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff == 0
        && usize::from(u16::from_be_bytes([packet[2], packet[3]])) == packet.len();
    if !plain_ipv4 {
        return None;
    }
    let mut flow = [0u8; 12];
    flow[..8].copy_from_slice(&packet[12..20]);
    flow[8..].copy_from_slice(&packet[20..24]);
    Some((flow, packet.len() - IPV4_HDR_LEN - UDP_HDR_LEN))
}

/// Payload of a datagram `gro_flow` accepted.
pub fn udp_payload(packet: &[u8]) -> &[u8] {
    &packet[IPV4_HDR_LEN + UDP_HDR_LEN..]
}

/// One's-complement sum of the UDP pseudo-header.
pub(crate) fn pseudo_header_sum(packet: &[u8], udp_len: u16) -> u64 {
    let addresses = if packet[0] >> 4 == 4 {
        &packet[12..20]
    } else {
        &packet[8..40]
    };
    sum_words(0, addresses) + u64::from(IPPROTO_UDP) + u64::from(udp_len)
}

/// Add big-endian 16-bit words (an odd last byte padded with zero) to `sum`.
pub(crate) fn sum_words(mut sum: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 4] = [10, 77, 0, 1];
    const DST: [u8; 4] = [10, 77, 0, 2];

    /// An IPv4/UDP packet as a sender's kernel hands a GSO batch to the TUN:
    /// lengths of the whole batch, UDP checksum field left partial.
    fn ipv4_udp(payload: &[u8]) -> Vec<u8> {
        let total = 20 + 8 + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total.min(0xffff) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0xfffeu16.to_be_bytes()); // wraps across segments
        p[8] = 64;
        p[9] = IPPROTO_UDP;
        p[12..16].copy_from_slice(&SRC);
        p[16..20].copy_from_slice(&DST);
        p[20..22].copy_from_slice(&4500u16.to_be_bytes());
        p[22..24].copy_from_slice(&51000u16.to_be_bytes());
        p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p[26..28].copy_from_slice(&0x1234u16.to_be_bytes()); // partial, to be replaced
        p[28..].copy_from_slice(payload);
        p
    }

    fn gso_hdr(gso_size: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: 28,
            gso_size,
            csum_start: 20,
            csum_offset: 6,
        }
    }

    /// A receiver's check: IPv4 header and UDP checksums verify.
    fn assert_valid_ipv4_udp(seg: &[u8]) {
        assert_eq!(
            fold(sum_words(0, &seg[..20])),
            0xffff,
            "IPv4 header checksum"
        );
        let udp_len = u16::from_be_bytes([seg[24], seg[25]]);
        assert_eq!(usize::from(udp_len), seg.len() - 20);
        assert_eq!(usize::from(u16::from_be_bytes([seg[2], seg[3]])), seg.len());
        let pseudo = pseudo_header_sum(seg, udp_len);
        assert_eq!(fold(sum_words(pseudo, &seg[20..])), 0xffff, "UDP checksum");
    }

    #[test]
    fn a_gso_batch_becomes_its_datagrams_with_valid_checksums() {
        let payload: Vec<u8> = (0..3 * 1200 + 77).map(|i| (i * 7 + 3) as u8).collect();
        let packet = ipv4_udp(&payload);
        let hdr = VnetHdr::parse(&gso_hdr(1200).to_bytes()).expect("header");
        let wire = Wire::new(&hdr, &packet).expect("batch");
        assert_eq!(wire.count(), 4);
        let mut rebuilt = Vec::new();
        let mut ids = Vec::new();
        for i in 0..wire.count() {
            let mut out = [0u8; 2048];
            let len = wire.write(i, &mut out);
            let seg = &out[..len];
            assert_eq!(len, 28 + if i < 3 { 1200 } else { 77 });
            assert_valid_ipv4_udp(seg);
            assert_eq!(seg[20..24], packet[20..24], "ports kept");
            ids.push(u16::from_be_bytes([seg[4], seg[5]]));
            rebuilt.extend_from_slice(&seg[28..]);
        }
        assert_eq!(
            rebuilt, payload,
            "payloads in order, nothing lost or repeated"
        );
        assert_eq!(ids, [0xfffe, 0xffff, 0, 1], "IPv4 IDs advance per datagram");
    }

    #[test]
    fn a_single_datagram_gets_the_checksum_the_sender_left_to_the_nic() {
        let payload = b"a short datagram, odd length";
        let packet = ipv4_udp(payload);
        let mut hdr = gso_hdr(0);
        hdr.gso_type = GSO_NONE;
        // The IPv4 header's own checksum is the kernel's job, not offloaded.
        let mut sent = packet.clone();
        let ip_checksum = !fold(sum_words(0, &sent[..20]));
        sent[10..12].copy_from_slice(&ip_checksum.to_be_bytes());
        // Linux leaves the pseudo-header sum in the field (CHECKSUM_PARTIAL).
        let pseudo = fold(pseudo_header_sum(&sent, (8 + payload.len()) as u16));
        sent[26..28].copy_from_slice(&pseudo.to_be_bytes());
        let wire = Wire::new(&hdr, &sent).expect("single");
        assert_eq!(wire.count(), 1);
        let mut out = [0u8; 2048];
        let len = wire.write(0, &mut out);
        assert_eq!(&out[28..len], payload);
        assert_valid_ipv4_udp(&out[..len]);
    }

    #[test]
    fn a_packet_without_offloaded_checksum_passes_unchanged() {
        let packet = ipv4_udp(b"as is");
        let hdr = VnetHdr::parse(&[0u8; VNET_HDR_LEN]).expect("header");
        let wire = Wire::new(&hdr, &packet).expect("single");
        let mut out = [0u8; 2048];
        let len = wire.write(0, &mut out);
        assert_eq!(&out[..len], &packet[..]);
    }

    /// Each datagram of a batch, as the emulator holds them after `Wire::write`.
    fn datagrams(payload_sizes: &[usize]) -> Vec<Vec<u8>> {
        let payload: Vec<u8> = (0..payload_sizes.iter().sum::<usize>())
            .map(|i| i as u8)
            .collect();
        let mut out = Vec::new();
        let mut from = 0;
        for (i, &size) in payload_sizes.iter().enumerate() {
            let packet = ipv4_udp(&payload[from..from + size]);
            let mut hdr = gso_hdr(size as u16);
            hdr.gso_type = GSO_NONE;
            let wire = Wire::new(&hdr, &packet).expect("datagram");
            let mut buf = vec![0u8; 2048];
            let len = wire.write(0, &mut buf);
            buf.truncate(len);
            finish_udp_segment(&mut buf, 20, i);
            out.push(buf);
            from += size;
        }
        out
    }

    #[test]
    fn coalesced_datagrams_are_one_valid_gso_packet_that_segments_back() {
        let sent = datagrams(&[1200, 1200, 1200, 500]);
        let mut gro = Coalescer::default();
        assert!(
            sent.iter().all(|d| gro.offer(d)),
            "one flow, equal sizes, a short last"
        );
        assert_eq!(gro.segments(), 4);
        let (vnet, headers) = gro.headers(&sent[0]);
        let mut coalesced = headers.to_vec();
        for d in &sent {
            coalesced.extend_from_slice(udp_payload(d));
        }
        // What a kernel that segments it again (or the emulator) sees.
        let hdr = VnetHdr::parse(&vnet).expect("header");
        assert_eq!(
            (hdr.gso_type, hdr.gso_size, hdr.hdr_len),
            (GSO_UDP_L4, 1200, 28)
        );
        assert_eq!(
            fold(sum_words(0, &coalesced[..20])),
            0xffff,
            "IPv4 header checksum"
        );
        let wire = Wire::new(&hdr, &coalesced).expect("GSO packet");
        assert_eq!(wire.count(), 4);
        for (i, d) in sent.iter().enumerate() {
            let mut out = [0u8; 2048];
            let len = wire.write(i, &mut out);
            assert_eq!(udp_payload(&out[..len]), udp_payload(d));
            assert_valid_ipv4_udp(&out[..len]);
        }
    }

    #[test]
    fn a_run_ends_at_another_flow_a_longer_datagram_or_after_a_short_one() {
        let sent = datagrams(&[1200, 1200]);
        let mut gro = Coalescer::default();
        assert!(gro.offer(&sent[0]));
        let mut other_port = sent[1].clone();
        other_port[21] ^= 1;
        assert!(!gro.offer(&other_port), "another flow");
        let longer = datagrams(&[1300]);
        assert!(!gro.offer(&longer[0]), "longer than the run's segments");
        let short = datagrams(&[100]);
        assert!(gro.offer(&short[0]), "a short one may end the run");
        assert!(!gro.offer(&sent[1]), "nothing after the short one");
        let mut fragment = sent[1].clone();
        fragment[6] |= 0x20; // more fragments
        gro.reset();
        assert!(!gro.offer(&fragment), "fragments are never coalesced");
        let many = datagrams(&[1000; GRO_MAX_SEGMENTS + 1]);
        gro.reset();
        let joined = many.iter().filter(|d| gro.offer(d)).count();
        assert_eq!(joined, GRO_MAX_SEGMENTS, "at most 64 datagrams");
        let large = datagrams(&[1200; GRO_MAX_SEGMENTS]);
        gro.reset();
        let joined = large.iter().filter(|d| gro.offer(d)).count();
        assert_eq!(joined, (0xffff - 28) / 1200, "at most one 64 KiB IP packet");
    }

    #[test]
    fn delivered_tcp_and_udp_carry_their_checksum_position() {
        let udp = ipv4_udp(b"x");
        let hdr = VnetHdr::parse(&delivered_header(&udp)).expect("header");
        assert_eq!((hdr.flags, hdr.gso_type), (F_NEEDS_CSUM, GSO_NONE));
        assert_eq!((hdr.csum_start, hdr.csum_offset), (20, 6));
        let mut tcp = vec![0u8; 40];
        tcp[0] = 0x45;
        tcp[9] = IPPROTO_TCP;
        let hdr = VnetHdr::parse(&delivered_header(&tcp)).expect("header");
        assert_eq!((hdr.csum_start, hdr.csum_offset), (20, 16));
        let mut icmp = udp.clone();
        icmp[9] = 1;
        assert_eq!(delivered_header(&icmp), [0u8; VNET_HDR_LEN]);
        assert_eq!(
            delivered_header(&udp[..24]),
            [0u8; VNET_HDR_LEN],
            "truncated"
        );
    }

    #[test]
    fn malformed_headers_are_refused_not_trusted() {
        let packet = ipv4_udp(&[1u8; 100]);
        assert_eq!(VnetHdr::parse(&[0u8; 9]), Err(OffloadError::NoHeader));
        let mut tso = gso_hdr(1200);
        tso.gso_type = 1; // TCPv4: never announced
        assert_eq!(
            Wire::new(&tso, &packet).err(),
            Some(OffloadError::UnsupportedGso(1))
        );
        let mut bad = gso_hdr(1200);
        bad.csum_offset = 200;
        assert!(
            Wire::new(&bad, &packet).is_err(),
            "checksum field past the end"
        );
        let mut zero = gso_hdr(0);
        zero.gso_size = 0;
        assert!(Wire::new(&zero, &packet).is_err(), "zero segment size");
        let mut not_udp = packet.clone();
        not_udp[9] = 6;
        assert!(
            Wire::new(&gso_hdr(1200), &not_udp).is_err(),
            "TCP under UDP GSO"
        );
        let mut wrong_l4 = gso_hdr(1200);
        wrong_l4.csum_start = 24;
        assert!(
            Wire::new(&wrong_l4, &packet).is_err(),
            "L4 not after the IP header"
        );
        assert!(
            Wire::new(&gso_hdr(1200), &packet[..24]).is_err(),
            "truncated"
        );
    }
}
