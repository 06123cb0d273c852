//! A tiny iperf: one TCP flow, congestion control pinned per socket.
//!
//! Why not iperf3: it is not installed here, and we need the congestion
//! control chosen per socket (TCP_CONGESTION), not per host. The sink times
//! the flow from first byte to EOF and sends its count back, so the sender
//! reports goodput as the receiver saw it (bytes still in send buffers at
//! the end are not counted as delivered).
//!
//! Wire: sender streams bytes, half-closes; sink replies with 16 bytes
//! (bytes received, u64 LE; nanoseconds first byte → EOF, u64 LE).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const CHUNK_BYTES: usize = 256 * 1024;

/// Result of one flow, as measured by the sink.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowReport {
    pub cc: String,
    pub bytes: u64,
    pub seconds: f64,
}

impl FlowReport {
    pub fn goodput_mbit(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds / 1e6
        } else {
            0.0
        }
    }

    pub fn to_json(&self, role: &str) -> String {
        format!(
            "{{\"role\":\"{role}\",\"cc\":\"{}\",\"bytes\":{},\"seconds\":{:.6},\"goodput_mbit\":{:.3}}}",
            self.cc,
            self.bytes,
            self.seconds,
            self.goodput_mbit()
        )
    }
}

/// Accept flows on `listen`, printing one JSON line per flow; with `once`,
/// return after the first.
pub fn sink(listen: SocketAddr, once: bool) -> anyhow::Result<()> {
    let listener =
        TcpListener::bind(listen).with_context(|| format!("tcp-sink: {listen}: bind"))?;
    loop {
        let (stream, peer) = listener.accept().context("tcp-sink: accept")?;
        match receive(stream) {
            Ok(report) => println!("{}", report.to_json("sink")),
            Err(e) => eprintln!("linklab: tcp-sink: {peer}: {e:#}"),
        }
        if once {
            return Ok(());
        }
    }
}

/// Drain one flow, then send the count back (the sink's work for one
/// accepted connection; wanbench runs it beside its own listener).
pub fn receive(mut stream: TcpStream) -> anyhow::Result<FlowReport> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut bytes = 0u64;
    let mut first: Option<Instant> = None;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                first.get_or_insert_with(Instant::now);
                bytes += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("read"),
        }
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let mut reply = [0u8; 16];
    reply[..8].copy_from_slice(&bytes.to_le_bytes());
    reply[8..].copy_from_slice(&((seconds * 1e9) as u64).to_le_bytes());
    stream.write_all(&reply).context("reply")?;
    // The receiver does not know the sender's congestion control.
    Ok(FlowReport {
        cc: String::new(),
        bytes,
        seconds,
    })
}

/// Send for `seconds` to `to` with congestion control `cc`; returns the
/// sink's measurement. Retries the connect for up to 30 s (sink starting on a
/// busy machine).
pub fn send(to: SocketAddr, seconds: f64, cc: &str) -> anyhow::Result<FlowReport> {
    if !(seconds.is_finite() && seconds > 0.0) {
        bail!("tcp-send: --seconds must be > 0");
    }
    let mut stream = connect_pinned(to, cc)?;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let buf = vec![0x5au8; CHUNK_BYTES];
    while Instant::now() < deadline {
        stream.write_all(&buf).context("tcp-send: write")?;
    }
    finish(stream, cc)
}

/// Send exactly `bytes` to `to` with congestion control `cc`, as one request
/// body of that size would go; returns the sink's measurement and the time
/// from before the connect to the sink's answer (what an upload of those bytes
/// over one fresh connection takes at best: handshake, slow start, the last
/// byte's arrival and an answer back).
pub fn send_bytes(to: SocketAddr, bytes: u64, cc: &str) -> anyhow::Result<(FlowReport, Duration)> {
    let t0 = Instant::now();
    let mut stream = connect_pinned(to, cc)?;
    let buf = vec![0x5au8; CHUNK_BYTES];
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left).map_or(CHUNK_BYTES, |l| l.min(CHUNK_BYTES));
        stream.write_all(&buf[..n]).context("tcp-send: write")?;
        left -= n as u64;
    }
    let report = finish(stream, cc)?;
    Ok((report, t0.elapsed()))
}

fn connect_pinned(to: SocketAddr, cc: &str) -> anyhow::Result<TcpStream> {
    let stream = connect_with_retry(to, Duration::from_secs(30))?;
    set_congestion_control(&stream, cc)?;
    let actual = congestion_control(&stream)?;
    if actual != cc {
        bail!("tcp-send: asked for congestion control {cc}, socket has {actual}");
    }
    Ok(stream)
}

/// Half-close and read the sink's count of what arrived.
fn finish(mut stream: TcpStream, cc: &str) -> anyhow::Result<FlowReport> {
    stream
        .shutdown(Shutdown::Write)
        .context("tcp-send: shutdown")?;
    // The sink answers once the last byte arrived; a lossy path may take a
    // while to drain the send buffer.
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .context("tcp-send: timeout")?;
    let mut reply = [0u8; 16];
    stream
        .read_exact(&mut reply)
        .context("tcp-send: read reply")?;
    let mut half = [0u8; 8];
    half.copy_from_slice(&reply[..8]);
    let bytes = u64::from_le_bytes(half);
    half.copy_from_slice(&reply[8..]);
    let nanos = u64::from_le_bytes(half);
    Ok(FlowReport {
        cc: cc.to_string(),
        bytes,
        seconds: nanos as f64 / 1e9,
    })
}

fn connect_with_retry(to: SocketAddr, patience: Duration) -> anyhow::Result<TcpStream> {
    let give_up = Instant::now() + patience;
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
            Ok(stream) => return Ok(stream),
            Err(e) if Instant::now() < give_up => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("tcp-send: {to}: connect")),
        }
    }
}

/// Pin the congestion control of one socket (e.g. "cubic", "bbr").
pub fn set_congestion_control(stream: &TcpStream, cc: &str) -> anyhow::Result<()> {
    // SAFETY: setsockopt reads cc.len() bytes from a valid buffer.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            cc.as_ptr().cast(),
            cc.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).with_context(|| {
            format!(
                "TCP_CONGESTION {cc} (available: see /proc/sys/net/ipv4/tcp_available_congestion_control)"
            )
        });
    }
    Ok(())
}

/// The congestion control a socket uses.
pub fn congestion_control(stream: &TcpStream) -> anyhow::Result<String> {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `name`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).context("getsockopt TCP_CONGESTION");
    }
    let name = &name[..(len as usize).min(name.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}
