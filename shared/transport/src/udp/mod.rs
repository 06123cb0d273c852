//! The UDP socket under both ends' QUIC endpoint: quinn-udp's batched I/O (GSO,
//! GRO, ECN) with our own reactor registration, so that a busy socket is read on
//! a timer tick instead of waking its thread for every datagram (`policy`).
//!
//! quinn's Tokio socket registers for readable and writable events for its whole
//! life, so a receiving relay wakes, calls `epoll_wait` and `recvmmsg` about
//! once per datagram, which costs a large share of its CPU at high rates. Here:
//!
//! - reading registers with the reactor only while the policy waits per
//!   arrival, through a duplicate of the socket's descriptor that is dropped
//!   (deregistered) when the policy switches to ticks;
//! - writing never registers until a send would block (the socket's send
//!   buffer is full), so sent packets do not wake the thread either (an
//!   `EPOLLOUT` event each time the kernel frees one).

mod policy;

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use std::time::Instant;

use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncTimer, AsyncUdpSocket, UdpPoller};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::timer::precise_timer;

use policy::{ReceivePolicy, Wait};

/// A bound UDP socket for `quinn::Endpoint::new_with_abstract_socket`.
pub struct BatchingSocket {
    io: UdpSocket,
    state: UdpSocketState,
    receiver: Mutex<Receiver>,
    /// A send returned `WouldBlock`; pollers wait for the socket to drain.
    write_blocked: AtomicBool,
}

struct Receiver {
    policy: ReceivePolicy,
    /// Registered for readability (a duplicate of the socket) while waiting per
    /// arrival; `None` while reading on ticks.
    readable: Option<AsyncFd<UdpSocket>>,
    /// The tick timer (kept between ticks: it holds a registered timerfd).
    tick: Option<Pin<Box<dyn AsyncTimer>>>,
    /// The timer is set for the next tick.
    tick_armed: bool,
}

impl fmt::Debug for BatchingSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchingSocket")
            .field("io", &self.io)
            .field("write_blocked", &self.write_blocked)
            .finish_non_exhaustive()
    }
}

impl BatchingSocket {
    /// Takes a bound socket (see `quic::bind_udp`) and sets it non-blocking.
    /// Must be called inside a Tokio runtime.
    pub fn new(io: UdpSocket) -> io::Result<Self> {
        Self::with_policy(io, ReceivePolicy::default())
    }

    fn with_policy(io: UdpSocket, policy: ReceivePolicy) -> io::Result<Self> {
        io.set_nonblocking(true)?;
        let state = UdpSocketState::new((&io).into())?;
        Ok(Self {
            io,
            state,
            receiver: Mutex::new(Receiver {
                policy,
                readable: None,
                tick: None,
                tick_armed: false,
            }),
            write_blocked: AtomicBool::new(false),
        })
    }

    /// Whether the reader currently waits per arrival or on ticks.
    #[cfg(test)]
    fn receive_wait(&self) -> Wait {
        self.receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .policy
            .wait()
    }
}

impl AsyncUdpSocket for BatchingSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(WritablePoller {
            socket: self,
            registration: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let sent = self.state.send((&self.io).into(), transmit);
        if let Err(e) = &sent
            && e.kind() == io::ErrorKind::WouldBlock
        {
            self.write_blocked.store(true, Ordering::Release);
        }
        sent
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut receiver = self.receiver.lock().unwrap_or_else(PoisonError::into_inner);
        receiver.poll_recv(&self.io, &self.state, cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }
}

impl Receiver {
    /// Reads one batch (`recvmmsg`), or registers `cx` for the next arrival or
    /// tick. quinn calls this until it returns `Pending`, so a socket is always
    /// read until empty before its reader sleeps.
    fn poll_recv(
        &mut self,
        io: &UdpSocket,
        state: &UdpSocketState,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.policy.wait() {
                Wait::PerArrival => {
                    self.tick_armed = false;
                    let readable = match &mut self.readable {
                        Some(readable) => readable,
                        none => none.insert(register(io, Interest::READABLE)?),
                    };
                    let mut guard = ready!(readable.poll_read_ready(cx))?;
                    match guard.try_io(|fd| state.recv(fd.get_ref().into(), bufs, meta)) {
                        Ok(Ok(n)) => return Poll::Ready(Ok(self.received(n, meta))),
                        Ok(Err(e)) => return Poll::Ready(Err(e)),
                        // Empty: readiness is cleared; wait for the next arrival
                        // or, when arrivals are frequent, the next tick.
                        Err(_would_block) => self.drained(),
                    }
                }
                Wait::Tick => {
                    // Deregistered: arrivals no longer wake anyone.
                    self.readable = None;
                    if self.tick_armed
                        && let Some(tick) = &mut self.tick
                    {
                        ready!(tick.as_mut().poll(cx));
                    }
                    self.tick_armed = false;
                    match state.recv(io.into(), bufs, meta) {
                        Ok(n) => return Poll::Ready(Ok(self.received(n, meta))),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained(),
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
            }
        }
    }

    /// `n` messages were read into `meta`: tell the policy their bytes.
    fn received(&mut self, n: usize, meta: &[RecvMeta]) -> usize {
        self.policy
            .on_received(meta.iter().take(n).map(|m| m.len).sum());
        n
    }

    /// The socket is empty: ask the policy how to wait, and arm the tick if on ticks.
    fn drained(&mut self) {
        let now = Instant::now();
        if self.policy.on_drained(now) == Wait::Tick {
            let next = now + self.policy.tick();
            match &mut self.tick {
                Some(tick) => tick.as_mut().reset(next),
                none => *none = Some(precise_timer(next)),
            }
            self.tick_armed = true;
        }
    }
}

/// Registers a duplicate of the socket's descriptor with the reactor for
/// `interest`; dropping the result deregisters and closes the duplicate.
fn register(io: &UdpSocket, interest: Interest) -> io::Result<AsyncFd<UdpSocket>> {
    let duplicate = io.try_clone()?;
    // SAFETY: the AsyncFd owns `duplicate`, an open descriptor that stays open
    // (and is what `as_raw_fd` returns) until the AsyncFd is dropped.
    unsafe { AsyncFd::register_with_interest(duplicate, interest) }.map_err(|e| e.into_parts().1)
}

/// quinn's per-connection "may I send?" check. Ready unless the last send on
/// the socket would have blocked; then registered for writability until the
/// kernel reports room, and deregistered again on the next ready check.
struct WritablePoller {
    socket: Arc<BatchingSocket>,
    registration: Option<AsyncFd<UdpSocket>>,
}

impl fmt::Debug for WritablePoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WritablePoller")
            .field("registered", &self.registration.is_some())
            .finish()
    }
}

impl UdpPoller for WritablePoller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.socket.write_blocked.load(Ordering::Acquire) {
            this.registration = None;
            return Poll::Ready(Ok(()));
        }
        let registration = match &mut this.registration {
            Some(registration) => registration,
            none => none.insert(register(&this.socket.io, Interest::WRITABLE)?),
        };
        let mut guard = ready!(registration.poll_write_ready(cx))?;
        // Forget this event: if the next send blocks again, wait for a new one
        // (the kernel reports one each time it frees a sent packet).
        guard.clear_ready();
        this.socket.write_blocked.store(false, Ordering::Release);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests;
