//! quinn's runtime for both ends: Tokio's tasks, our socket (`udp`), and
//! connection timers with microsecond resolution (`timer`, which says why).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime};

use crate::timer::precise_timer;
use crate::udp::BatchingSocket;

/// Tokio's tasks, `BatchingSocket`s, and precise timers where the OS has them.
#[derive(Debug, Default)]
pub struct RelayRuntime;

impl Runtime for RelayRuntime {
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
        precise_timer(deadline)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        tokio::spawn(future);
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        Ok(Arc::new(BatchingSocket::new(socket)?))
    }
}
