//! QUIC throughput tool for transport work: one quinn server, one client, bulk data
//! on N streams, nothing else (no Azure, no hashing), so what it measures is the
//! transport alone: goodput, packets sent/lost, congestion events, window, RTT, and
//! CPU seconds on both ends. Run the two halves in the WAN lab's namespaces
//! (docs/TRANSPORT.md has the script):
//!
//! ```sh
//! ip netns exec brl-cloud-… quicperf server --listen 10.77.0.2:4500
//! ip netns exec brl-site-…  quicperf client --to 10.77.0.2:4500 --seconds 20 --congestion relay
//! ```
//! The client prints one JSON line. Both use `relay_transport::quic::Windows::transport()`,
//! exactly what relay-client and relay-server use.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_client::relay::connect::{Connector, Trust};
use relay_transport::congestion::{PathEstimate, PathObserver};
use relay_transport::quic::{Congestion, PathMemory, Windows, bind_udp, parse_rate_mbit};

const USAGE: &str = "usage:
  quicperf server --listen ADDR [--congestion C] [--udp-buffer-mib N]
  quicperf client --to ADDR [--seconds S] [--streams N] [--congestion C]
                  [--max-rate MBIT] [--fair] [--udp-buffer-mib N] [--progress]
                  [--warm MBIT@RTT_MS] [--no-probe-train]
C: relay | cubic | bbr | newreno
--warm: start warm, as if an earlier connection had measured MBIT at RTT_MS
        (relay-client's path cache does this between runs)
--no-probe-train: a cold start without the packet train (plain slow start)";

struct Args {
    server: bool,
    addr: Option<SocketAddr>,
    seconds: f64,
    streams: usize,
    windows: Windows,
    udp_buffer: usize,
    progress: bool,
    warm: Option<PathEstimate>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let role = it.next().ok_or(USAGE)?;
    let mut a = Args {
        server: match role.as_str() {
            "server" => true,
            "client" => false,
            _ => return Err(USAGE.into()),
        },
        addr: None,
        seconds: 20.0,
        streams: 1,
        windows: Windows::default(),
        udp_buffer: 16 << 20,
        progress: false,
        warm: None,
    };
    while let Some(flag) = it.next() {
        if flag == "--fair" {
            a.windows.fair = true;
            continue;
        }
        if flag == "--progress" {
            a.progress = true;
            continue;
        }
        if flag == "--no-probe-train" {
            a.windows.probe_train = false;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{flag}: bad number {v}"))
        };
        match flag.as_str() {
            "--listen" | "--to" => a.addr = Some(v.parse().map_err(|e| format!("{flag}: {e}"))?),
            "--seconds" => a.seconds = num(&v)?,
            "--streams" => a.streams = num(&v)?.max(1.0) as usize,
            "--congestion" => {
                a.windows.congestion = v.parse::<Congestion>().map_err(|e| e.to_string())?
            }
            "--max-rate" => {
                a.windows.max_rate_mbit = Some(parse_rate_mbit(&v).map_err(|e| e.to_string())?)
            }
            "--udp-buffer-mib" => a.udp_buffer = (num(&v)? as usize) << 20,
            "--warm" => {
                let (mbit, rtt) = v.split_once('@').ok_or("--warm: MBIT@RTT_MS")?;
                a.warm = Some(PathEstimate {
                    bandwidth: (num(mbit)? * 1e6 / 8.0) as u64,
                    min_rtt: Duration::from_secs_f64(num(rtt)? / 1e3),
                });
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(a)
}

/// CPU seconds (user + system) this process used so far.
fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[tokio::main]
async fn main() {
    relay_transport::install_crypto_provider();
    let res = match parse_args() {
        Ok(a) if a.server => server(a).await,
        Ok(a) => client(a).await,
        Err(e) => Err(e),
    };
    if let Err(e) = res {
        eprintln!("quicperf: {e}");
        std::process::exit(1);
    }
}

async fn server(a: Args) -> Result<(), String> {
    let listen = a.addr.ok_or("--listen is required")?;
    let identity = relay_server::connection::tls::Identity::self_signed(vec!["localhost".into()])
        .map_err(|e| e.to_string())?;
    let mut cfg =
        quinn::ServerConfig::with_crypto(identity.server_crypto().map_err(|e| e.to_string())?);
    cfg.transport_config(Arc::new(a.windows.transport()));
    let socket = bind_udp(listen, a.udp_buffer).map_err(|e| format!("bind {listen}: {e}"))?;
    let endpoint = relay_transport::quic::endpoint(Some(cfg), socket).map_err(|e| e.to_string())?;
    eprintln!("quicperf: listening on {listen}");
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok((send, recv)) = conn.accept_bi().await {
                tokio::spawn(sink(send, recv));
            }
        });
    }
    Ok(())
}

/// Reads one stream to its end; answers `bytes seconds cpu_seconds`, timed from
/// its first byte (the handshake and the client's start-up are not the link's).
async fn sink(mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
    let mut bytes = 0u64;
    let mut first: Option<(Instant, f64)> = None;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => {
                if first.is_none() {
                    first = Some((Instant::now(), cpu_seconds()));
                }
                bytes += n as u64;
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("quicperf: stream: {e}");
                return;
            }
        }
    }
    let (t0, c0) = first.unwrap_or((Instant::now(), cpu_seconds()));
    let reply = format!(
        "{bytes} {} {}",
        t0.elapsed().as_secs_f64(),
        cpu_seconds() - c0
    );
    let _ = send.write_all(reply.as_bytes()).await;
    let _ = send.finish();
    let _ = send.stopped().await;
}

async fn client(a: Args) -> Result<(), String> {
    let to = a.addr.ok_or("--to is required")?;
    let observer = Arc::new(PathObserver::default());
    let memory = PathMemory {
        warm: a.warm,
        observer: Some(observer.clone()),
    };
    let connector = Connector::with_transport(
        &Trust::Insecure,
        a.windows.transport_with(memory),
        a.udp_buffer,
        to.is_ipv6(),
    )
    .map_err(|e| e.to_string())?;
    let conn = connector
        .connect(to, "localhost", Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(a.seconds);
    let mut tasks = Vec::new();
    for _ in 0..a.streams {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
            // Random bytes, so nothing on the path could compress them.
            let chunk: Vec<u8> = (0..1 << 20).map(|_| rand::random::<u8>()).collect();
            let chunk = bytes::Bytes::from(chunk);
            while Instant::now() < deadline {
                send.write_chunk(chunk.clone())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            send.finish().map_err(|e| e.to_string())?;
            let reply = recv
                .read_to_end(256)
                .await
                .map_err(|e| format!("reply: {e}"))?;
            let text = String::from_utf8_lossy(&reply).to_string();
            let f: Vec<f64> = text
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            match f.as_slice() {
                [b, s, c] => Ok::<_, String>((*b, *s, *c)),
                _ => Err(format!("bad reply {text:?}")),
            }
        }));
    }
    if a.progress {
        let conn = conn.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let mut last = conn.stats();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let s = conn.stats();
                let sent = s.path.sent_packets - last.path.sent_packets;
                let lost = s.path.lost_packets - last.path.lost_packets;
                let mbit = (s.udp_tx.bytes - last.udp_tx.bytes) as f64 * 8.0 / 1e6;
                eprintln!(
                    "t={:4.1}s tx={mbit:6.1}Mbit/s cwnd={:8} rtt={:6.1}ms sent={sent} lost={lost}",
                    start.elapsed().as_secs_f64(),
                    s.path.cwnd,
                    s.path.rtt.as_secs_f64() * 1e3,
                );
                last = s;
            }
        });
    }
    let (mut bytes, mut secs, mut server_cpu) = (0.0, 0.0f64, 0.0f64);
    for t in tasks {
        let (b, s, c) = t.await.map_err(|e| e.to_string())??;
        bytes += b;
        secs = secs.max(s);
        server_cpu = server_cpu.max(c);
    }
    let client_cpu = cpu_seconds() - cpu0;
    let elapsed = t0.elapsed().as_secs_f64();
    let s = conn.stats();
    let goodput = bytes * 8.0 / secs.max(1e-9) / 1e6;
    let per100 = |cpu: f64, secs: f64| cpu / secs.max(1e-9) * 100.0 / goodput.max(1e-9);
    let out = serde_json::json!({
        "congestion": format!("{:?}", a.windows.congestion).to_lowercase(),
        "fair": a.windows.fair,
        "max_rate_mbit": a.windows.max_rate_mbit,
        "streams": a.streams,
        "bytes": bytes as u64,
        "seconds": secs,
        "goodput_mbit": goodput,
        "sent_packets": s.path.sent_packets,
        "lost_packets": s.path.lost_packets,
        "lost_ratio": s.path.lost_packets as f64 / s.path.sent_packets.max(1) as f64,
        "congestion_events": s.path.congestion_events,
        "cwnd": s.path.cwnd,
        "rtt_ms": s.path.rtt.as_secs_f64() * 1e3,
        "mtu": s.path.current_mtu,
        "warm_start": observer.warm_started(),
        "train_mbit": observer.train_mbit(),
        "path_estimate_mbit": observer.estimate().map(|e| e.bandwidth as f64 * 8.0 / 1e6),
        "path_min_rtt_ms": observer.estimate().map(|e| e.min_rtt.as_secs_f64() * 1e3),
        "client_cpu_cores_per_100mbit": per100(client_cpu, elapsed),
        "server_cpu_cores_per_100mbit": per100(server_cpu, secs),
    });
    println!("{out}");
    connector.close(Some(&conn)).await;
    Ok(())
}
