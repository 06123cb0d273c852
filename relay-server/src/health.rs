//! `/healthz` and Prometheus `/metrics` on a separate TCP port, for load-balancer
//! probes and monitoring. A deliberately tiny HTTP/1.1 responder: GET only, one
//! request per connection, bounded request size and time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::{self, Metrics};
use crate::server::Shared;

pub const HEALTH_PATH: &str = "/healthz";

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot bind health endpoint {addr}: {e}"))
}

/// Serves until shutdown; reports 503 on /healthz once shutdown began, so a load
/// balancer drains this relay while its transfers finish.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => {
                if *shutdown.borrow() { continue_draining(&listener, &shared).await; return; }
                continue;
            }
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = shared.clone();
        let draining = *shutdown.borrow();
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), respond(stream, &shared, draining))
                    .await;
        });
    }
}

/// After shutdown starts, keep answering (503 on /healthz) for the grace period's sake.
async fn continue_draining(listener: &TcpListener, shared: &Arc<Shared>) {
    let deadline = tokio::time::sleep(Duration::from_secs(30));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            a = listener.accept() => {
                if let Ok((stream, _)) = a {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(5), respond(stream, &shared, true)).await;
                    });
                }
            }
        }
    }
}

async fn respond(
    mut stream: tokio::net::TcpStream,
    shared: &Shared,
    draining: bool,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    // Read until the end of the headers (or the buffer is full: then it's refused).
    while n < buf.len() {
        let m = stream.read(&mut buf[n..]).await?;
        if m == 0 {
            break;
        }
        n += m;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let (status, ctype, body) = match (method, path) {
        ("GET", HEALTH_PATH) if draining => (
            "503 Service Unavailable",
            "text/plain",
            "draining\n".to_string(),
        ),
        ("GET", HEALTH_PATH) => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", render(shared)),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(resp.as_bytes()).await?;
    stream.shutdown().await
}

/// Prometheus text format.
pub fn render(shared: &Shared) -> String {
    let m = &shared.metrics;
    let rows: [(&str, &str, &str, &AtomicU64); 6] = [
        (
            "blob_relay_bytes_received_total",
            "counter",
            "Bytes received from clients.",
            &m.bytes_received,
        ),
        (
            "blob_relay_bytes_staged_total",
            "counter",
            "Bytes in blocks Azure accepted (Put Block succeeded).",
            &m.bytes_staged,
        ),
        (
            "blob_relay_bytes_committed_total",
            "counter",
            "Bytes in committed, verified blobs.",
            &m.bytes_committed,
        ),
        (
            "blob_relay_transfers_active",
            "gauge",
            "Transfers in progress.",
            &m.transfers_active,
        ),
        (
            "blob_relay_transfers_committed_total",
            "counter",
            "Blobs committed after verification.",
            &m.transfers_committed,
        ),
        (
            "blob_relay_transfers_failed_total",
            "counter",
            "Transfers rejected or failed (nothing committed).",
            &m.transfers_failed,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, v) in rows {
        metrics::render_value(&mut out, name, kind, help, Metrics::get(v));
    }
    metrics::render_retries(&mut out, &m.azure_retries);
    let budget = &shared.budget;
    metrics::render_value(
        &mut out,
        "blob_relay_budget_bytes",
        "gauge",
        "Memory budget for block buffers.",
        budget.total_bytes(),
    );
    metrics::render_value(
        &mut out,
        "blob_relay_budget_in_use_bytes",
        "gauge",
        "Block buffers in use.",
        budget.in_use_bytes(),
    );
    crate::admission::render_metrics(&shared.admission, budget, &mut out);
    metrics::render_value(
        &mut out,
        "blob_relay_storage_requests_total",
        "counter",
        "Storage requests sent (retries included).",
        Metrics::get(&m.storage_requests),
    );
    m.commit_seconds.render(
        "blob_relay_commit_seconds",
        "Time to verify and commit a blob (hash check, Put Block List and its retries, reading back its properties), per committed blob.",
        &mut out,
    );
    out
}
