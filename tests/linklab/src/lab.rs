//! The lab: two namespaces (site, cloud) joined by the emulated link.
//!
//! Why a guard object: tests and benches panic, time out and get
//! interrupted; whatever happens, dropping `Lab` stops the forwarder, closes
//! the TUNs (non-persistent, so they vanish) and deletes both namespaces
//! with anything still running in them. `linklab cleanup` handles the one
//! case Drop cannot: a process killed outright.

use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::forwarder::Forwarder;
use crate::link::{LinkConfig, LinkStats};
use crate::netns::{self, Netns};
use crate::tun::Tun;
use crate::weather::{Nat, Weather};

/// Addresses exist only inside the lab's namespaces (a private /30).
pub const SITE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const CLOUD_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// Where the NAT moves the site after `Lab::rebind_address` (alternately), in
/// a /30 the cloud routes back over the link.
pub const MOVED_ADDRS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 77, 0, 5), Ipv4Addr::new(10, 77, 0, 6)];
const MOVED_NET: &str = "10.77.0.4/30";
/// The cloud's second address (`Lab::add_cloud_address`).
pub const SECOND_CLOUD_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 9);
const PREFIX_LEN: u8 = 30;
/// Name of the TUN inside each namespace (same name, separate namespaces).
const TUN_NAME: &str = "brl0";
const MTU: u32 = 1500;
/// Socket buffer ceiling, so one TCP flow can fill a high-BDP path.
const BUFFER_MAX_BYTES: u64 = 64 << 20;
/// Smallest default queue: a few packets even when rate × RTT is tiny.
const MIN_QUEUE_BYTES: u64 = 16 * MTU as u64;

/// Makes namespace names unique per lab within one process.
static LAB_COUNTER: AtomicU32 = AtomicU32::new(0);

/// The emulated path, symmetric in both directions.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkProfile {
    /// Round-trip propagation delay; each direction gets half.
    pub rtt_ms: f64,
    /// Random loss probability per packet, per direction.
    pub loss: f64,
    /// Bottleneck rate per direction in Mbit/s of IP bytes; 0 = unlimited.
    pub rate_mbit: f64,
    /// Drop-tail queue limit; None = one BDP (rate × RTT), at least 16 packets.
    pub queue_bytes: Option<u64>,
    /// Seed of the loss RNG (the reverse direction uses a derived seed).
    pub seed: u64,
    /// NIC offloads on both ends (`offload`): senders' UDP GSO batches pass
    /// the TUN whole, checksums are the "NIC's". Off: a plain TUN, every
    /// datagram segmented and checksummed by the processes' own kernel work.
    pub offload: bool,
    /// A NAT in front of the site (`weather::Nat`) that tests can rebind
    /// (`Lab::rebind_port`, `Lab::rebind_address`); the identity until then.
    /// Not with `offload`.
    pub nat: bool,
}

impl LinkProfile {
    pub fn new(rtt_ms: f64, loss: f64, rate_mbit: f64) -> Self {
        Self {
            rtt_ms,
            loss,
            rate_mbit,
            queue_bytes: None,
            seed: 1,
            offload: false,
            nat: false,
        }
    }

    pub fn rate_bytes_per_sec(&self) -> u64 {
        (self.rate_mbit * 1e6 / 8.0) as u64
    }

    /// rate × RTT in bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (self.rate_bytes_per_sec() as f64 * self.rtt_ms / 1000.0) as u64
    }

    pub fn queue_limit_bytes(&self) -> u64 {
        self.queue_bytes
            .unwrap_or_else(|| self.bdp_bytes().max(MIN_QUEUE_BYTES))
    }

    fn validate(&self) -> anyhow::Result<()> {
        if !(self.rtt_ms.is_finite() && self.rtt_ms >= 0.0 && self.rtt_ms <= 10_000.0) {
            bail!("rtt_ms must be within 0..=10000, got {}", self.rtt_ms);
        }
        if !(self.rate_mbit.is_finite() && self.rate_mbit >= 0.0) {
            bail!("rate_mbit must be >= 0, got {}", self.rate_mbit);
        }
        if !(0.0..=1.0).contains(&self.loss) {
            bail!("loss must be within 0.0..=1.0, got {}", self.loss);
        }
        if self.nat && self.offload {
            bail!("the NAT rewrites single datagrams: not with offload");
        }
        Ok(())
    }

    fn link_config(&self, seed: u64) -> LinkConfig {
        LinkConfig {
            delay: Duration::from_secs_f64(self.rtt_ms / 2000.0),
            rate_bytes_per_sec: self.rate_bytes_per_sec(),
            queue_limit_bytes: self.queue_limit_bytes(),
            loss: self.loss,
            seed,
        }
    }

    /// Buffers per direction: room for a full queue plus a full delay line,
    /// with slack for small packets (ACKs), within 8 .. 128 MiB.
    fn pool_slots(&self) -> usize {
        let in_flight_bytes = if self.rate_mbit > 0.0 {
            self.queue_limit_bytes() + self.bdp_bytes() / 2
        } else {
            // Unlimited: assume up to ~4 Gbit/s over the one-way delay.
            (500e6 * self.rtt_ms / 2000.0) as u64
        };
        let packets = (in_flight_bytes / u64::from(MTU)) as usize;
        (packets * 4 + 2048).clamp(4096, 65536)
    }
}

/// Which namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Site,
    Cloud,
}

/// Counters of both directions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabStats {
    pub site_to_cloud: LinkStats,
    pub cloud_to_site: LinkStats,
}

impl LabStats {
    pub fn to_json(&self) -> String {
        format!(
            "{{\"site_to_cloud\":{},\"cloud_to_site\":{}}}",
            self.site_to_cloud.to_json(),
            self.cloud_to_site.to_json()
        )
    }
}

/// A running lab; dropping it tears everything down.
pub struct Lab {
    profile: LinkProfile,
    // Field order is drop order: stop forwarding, close TUNs, delete namespaces.
    forwarder: Forwarder,
    weather: Arc<Weather>,
    _tuns: [Arc<Tun>; 2],
    site: Netns,
    cloud: Netns,
}

impl Lab {
    /// Create both namespaces and TUNs, configure them and start forwarding.
    pub fn start(profile: LinkProfile) -> anyhow::Result<Lab> {
        profile.validate()?;
        check_privileges()?;
        for key in ["net.core.rmem_max", "net.core.wmem_max"] {
            netns::raise_sysctl(key, BUFFER_MAX_BYTES)?;
        }
        let n = LAB_COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Each Netns deletes itself if a later step fails.
        let site = Netns::create(&format!("{}site-{pid}-{n}", netns::PREFIX))?;
        let cloud = Netns::create(&format!("{}cloud-{pid}-{n}", netns::PREFIX))?;
        let site_tun = setup_side(&site, SITE_ADDR, profile.offload)?;
        let cloud_tun = setup_side(&cloud, CLOUD_ADDR, profile.offload)?;
        if profile.nat {
            // Replies to where the NAT may move the site go over the link too.
            netns::ip(&[
                "-n",
                cloud.name(),
                "route",
                "add",
                MOVED_NET,
                "dev",
                TUN_NAME,
            ])?;
        }
        let weather = Arc::new(Weather::new(profile.nat.then(|| Nat::new(SITE_ADDR))));
        let forwarder = Forwarder::start(
            site_tun.clone(),
            cloud_tun.clone(),
            profile.link_config(profile.seed),
            profile.link_config(profile.seed ^ 0x9e37_79b9_7f4a_7c15),
            profile.pool_slots(),
            profile.offload,
            weather.clone(),
        )?;
        Ok(Lab {
            profile,
            forwarder,
            weather,
            _tuns: [site_tun, cloud_tun],
            site,
            cloud,
        })
    }

    pub fn profile(&self) -> &LinkProfile {
        &self.profile
    }

    pub fn site_ns(&self) -> &str {
        self.site.name()
    }

    pub fn cloud_ns(&self) -> &str {
        self.cloud.name()
    }

    pub fn site_addr(&self) -> Ipv4Addr {
        SITE_ADDR
    }

    pub fn cloud_addr(&self) -> Ipv4Addr {
        CLOUD_ADDR
    }

    pub fn ns(&self, side: Side) -> &str {
        self.netns(side).name()
    }

    pub fn addr(&self, side: Side) -> Ipv4Addr {
        match side {
            Side::Site => SITE_ADDR,
            Side::Cloud => CLOUD_ADDR,
        }
    }

    fn netns(&self, side: Side) -> &Netns {
        match side {
            Side::Site => &self.site,
            Side::Cloud => &self.cloud,
        }
    }

    /// Make `cmd` start inside the namespace of `side` (setns between fork
    /// and exec, like `ip netns exec` without its /sys and /etc remounts).
    /// Stdio, env and cwd of `cmd` are kept.
    pub fn enter_on_spawn(&self, side: Side, cmd: &mut Command) -> anyhow::Result<()> {
        let fd = self
            .netns(side)
            .fd()
            .try_clone()
            .context("lab: dup netns fd")?;
        // SAFETY: the closure only calls setns(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || netns::enter(&fd));
        }
        Ok(())
    }

    /// Spawn `cmd` inside the namespace of `side`. Processes still running
    /// there when the lab is dropped are killed.
    pub fn spawn_in(&self, side: Side, mut cmd: Command) -> anyhow::Result<Child> {
        self.enter_on_spawn(side, &mut cmd)?;
        cmd.spawn()
            .with_context(|| format!("lab: spawn {:?} in {}", cmd.get_program(), self.ns(side)))
    }

    /// Run `f` on a new thread inside the namespace of `side`; sockets it
    /// opens belong to that namespace.
    pub fn thread_in<F, T>(&self, side: Side, f: F) -> anyhow::Result<JoinHandle<anyhow::Result<T>>>
    where
        F: FnOnce() -> anyhow::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.netns(side).spawn_thread(f)
    }

    /// Run `f` inside the namespace of `side` and wait for it; handy to
    /// create sockets there and use them from any thread afterwards.
    pub fn run_in<F, T>(&self, side: Side, f: F) -> anyhow::Result<T>
    where
        F: FnOnce() -> anyhow::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.netns(side).run(f)
    }

    /// Cuts the link both ways (every packet dropped, the ones already in
    /// the delay line excepted) until the returned guard is ended or dropped.
    pub fn outage(&self) -> Outage<'_> {
        self.weather.set_down(true);
        Outage { lab: self }
    }

    /// The NAT forgets its mappings: each UDP flow from the site leaves from a
    /// new port from its next packet on, and the cloud's packets to the old
    /// port are dropped. Needs `LinkProfile::nat`.
    pub fn rebind_port(&self) -> anyhow::Result<()> {
        self.weather
            .with_nat(|n| n.rebind_port())
            .context("rebind_port: the lab has no NAT (LinkProfile::nat)")
    }

    /// As `rebind_port`, and the site's flows come from another address
    /// (alternately `MOVED_ADDRS`); returns it.
    pub fn rebind_address(&self) -> anyhow::Result<Ipv4Addr> {
        self.weather
            .with_nat(|n| {
                let next = if n.outer() == MOVED_ADDRS[0] {
                    MOVED_ADDRS[1]
                } else {
                    MOVED_ADDRS[0]
                };
                n.rebind_address(next);
                next
            })
            .context("rebind_address: the lab has no NAT (LinkProfile::nat)")
    }

    /// Gives the cloud a second address (`SECOND_CLOUD_ADDR`), routed from the
    /// site over the link: where a replacement relay can listen, as an
    /// instance replaced behind a DNS name would.
    pub fn add_cloud_address(&self) -> anyhow::Result<Ipv4Addr> {
        let host = format!("{SECOND_CLOUD_ADDR}/32");
        netns::ip(&[
            "-n",
            self.cloud.name(),
            "addr",
            "add",
            &host,
            "dev",
            TUN_NAME,
        ])?;
        netns::ip(&[
            "-n",
            self.site.name(),
            "route",
            "add",
            &host,
            "dev",
            TUN_NAME,
        ])?;
        Ok(SECOND_CLOUD_ADDR)
    }

    /// Packets an outage dropped (both ways), and packets from the cloud to a
    /// mapping the NAT had forgotten.
    pub fn weather_drops(&self) -> (u64, u64) {
        (self.weather.dropped_outage(), self.weather.dropped_nat())
    }

    pub fn stats(&self) -> LabStats {
        let (site_to_cloud, cloud_to_site) = self.forwarder.stats();
        LabStats {
            site_to_cloud,
            cloud_to_site,
        }
    }

    /// One JSON object describing the lab (for scripts).
    pub fn describe_json(&self) -> String {
        let p = &self.profile;
        format!(
            "{{\"site_ns\":\"{}\",\"cloud_ns\":\"{}\",\"site_addr\":\"{}\",\"cloud_addr\":\"{}\",\
             \"rtt_ms\":{},\"loss\":{},\"rate_mbit\":{},\"queue_bytes\":{},\"seed\":{},\"offload\":{}}}",
            self.site_ns(),
            self.cloud_ns(),
            SITE_ADDR,
            CLOUD_ADDR,
            p.rtt_ms,
            p.loss,
            p.rate_mbit,
            p.queue_limit_bytes(),
            p.seed,
            p.offload
        )
    }
}

/// An outage in progress (`Lab::outage`): the link is down until `end` or drop.
pub struct Outage<'a> {
    lab: &'a Lab,
}

impl Outage<'_> {
    /// The link comes back.
    pub fn end(self) {}
}

impl Drop for Outage<'_> {
    fn drop(&mut self) {
        self.lab.weather.set_down(false);
    }
}

/// Root and a TUN device are required; the error says which is missing.
pub fn check_privileges() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("linklab needs root (network namespaces, TUN devices)");
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        bail!("linklab needs /dev/net/tun");
    }
    Ok(())
}

/// Inside `ns`: TUN, sysctls, lo up, address and MTU. The /30 route is the
/// connected route of the address, so nothing leaves the namespace but
/// through the TUN.
fn setup_side(ns: &Netns, addr: Ipv4Addr, offload: bool) -> anyhow::Result<Arc<Tun>> {
    let tun = ns.run(move || {
        let tun = Tun::create(TUN_NAME, offload)?;
        let max = BUFFER_MAX_BYTES.to_string();
        netns::write_sysctl("net.ipv4.tcp_rmem", &format!("4096 131072 {max}"))?;
        netns::write_sysctl("net.ipv4.tcp_wmem", &format!("4096 16384 {max}"))?;
        // Keep IPv6 chatter (router solicitations) off the link and counters.
        let _ = netns::write_sysctl("net.ipv6.conf.all.disable_ipv6", "1");
        let _ = netns::write_sysctl("net.ipv6.conf.default.disable_ipv6", "1");
        Ok(tun)
    })?;
    let name = ns.name();
    let mtu = MTU.to_string();
    let cidr = format!("{addr}/{PREFIX_LEN}");
    netns::ip(&["-n", name, "link", "set", "dev", "lo", "up"])?;
    // A long TUN tx queue: the forwarder, not the kernel, should drop.
    netns::ip(&[
        "-n",
        name,
        "link",
        "set",
        "dev",
        TUN_NAME,
        "mtu",
        &mtu,
        "txqueuelen",
        "10000",
        "up",
    ])?;
    netns::ip(&["-n", name, "addr", "add", &cidr, "dev", TUN_NAME])?;
    Ok(Arc::new(tun))
}
