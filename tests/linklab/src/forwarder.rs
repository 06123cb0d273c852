//! The I/O shell around `Link`: one thread per direction moves packets from
//! one TUN to the other through the link model.
//!
//! Why this shape: each direction is independent (its own Link, delay line
//! and buffer pool), so two threads use both cores without sharing anything
//! but counters. Buffers are allocated and touched once up front, so the hot
//! loop never allocates or page-faults. The loop reads in batches, releases
//! what is due, and otherwise sleeps in ppoll until a packet arrives, the
//! next release is due, or a ~200 µs tick passes (to notice `stop`).
//!
//! With NIC offloads (`offload`), reads carry a `virtio_net_hdr`: a sender's
//! GSO batch arrives whole and is cut into datagrams here, each meeting the
//! link model alone; due datagrams of one flow are written as one coalesced
//! packet (GRO), every write with its checksum marked as handled.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::link::{DelayLine, Link, LinkConfig, LinkStats, Verdict};
use crate::offload::{self, VNET_HDR_LEN, VnetHdr, Wire};
use crate::tun::Tun;
use crate::weather::Weather;

/// Bytes per buffer slot: an MTU-1500 packet with room to spare.
pub const SLOT_BYTES: usize = 2048;
/// Longest sleep, so a stop request or a due release is seen quickly.
const TICK: Duration = Duration::from_micros(200);
/// Packets read per wake-up before due packets are released.
const BATCH: usize = 64;

/// Counters of one direction, readable while the thread runs.
#[derive(Debug, Default)]
pub struct SharedStats {
    forwarded_packets: AtomicU64,
    forwarded_bytes: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_no_buffer: AtomicU64,
    write_errors: AtomicU64,
    max_queue_bytes: AtomicU64,
    max_late_us: AtomicU64,
    gso_batches: AtomicU64,
    gro_batches: AtomicU64,
    malformed: AtomicU64,
}

impl SharedStats {
    fn store(&self, s: &LinkStats) {
        let r = Ordering::Relaxed;
        self.forwarded_packets.store(s.forwarded_packets, r);
        self.forwarded_bytes.store(s.forwarded_bytes, r);
        self.dropped_loss.store(s.dropped_loss, r);
        self.dropped_queue.store(s.dropped_queue, r);
        self.dropped_no_buffer.store(s.dropped_no_buffer, r);
        self.write_errors.store(s.write_errors, r);
        self.max_queue_bytes.store(s.max_queue_bytes, r);
        self.max_late_us.store(s.max_late_us, r);
        self.gso_batches.store(s.gso_batches, r);
        self.gro_batches.store(s.gro_batches, r);
        self.malformed.store(s.malformed, r);
    }

    pub fn load(&self) -> LinkStats {
        let r = Ordering::Relaxed;
        LinkStats {
            forwarded_packets: self.forwarded_packets.load(r),
            forwarded_bytes: self.forwarded_bytes.load(r),
            dropped_loss: self.dropped_loss.load(r),
            dropped_queue: self.dropped_queue.load(r),
            dropped_no_buffer: self.dropped_no_buffer.load(r),
            write_errors: self.write_errors.load(r),
            max_queue_bytes: self.max_queue_bytes.load(r),
            max_late_us: self.max_late_us.load(r),
            gso_batches: self.gso_batches.load(r),
            gro_batches: self.gro_batches.load(r),
            malformed: self.malformed.load(r),
        }
    }
}

/// Fixed pool of packet buffers, handed out by slot index.
struct Pool {
    memory: Vec<u8>,
    free: Vec<u32>,
}

impl Pool {
    fn new(slots: usize) -> Self {
        let mut memory = vec![0u8; slots * SLOT_BYTES];
        // calloc'd memory is mapped lazily; touch every page now so the
        // forwarding loop never takes a page fault.
        for i in (0..memory.len()).step_by(4096) {
            // SAFETY: i < memory.len(); volatile so the store is not elided.
            unsafe { std::ptr::write_volatile(memory.as_mut_ptr().add(i), 1) };
        }
        let free = (0..slots as u32).rev().collect();
        Self { memory, free }
    }

    fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    fn put(&mut self, slot: u32) {
        self.free.push(slot);
    }

    fn slot(&self, slot: u32) -> &[u8] {
        let start = slot as usize * SLOT_BYTES;
        &self.memory[start..start + SLOT_BYTES]
    }

    fn slot_mut(&mut self, slot: u32) -> &mut [u8] {
        let start = slot as usize * SLOT_BYTES;
        &mut self.memory[start..start + SLOT_BYTES]
    }
}

/// One direction: `from` TUN → link model → `to` TUN.
struct Direction {
    from: Arc<Tun>,
    to: Arc<Tun>,
    link: Link,
    line: DelayLine<(u32, u16)>,
    pool: Pool,
    shared: Arc<SharedStats>,
    stop: Arc<AtomicBool>,
    /// NIC offloads: both TUNs speak `virtio_net_hdr`.
    offload: bool,
    /// Packets due in this round (offload only: coalesced before writing).
    due: Vec<(u32, u16)>,
    /// Outage and NAT, shared with the other direction and the lab.
    weather: Arc<Weather>,
    /// Site to cloud (the NAT rewrites sources this way, destinations back).
    outbound: bool,
}

impl Direction {
    fn run(mut self) {
        // Default timer slack (50 µs) would blur the release times.
        // SAFETY: prctl with integer arguments affects only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        // A real link is not descheduled by a compiler on the same box: run
        // this thread at nice -10 (best effort; on Linux nice is per thread).
        // SAFETY: setpriority on the calling thread (who = 0).
        unsafe { libc::setpriority(libc::PRIO_PROCESS as _, 0, -10) };
        // Offloaded reads can be a whole GSO batch (up to 64 KiB of IP).
        let mut scratch = vec![
            0u8;
            if self.offload {
                65_536 + VNET_HDR_LEN
            } else {
                SLOT_BYTES
            }
        ];
        while !self.stop.load(Ordering::Relaxed) {
            let read_any = if self.offload {
                self.read_batch_offloaded(&mut scratch)
            } else {
                self.read_batch(&mut scratch)
            };
            let now = Instant::now();
            if let Some(due) = self.line.next_release().filter(|at| *at <= now) {
                let late_us = (now - due).as_micros() as u64;
                let stats = self.link.stats_mut();
                stats.max_late_us = stats.max_late_us.max(late_us);
            }
            if self.offload {
                self.release_offloaded(now);
            } else {
                while let Some((slot, len)) = self.line.pop_due(now) {
                    if self
                        .to
                        .write(&self.pool.slot(slot)[..len as usize])
                        .is_err()
                    {
                        self.link.stats_mut().write_errors += 1;
                    }
                    self.pool.put(slot);
                }
            }
            self.shared.store(self.link.stats());
            if !read_any {
                let wait = self
                    .line
                    .next_release()
                    .map_or(TICK, |at| at.saturating_duration_since(now).min(TICK));
                if !wait.is_zero() {
                    wait_readable(self.from.raw_fd(), wait);
                }
            }
        }
        self.shared.store(self.link.stats());
    }

    /// Write every due packet to an offloading TUN, consecutive datagrams of
    /// one flow coalesced (`offload::Coalescer`) as a NIC driver's GRO would.
    fn release_offloaded(&mut self, now: Instant) {
        self.due.clear();
        while let Some(item) = self.line.pop_due(now) {
            self.due.push(item);
        }
        let mut first = 0;
        while first < self.due.len() {
            let packet = |i: usize| {
                let (slot, len) = self.due[i];
                &self.pool.slot(slot)[..usize::from(len)]
            };
            let mut gro = offload::Coalescer::default();
            let mut end = first;
            while end < self.due.len() && gro.offer(packet(end)) {
                end += 1;
            }
            let written = if end - first >= 2 {
                let (vnet, headers) = gro.headers(packet(first));
                let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + end - first);
                parts.push(&vnet);
                parts.push(&headers);
                parts.extend((first..end).map(|i| offload::udp_payload(packet(i))));
                self.link.stats_mut().gro_batches += 1;
                self.to.write_parts(&parts)
            } else {
                end = first + 1;
                let one = packet(first);
                self.to.write_parts(&[&offload::delivered_header(one), one])
            };
            if written.is_err() {
                self.link.stats_mut().write_errors += 1;
            }
            first = end;
        }
        for &(slot, _) in &self.due {
            self.pool.put(slot);
        }
    }

    /// Read up to BATCH packets from an offloading TUN, each possibly a GSO
    /// batch of datagrams; true if any arrived.
    fn read_batch_offloaded(&mut self, scratch: &mut [u8]) -> bool {
        let mut read_any = false;
        for _ in 0..BATCH {
            let n = match self.from.read(scratch) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            read_any = true;
            // An outage drops everything; offloaded labs have no NAT.
            if !self.weather.admit(&mut [], self.outbound) {
                continue;
            }
            let wire = VnetHdr::parse(&scratch[..n])
                .and_then(|hdr| Wire::new(&hdr, &scratch[VNET_HDR_LEN..n]));
            let wire = match wire {
                Ok(wire) => wire,
                Err(_) => {
                    self.link.stats_mut().malformed += 1;
                    continue;
                }
            };
            if wire.count() > 1 {
                self.link.stats_mut().gso_batches += 1;
            }
            let now = Instant::now();
            for index in 0..wire.count() {
                let Some(slot) = self.pool.take() else {
                    self.link.stats_mut().dropped_no_buffer += 1;
                    continue;
                };
                let out = self.pool.slot_mut(slot);
                if wire.datagram_len(index) > out.len() {
                    self.pool.put(slot);
                    self.link.stats_mut().malformed += 1;
                    continue;
                }
                let len = wire.write(index, out);
                match self.link.on_packet(now, len) {
                    Verdict::Forward { release_at } => {
                        self.line.push(release_at, (slot, len as u16))
                    }
                    Verdict::DropLoss | Verdict::DropQueue => self.pool.put(slot),
                }
            }
        }
        read_any
    }

    /// Read up to BATCH packets; true if any arrived.
    fn read_batch(&mut self, scratch: &mut [u8]) -> bool {
        let mut read_any = false;
        for _ in 0..BATCH {
            let Some(slot) = self.pool.take() else {
                // Out of buffers: drain and count, so the TUN never stalls.
                match self.from.read(scratch) {
                    Ok(_) => {
                        read_any = true;
                        self.link.stats_mut().dropped_no_buffer += 1;
                        continue;
                    }
                    Err(_) => break,
                }
            };
            match self.from.read(self.pool.slot_mut(slot)) {
                Ok(len) => {
                    read_any = true;
                    if !self
                        .weather
                        .admit(&mut self.pool.slot_mut(slot)[..len], self.outbound)
                    {
                        self.pool.put(slot);
                        continue;
                    }
                    match self.link.on_packet(Instant::now(), len) {
                        Verdict::Forward { release_at } => {
                            self.line.push(release_at, (slot, len as u16))
                        }
                        Verdict::DropLoss | Verdict::DropQueue => self.pool.put(slot),
                    }
                }
                Err(e) => {
                    self.pool.put(slot);
                    if e.kind() != io::ErrorKind::Interrupted {
                        break;
                    }
                }
            }
        }
        read_any
    }
}

/// Sleep until `fd` is readable or `timeout` passes (µs resolution).
fn wait_readable(fd: libc::c_int, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
    unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
}

/// Both directions of a lab, running until dropped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    up: Arc<SharedStats>,
    down: Arc<SharedStats>,
}

impl Forwarder {
    /// Start forwarding: `site` → `cloud` through `up`, back through `down`.
    /// `slots` buffers are pre-allocated per direction.
    /// `offload`: both TUNs were created with offloads (`Tun::create`).
    pub fn start(
        site: Arc<Tun>,
        cloud: Arc<Tun>,
        up: LinkConfig,
        down: LinkConfig,
        slots: usize,
        offload: bool,
        weather: Arc<Weather>,
    ) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut forwarder = Self {
            stop: stop.clone(),
            threads: Vec::new(),
            up: Arc::default(),
            down: Arc::default(),
        };
        let plan = [
            (site.clone(), cloud.clone(), up, forwarder.up.clone(), "up"),
            (cloud, site, down, forwarder.down.clone(), "down"),
        ];
        for (from, to, config, shared, label) in plan {
            let outbound = label == "up";
            let direction = Direction {
                from,
                to,
                link: Link::new(config)?,
                line: DelayLine::with_capacity(slots),
                pool: Pool::new(slots),
                shared,
                stop: stop.clone(),
                offload,
                due: Vec::with_capacity(slots),
                weather: weather.clone(),
                outbound,
            };
            // On error, `forwarder` drops here and stops the started thread.
            let handle = std::thread::Builder::new()
                .name(format!("linklab-{label}"))
                .spawn(move || direction.run())
                .context("forwarder: spawn")?;
            forwarder.threads.push(handle);
        }
        Ok(forwarder)
    }

    /// Counters (site → cloud, cloud → site).
    pub fn stats(&self) -> (LinkStats, LinkStats) {
        (self.up.load(), self.down.load())
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}
