//! A storage region in front of Azurite: every storage request waits a fixed
//! extra latency, and each connection's upload is limited to a rate.
//!
//! Why: Azurite in the cloud namespace answers in well under a millisecond,
//! real Azure in 10–30 ms per request with per-connection throughput limits.
//! Small files cost requests, so loopback storage flatters whoever makes the
//! most of them. Why not the test suite's fault proxy (`relay_tests::proxy`):
//! it closes the connection after every request, which across the emulated
//! WAN would cost the direct uploaders a TCP handshake per request (unlike
//! Azure, which keeps connections alive). This proxy works on TCP and keeps
//! each connection as it is: what the client sends is held back `request_ms`
//! (so every request/response exchange gets `request_ms` longer), paced at
//! `conn_mbit`; answers pass straight through. It forwards bytes only, and
//! buffers at most `CHUNKS` reads per connection.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use linklab::{Lab, Side};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Reads in flight per connection and direction (each up to `CHUNK` bytes).
const CHUNKS: usize = 256;
const CHUNK: usize = 64 << 10;

/// The storage region to emulate, as written in results.json.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelaySpec {
    /// Added to every request (client → storage direction).
    pub request_ms: f64,
    /// Upload rate limit per TCP connection, Mbit/s (None: unlimited).
    pub conn_mbit: Option<f64>,
}

impl DelaySpec {
    /// `MS` or `MS/MBIT`, e.g. `20` or `20/480`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let (ms, mbit) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let request_ms: f64 = ms
            .trim()
            .parse()
            .with_context(|| format!("storage delay {s:?}: bad milliseconds"))?;
        let conn_mbit = match mbit {
            Some(m) => Some(
                m.trim()
                    .parse::<f64>()
                    .with_context(|| format!("storage delay {s:?}: bad Mbit/s"))?,
            ),
            None => None,
        };
        if !(0.0..=10_000.0).contains(&request_ms) || conn_mbit.is_some_and(|m| m <= 0.0) {
            bail!("storage delay {s:?}: 0..=10000 ms, rate > 0");
        }
        Ok(Self {
            request_ms,
            conn_mbit,
        })
    }

    pub fn label(&self) -> String {
        match self.conn_mbit {
            Some(m) => format!(
                "storage +{} ms, {} Mbit/s per connection",
                self.request_ms, m
            ),
            None => format!("storage +{} ms", self.request_ms),
        }
    }
}

/// The running proxy; stops accepting when dropped, and the drop returns only
/// once its port is free again (the next run binds it at once: with the
/// stand-in storage, which starts in milliseconds, it came within the
/// accept loop's 200 ms and found the port taken). Open connections end with
/// the proxy's runtime.
pub struct DelayProxy {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl DelayProxy {
    /// Listens on `0.0.0.0:port` inside the cloud namespace and forwards to
    /// `127.0.0.1:upstream` there.
    pub fn start(lab: &Lab, port: u16, upstream: u16, spec: DelaySpec) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        // The runtime's threads are started from this thread, so they share its
        // network namespace: the listener and upstream sockets live in `cloud`.
        let thread = lab.thread_in(Side::Cloud, move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("tokio runtime")?;
            rt.block_on(async move {
                let bound =
                    TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))).await;
                let listener = match bound {
                    Ok(l) => {
                        let _ = ready_tx.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("bind port {port}: {e}")));
                        return Ok(());
                    }
                };
                while !s.load(Ordering::SeqCst) {
                    let accepted =
                        tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
                    if let Ok(Ok((sock, _))) = accepted {
                        tokio::spawn(serve(sock, upstream, spec));
                    }
                }
                Ok(())
            })
        })?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Self {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => bail!("storage delay proxy: {e}"),
            Err(_) => bail!("storage delay proxy did not start"),
        }
    }
}

async fn serve(client: TcpStream, upstream: u16, spec: DelaySpec) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = delayed_copy(cr, &mut sw, spec);
    let down = async move {
        let mut cw = cw;
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// Copies `r` to `w`, each read released `request_ms` after it arrived and
/// paced at `conn_mbit`.
async fn delayed_copy<R, W>(mut r: R, w: &mut W, spec: DelaySpec)
where
    R: AsyncReadExt + Unpin + Send + 'static,
    W: AsyncWriteExt + Unpin,
{
    let delay = Duration::from_secs_f64(spec.request_ms / 1000.0);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS);
    let reader = tokio::spawn(async move {
        loop {
            let mut buf = vec![0u8; CHUNK];
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.send((Instant::now() + delay, buf)).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut next_free = Instant::now();
    while let Some((due, chunk)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if let Some(mbit) = spec.conn_mbit {
            // Token-bucket of depth zero: the chunk may leave once the link
            // has sent the previous ones at `mbit`.
            let now = Instant::now();
            next_free = next_free.max(now);
            tokio::time::sleep_until(next_free).await;
            next_free += Duration::from_secs_f64(chunk.len() as f64 * 8.0 / (mbit * 1e6));
        }
        if w.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
    reader.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let s = DelaySpec::parse("20").expect("valid");
        assert_eq!((s.request_ms, s.conn_mbit), (20.0, None));
        let s = DelaySpec::parse("20/480").expect("valid");
        assert_eq!(s.conn_mbit, Some(480.0));
        assert!(DelaySpec::parse("x").is_err());
        assert!(DelaySpec::parse("20/0").is_err());
        assert!(DelaySpec::parse("-1").is_err());
    }

    #[tokio::test]
    async fn delays_and_paces_what_the_client_sends() {
        // An echo server: the answer comes back only after the delayed request.
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = echo.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let front = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = front.local_addr().expect("addr");
        let spec = DelaySpec {
            request_ms: 50.0,
            conn_mbit: Some(8.0),
        };
        tokio::spawn(async move {
            while let Ok((s, _)) = front.accept().await {
                tokio::spawn(serve(s, port, spec));
            }
        });
        let mut c = TcpStream::connect(addr).await.expect("connect");
        // 100 KB at 8 Mbit/s is 100 ms of pacing, plus the 50 ms delay: the echo
        // cannot be complete before 150 ms (a lower bound; an upper one would
        // depend on the machine's load).
        let body = vec![7u8; 100_000];
        let t0 = Instant::now();
        c.write_all(&body).await.expect("write");
        let mut got = vec![0u8; body.len()];
        c.read_exact(&mut got).await.expect("read");
        assert_eq!(got, body);
        assert!(
            t0.elapsed() >= Duration::from_millis(145),
            "{:?}",
            t0.elapsed()
        );
    }
}
