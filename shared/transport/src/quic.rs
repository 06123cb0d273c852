//! QUIC settings both ends share: flow-control windows sized for long fat links yet
//! bounded by configuration, the congestion controller, and UDP sockets with large
//! kernel buffers (a 200 ms × 1 Gbit/s path needs ~25 MB in flight).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use quinn::{TransportConfig, VarInt};
use socket2::{Domain, Protocol, Socket, Type};

use relay_proto::limits::MIB;

/// Concurrent streams (files) per connection.
pub const MAX_STREAMS: u64 = 512;

/// Which congestion controller QUIC uses. `Relay` is ours (`crate::congestion`):
/// it fills long lossy paths where the loss-based ones collapse (see
/// docs/TRANSPORT.md for the measurements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Congestion {
    Cubic,
    Bbr,
    NewReno,
    #[default]
    Relay,
}

/// `--congestion` names no controller we have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown congestion controller {0:?} (relay | cubic | bbr | newreno)")]
pub struct UnknownCongestion(pub String);

impl std::str::FromStr for Congestion {
    type Err = UnknownCongestion;
    fn from_str(s: &str) -> Result<Self, UnknownCongestion> {
        match s {
            "cubic" => Ok(Self::Cubic),
            "bbr" => Ok(Self::Bbr),
            "newreno" => Ok(Self::NewReno),
            "relay" => Ok(Self::Relay),
            _ => Err(UnknownCongestion(s.to_string())),
        }
    }
}

/// Window sizes in bytes. The connection window is what one peer may have
/// unread at the relay (once authenticated; before, `transport_before_auth`);
/// the stream window what one file may. See `max_streams` for the stream count.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub stream_window: u64,
    pub connection_window: u64,
    pub congestion: Congestion,
    /// Cap on the sending rate, Mbit/s (like AzCopy's --cap-mbps). Only the relay
    /// controller can honour it, so setting it selects that controller.
    pub max_rate_mbit: Option<f64>,
    /// Back off like TCP when a loss-based flow shares the bottleneck (relay
    /// controller; setting it selects that controller).
    pub fair: bool,
    /// Cold start (relay controller, no warm estimate): measure the bottleneck
    /// with a packet train after the handshake instead of plain slow start.
    pub probe_train: bool,
    /// Bytes written to a connection and not yet acknowledged by its peer,
    /// at most (quinn buffers them): the relay sets it (downloads), where it
    /// is a term of its memory bound; `None` is the connection window.
    pub send_window: Option<u64>,
}

impl Default for Windows {
    fn default() -> Self {
        Self {
            // One file's bytes in flight: 1 Gbit/s × 300 ms is 37.5 MB, and the
            // controller's window runs up to 1.25 × that. 32 MiB held quicperf
            // to ~770 Mbit/s at 300 ms / 1 Gbit/s; 64 MiB reached 965–998.
            stream_window: 64 * MIB,
            connection_window: 256 * MIB,
            congestion: Congestion::Relay,
            max_rate_mbit: None,
            fair: false,
            probe_train: true,
            send_window: None,
        }
    }
}

impl Windows {
    /// Streams a peer may have open at once. Not `connection_window /
    /// stream_window`: small files need many streams to fill a long path, and a
    /// file's bytes cannot take more than its own size. Large files in flight are
    /// bounded by the client (`relay-client`'s in-flight accounting keeps their
    /// stream windows within the connection window); a client that opens more
    /// only slows its own connection, whose window is its alone.
    pub fn max_streams(&self) -> u64 {
        MAX_STREAMS
    }

    pub fn transport(&self) -> TransportConfig {
        self.transport_with(PathMemory::default())
    }

    /// The relay's transport for a connection that has not authenticated yet: at
    /// most `window` bytes unread and a few streams, raised after a valid Offer
    /// (`Connection::set_receive_window`, `set_max_concurrent_bi_streams`).
    pub fn transport_before_auth(&self, window: u64, streams: u64) -> TransportConfig {
        let mut t = self.transport();
        let var = |v: u64| VarInt::from_u64(v).unwrap_or(VarInt::MAX);
        t.receive_window(var(window.min(self.connection_window)));
        t.max_concurrent_bidi_streams(var(streams.clamp(1, self.max_streams())));
        t
    }

    /// As `transport`, with warm start from (and reporting to) `memory` when the
    /// relay controller is in use.
    pub fn transport_with(&self, memory: PathMemory) -> TransportConfig {
        let mut t = TransportConfig::default();
        let var = |v: u64| VarInt::from_u64(v).unwrap_or(VarInt::MAX);
        t.stream_receive_window(var(self.stream_window));
        t.receive_window(var(self.connection_window));
        t.send_window(self.send_window.unwrap_or(self.connection_window));
        t.max_concurrent_bidi_streams(var(self.max_streams()));
        t.max_concurrent_uni_streams(VarInt::from_u32(0));
        t.keep_alive_interval(Some(Duration::from_secs(5)));
        t.max_idle_timeout(Some(var(60_000).into()));
        // Ask the peer for an ACK every 10th packet (RFC 9000 default: every 2nd),
        // at most 2 ms late: the same information in a fifth of the ACK packets,
        // so less CPU for both ends at a few hundred Mbit/s. 2 ms is within the
        // relay controller's ack allowance, so the window still covers the delay.
        let mut acks = quinn::AckFrequencyConfig::default();
        acks.ack_eliciting_threshold(VarInt::from_u32(9))
            .max_ack_delay(Some(Duration::from_millis(2)));
        t.ack_frequency_config(Some(acks));
        // Probe for paths above 1500 bytes (jumbo LANs, loopback): fewer packets,
        // less CPU. On ordinary 1500-byte paths discovery settles near 1452.
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(8952);
        t.mtu_discovery_config(Some(mtu));
        let congestion = if self.max_rate_mbit.is_some() || self.fair {
            Congestion::Relay
        } else {
            self.congestion
        };
        match congestion {
            Congestion::Relay => {
                let mut config = self.relay_config();
                config.params.warm = memory.warm;
                config.observer = memory.observer;
                t.congestion_controller_factory(Arc::new(config))
            }
            Congestion::Cubic => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default()))
            }
            Congestion::Bbr => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()))
            }
            Congestion::NewReno => t.congestion_controller_factory(Arc::new(
                quinn::congestion::NewRenoConfig::default(),
            )),
        };
        t
    }

    /// The relay controller's settings for these windows.
    pub fn relay_config(&self) -> crate::congestion::RelayConfig {
        let max_rate = self
            .max_rate_mbit
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| (r * 1e6 / 8.0) as u64);
        crate::congestion::RelayConfig {
            params: crate::congestion::Params {
                max_rate,
                fair: self.fair,
                train: self.probe_train,
                ..Default::default()
            },
            observer: None,
        }
    }
}

/// Endpoint settings both ends share. Connection IDs are 4 random bytes instead of
/// quinn's 8: every packet carries the peer's, so on a bulk transfer the 4 bytes
/// are 0.27 % of the link (about 0.1 s of a 1 GiB upload at 200 Mbit/s). 2^32 IDs
/// are plenty for one relay's connections; quinn draws again on a collision.
/// A QUIC endpoint on a bound socket (`bind_udp`), with our runtime
/// (`runtime::RelayRuntime`: batched reads, precise timers). Must be called
/// inside a Tokio runtime.
pub fn endpoint(
    server: Option<quinn::ServerConfig>,
    socket: UdpSocket,
) -> std::io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        endpoint_config(),
        server,
        socket,
        Arc::new(crate::runtime::RelayRuntime),
    )
}

pub fn endpoint_config() -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    config.cid_generator(|| {
        Box::new(quinn_proto::RandomConnectionIdGenerator::new(CID_LEN)) as Box<_>
    });
    config
}

const CID_LEN: usize = 4;

/// Warm start for one connection: what an earlier one measured, and where this
/// one reports its own estimate.
#[derive(Debug, Clone, Default)]
pub struct PathMemory {
    pub warm: Option<crate::congestion::PathEstimate>,
    pub observer: Option<Arc<crate::congestion::PathObserver>>,
}

/// Why a `--max-rate` value is refused; `text` as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("{text:?} is not a rate in Mbit/s (e.g. 150 or 2.5)")]
    NotARate { text: String },
    #[error("{text:?}: the rate must be above 0 Mbit/s")]
    NotPositive { text: String },
}

/// Parses a `--max-rate` value: Mbit/s, a positive number (`150`, `2.5`).
pub fn parse_rate_mbit(s: &str) -> Result<f64, RateError> {
    let v: f64 = s
        .trim()
        .trim_end_matches("Mbit/s")
        .trim_end_matches("mbit")
        .trim()
        .parse()
        .map_err(|_| RateError::NotARate {
            text: s.to_string(),
        })?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(RateError::NotPositive {
            text: s.to_string(),
        })
    }
}

/// Binds a UDP socket with kernel buffers of `buffer_bytes` (forced past
/// `net.core.rmem_max` when running as root, else as large as the limit allows).
pub fn bind_udp(addr: SocketAddr, buffer_bytes: usize) -> std::io::Result<UdpSocket> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        // Accept IPv4-mapped peers too when bound to [::].
        let _ = sock.set_only_v6(false);
    }
    set_buffers(&sock, buffer_bytes);
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

fn set_buffers(sock: &Socket, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = sock.as_raw_fd();
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        let set = |opt| unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        };
        // The FORCE variants need CAP_NET_ADMIN; without it, fall back below.
        if set(libc::SO_RCVBUFFORCE) && set(libc::SO_SNDBUFFORCE) {
            return;
        }
    }
    let _ = sock.set_recv_buffer_size(bytes);
    let _ = sock.set_send_buffer_size(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_streams_whatever_the_windows() {
        let w = Windows::default();
        assert_eq!(w.max_streams(), MAX_STREAMS);
        const { assert!(MAX_STREAMS >= 64, "small files need many streams in flight") };
        let tiny = Windows {
            stream_window: 64 * MIB,
            connection_window: 16 * MIB,
            ..w
        };
        assert_eq!(tiny.max_streams(), MAX_STREAMS);
    }

    #[test]
    fn congestion_names_and_rates_parse() {
        assert_eq!("relay".parse::<Congestion>(), Ok(Congestion::Relay));
        assert!("reno".parse::<Congestion>().is_err());
        assert_eq!(parse_rate_mbit("150"), Ok(150.0));
        assert_eq!(parse_rate_mbit("2.5mbit"), Ok(2.5));
        assert!(parse_rate_mbit("0").is_err());
        assert!(parse_rate_mbit("fast").is_err());
        let w = Windows {
            max_rate_mbit: Some(80.0),
            ..Windows::default()
        };
        assert_eq!(w.relay_config().params.max_rate, Some(10_000_000));
    }

    #[test]
    fn binds_loopback_with_buffers() {
        let s = bind_udp("127.0.0.1:0".parse().expect("addr"), 4 << 20).expect("bind");
        assert!(s.local_addr().expect("addr").port() > 0);
    }
}
