//! The health listener's HTTP server: hyper's HTTP/1.1 server (one request per
//! connection) behind the guards a port open to probes needs. Connections are
//! bounded (a semaphore; one over the bound is closed at once, unread), each
//! request has a deadline, and accept errors (e.g. out of file descriptors) back
//! off from 10 ms to 1 s instead of spinning a core the uploads need.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// How the listener protects itself.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// From accept to the last byte of the response.
    pub request_timeout: Duration,
    /// How long the listener keeps answering after shutdown began (with 503 on
    /// /healthz, so load balancers drain the relay).
    pub drain: Duration,
    /// The first pause after an accept error, doubled on each further error.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            request_timeout: Duration::from_secs(5),
            drain: Duration::from_secs(30),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
        }
    }
}

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: String,
}

impl Page {
    pub fn text(status: StatusCode, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain",
            body: body.into(),
        }
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        let mut r = Response::new(Full::new(Bytes::from(self.body)));
        *r.status_mut() = self.status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        r
    }
}

/// Where connections come from: a TCP listener, or a scripted one in tests.
pub trait Accept: Send {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&mut self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Accept for TcpListener {
    type Io = TcpStream;
    async fn accept(&mut self) -> std::io::Result<TcpStream> {
        TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Pauses between failed accepts: `min`, doubling up to `max`; a success resets it.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            next: min,
        }
    }

    /// The pause after one more failure.
    pub fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.max);
        pause
    }

    pub fn succeeded(&mut self) {
        self.next = self.min;
    }
}

/// Serves `handler(method, path)` until `shutdown` turns true, then for
/// `limits.drain` more; connections still open then are dropped.
pub async fn serve<A, H>(
    mut acceptor: A,
    limits: Limits,
    handler: Arc<H>,
    shutdown: watch::Receiver<bool>,
) where
    A: Accept,
    H: Fn(&Method, &str) -> Page + Send + Sync + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = Backoff::new(limits.backoff_min, limits.backoff_max);
    let mut conns = JoinSet::new();
    let mut stop_rx = shutdown;
    let stop = async move {
        // A dropped sender means nobody can ask us to keep serving: stop too.
        let _ = stop_rx.wait_for(|s| *s).await;
        tokio::time::sleep(limits.drain).await;
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = acceptor.accept() => match accepted {
                Ok(io) => {
                    backoff.succeeded();
                    // Over the bound: dropping the socket closes it, nothing is read.
                    let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
                    let handler = handler.clone();
                    conns.spawn(async move {
                        let _ = tokio::time::timeout(
                            limits.request_timeout,
                            serve_connection(io, handler, limits.request_timeout),
                        )
                        .await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    let pause = backoff.failed();
                    tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64, "health endpoint: accept failed; pausing");
                    tokio::time::sleep(pause).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection<I, H>(io: I, handler: Arc<H>, header_timeout: Duration)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(&Method, &str) -> Page + Send + Sync + 'static,
{
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let page = handler(req.method(), req.uri().path());
        async move { Ok::<_, Infallible>(page.into_response()) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // One request per connection, as before: a probe has nothing to reuse.
        .keep_alive(false)
        // Our requests are one line and a few headers; hyper's smallest buffer.
        .max_buf_size(8 * 1024)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn backoff_doubles_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        let ms: Vec<u128> = (0..9).map(|_| b.failed().as_millis()).collect();
        assert_eq!(ms, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(), Duration::from_millis(10));
    }

    fn page(_: &Method, path: &str) -> Page {
        Page::text(StatusCode::OK, format!("{path}\n"))
    }

    /// An acceptor whose every accept fails, as when the process is out of file
    /// descriptors; counts the attempts.
    struct Failing(Arc<AtomicU64>);

    impl Accept for Failing {
        type Io = tokio::io::DuplexStream;
        async fn accept(&mut self) -> std::io::Result<Self::Io> {
            // A listener that spins would never let the clock advance: stop it
            // after far more attempts than a backing-off one makes, so the test fails
            // on its count rather than hanging.
            if self.0.fetch_add(1, Ordering::Relaxed) >= 1000 {
                std::future::pending::<()>().await;
            }
            Err(std::io::Error::from_raw_os_error(24)) // EMFILE
        }
    }

    /// Virtual time (paused clock): no wall-clock assumption. A listener that
    /// retried at once would make millions of attempts in these 10 s.
    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off_instead_of_spinning() {
        let attempts = Arc::new(AtomicU64::new(0));
        let (_keep, rx) = watch::channel(false);
        let serving = serve(
            Failing(attempts.clone()),
            Limits::default(),
            Arc::new(page),
            rx,
        );
        let r = tokio::time::timeout(Duration::from_secs(10), serving).await;
        assert!(r.is_err(), "serve ended on its own");
        // Attempts at 0, 10, 30, 70, 150, 310, 630 and 1270 ms (pauses of 10 ms
        // doubling), then one a second: 1270 + 8 × 1000 ≤ 10000, so 16 in 10 s.
        assert_eq!(attempts.load(Ordering::Relaxed), 16);
    }

    async fn get(addr: std::net::SocketAddr) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn connections_over_the_bound_are_closed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 2,
            // Long enough that the held connections cannot time out during the test.
            request_timeout: Duration::from_secs(600),
            ..Limits::default()
        };
        let (stop, rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, limits, Arc::new(page), rx));

        // Two slow peers hold both slots (connected, request not finished)...
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET /healthz HTTP/1.1\r\n")
                .await
                .expect("write");
            held.push(s);
        }
        // ...so the next ones are closed unread: a full request gets no answer.
        // (The listener accepts in order, so both slots are taken by then.)
        for _ in 0..3 {
            let answer = get(addr).await.unwrap_or_default();
            assert_eq!(answer, "", "served over the bound");
        }
        // The held connections are still served.
        let mut first = held.remove(0);
        first.write_all(b"host: x\r\n\r\n").await.expect("write");
        let mut out = String::new();
        first.read_to_string(&mut out).await.expect("read");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\n/healthz\n"), "{out}");
        // Once a slot is free again, a new probe is answered (the slot frees when
        // the server task ends, just after the client saw the end of the answer).
        let answered = async {
            loop {
                if let Ok(a) = get(addr).await
                    && a.starts_with("HTTP/1.1 200 OK\r\n")
                {
                    return a;
                }
                tokio::task::yield_now().await;
            }
        };
        let a = tokio::time::timeout(Duration::from_secs(30), answered)
            .await
            .expect("a free slot serves again");
        assert!(a.to_ascii_lowercase().contains("connection: close"), "{a}");
        let _ = stop.send(true);
        server.abort();
    }

    #[tokio::test]
    async fn a_silent_peer_is_dropped_at_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 1,
            request_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let (_stop, rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, limits, Arc::new(page), rx));
        // It sends nothing; the server closes it (read returns: EOF or a reset)
        // rather than holding the only slot forever.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf))
            .await
            .expect("closed by the deadline")
            .unwrap_or(0);
        // hyper may answer 408 before closing; either way no slot is kept.
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
        server.abort();
    }
}
