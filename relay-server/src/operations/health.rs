//! `/healthz` and Prometheus `/metrics` on a separate TCP port, for load-balancer
//! probes and monitoring, served by hyper under the limits in `http`: GET only,
//! one request per connection, bounded connections and time. `/healthz` answers
//! 503 while the relay drains and while its last storage check (`probe`, run in
//! the background) failed, with the cause in the body.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use hyper::{Method, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::operations::http::{self, Limits, Page};
use crate::operations::probe::{Reachability, StorageHealth};
use crate::state::Shared;
use crate::telemetry::exposition::{self, Exposition, Kind};
use crate::telemetry::metrics::{self, Metrics};

pub const HEALTH_PATH: &str = "/healthz";

/// The health endpoint's address cannot be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind health endpoint {addr}: {source}")]
pub struct HealthBindError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, HealthBindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| HealthBindError { addr, source })
}

/// Serves until shutdown, then for 30 s more with 503 on /healthz, so a load
/// balancer drains this relay while its transfers finish.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    storage: Arc<StorageHealth>,
    shutdown: watch::Receiver<bool>,
) {
    serve_with(listener, shared, storage, shutdown, Limits::default()).await;
}

pub async fn serve_with(
    listener: TcpListener,
    shared: Arc<Shared>,
    storage: Arc<StorageHealth>,
    shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let draining = shutdown.clone();
    let handler = move |method: &Method, path: &str| {
        page(&shared, &storage.get(), *draining.borrow(), method, path)
    };
    http::serve(listener, limits, Arc::new(handler), shutdown).await;
}

/// The answer to one request.
fn page(
    shared: &Shared,
    storage: &Reachability,
    draining: bool,
    method: &Method,
    path: &str,
) -> Page {
    if method != Method::GET {
        return Page::text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    match path {
        HEALTH_PATH => health(storage, draining),
        "/metrics" => Page {
            status: StatusCode::OK,
            content_type: exposition::CONTENT_TYPE,
            body: exposition(shared, Some(storage)).encode(),
        },
        _ => Page::text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// First line: `ok`, `draining` or `storage unreachable`; then the storage
/// state. Not ready (503) when draining or when storage cannot be reached: this
/// relay could not commit anything, so a load balancer should send clients to
/// another. Before the first check ends the relay counts as ready.
pub fn health(storage: &Reachability, draining: bool) -> Page {
    let storage_line = match storage {
        Reachability::Unknown => "storage: not checked yet".to_string(),
        Reachability::Reachable => "storage: reachable".to_string(),
        Reachability::Unreachable(cause) => format!("storage: unreachable: {cause}"),
    };
    let (status, first) = match (draining, storage) {
        (true, _) => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
        (false, Reachability::Unreachable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "storage unreachable")
        }
        (false, _) => (StatusCode::OK, "ok"),
    };
    Page::text(status, format!("{first}\n{storage_line}\n"))
}

/// The `/metrics` page without the storage check (tests read it in-process).
pub fn render(shared: &Shared) -> String {
    exposition(shared, None).encode()
}

/// Every series, at 0 too, so dashboards and alerts see them from the start.
fn exposition(shared: &Shared, storage: Option<&Reachability>) -> Exposition {
    let m = &shared.metrics;
    let mut out = Exposition::default();
    crate::telemetry::version::render(&mut out);
    transfer_series(m, &mut out);
    download_series(m, &mut out);
    delete_series(m, &mut out);
    metrics::render_retries(&mut out, &m.azure_retries);
    m.rejections.render(&mut out);
    m.failures.render(&mut out);
    if let Some(entra) = &shared.sign_in.entra {
        entra.render(&mut out);
    }
    budget_series(shared, &mut out);
    crate::connection::admission::render_metrics(
        &shared.admission,
        shared.blocks_waiting(),
        &mut out,
    );
    storage_series(m, storage, &mut out);
    out
}

/// Bytes and transfers: received, staged, committed, active, failed.
fn transfer_series(m: &Metrics, out: &mut Exposition) {
    let rows: [(&str, Kind, &str, &AtomicU64); 6] = [
        (
            "blob_relay_bytes_received_total",
            Kind::Counter,
            "Bytes received from clients.",
            &m.bytes_received,
        ),
        (
            "blob_relay_bytes_staged_total",
            Kind::Counter,
            "Bytes in blocks Azure accepted (Put Block succeeded).",
            &m.bytes_staged,
        ),
        (
            "blob_relay_bytes_committed_total",
            Kind::Counter,
            "Bytes in committed, verified blobs.",
            &m.bytes_committed,
        ),
        (
            "blob_relay_transfers_active",
            Kind::Gauge,
            "Transfers in progress.",
            &m.transfers_active,
        ),
        (
            "blob_relay_transfers_committed_total",
            Kind::Counter,
            "Blobs committed after verification.",
            &m.transfers_committed,
        ),
        (
            "blob_relay_transfers_failed_total",
            Kind::Counter,
            "Transfers rejected or failed (nothing committed); by code and class in blob_relay_failures_total.",
            &m.transfers_failed,
        ),
    ];
    for (name, kind, help, v) in rows {
        out.value(name, kind, help, Metrics::get(v));
    }
}

/// Downloads and listings: started, sent, failed, bytes.
fn download_series(m: &Metrics, out: &mut Exposition) {
    let rows: [(&str, Kind, &str, &AtomicU64); 9] = [
        (
            "blob_relay_fetches_started_total",
            Kind::Counter,
            "Downloads whose Fetch was accepted (token, names and grant valid).",
            &m.fetches_started,
        ),
        (
            "blob_relay_fetches_completed_total",
            Kind::Counter,
            "Downloads whose every byte was sent (Sent written).",
            &m.fetches_completed,
        ),
        (
            "blob_relay_fetches_failed_total",
            Kind::Counter,
            "Downloads that ended without all their bytes (blob gone or changed, storage failure, client gone).",
            &m.fetches_failed,
        ),
        (
            "blob_relay_fetches_stalled_total",
            Kind::Counter,
            "Downloads dropped because the client stopped reading for the write timeout.",
            &m.fetches_stalled,
        ),
        (
            "blob_relay_bytes_sent_total",
            Kind::Counter,
            "Blob bytes written to download streams.",
            &m.bytes_sent,
        ),
        (
            "blob_relay_wire_bytes_sent_total",
            Kind::Counter,
            "Bytes that carried the blob bytes of download streams (below bytes_sent where downloads went compressed).",
            &m.wire_bytes_sent,
        ),
        (
            "blob_relay_listings_completed_total",
            Kind::Counter,
            "Listings sent to their end.",
            &m.listings_completed,
        ),
        (
            "blob_relay_listings_failed_total",
            Kind::Counter,
            "Listings that ended before their end (storage failure, no memory for a page, client gone).",
            &m.listings_failed,
        ),
        (
            "blob_relay_listings_stalled_total",
            Kind::Counter,
            "Listings dropped because the client did not take a page within the write timeout.",
            &m.listings_stalled,
        ),
    ];
    for (name, kind, help, v) in rows {
        out.value(name, kind, help, Metrics::get(v));
    }
}

/// Deletes, by how storage answered them (refused Deletes are counted with
/// every refused stream, by reason).
fn delete_series(m: &Metrics, out: &mut Exposition) {
    let rows: [(&str, &str, &AtomicU64); 4] = [
        (
            "blob_relay_deletes_deleted_total",
            "Deletes that removed the listed version of a blob.",
            &m.deletes_deleted,
        ),
        (
            "blob_relay_deletes_gone_total",
            "Deletes that found no blob of the name (gone already).",
            &m.deletes_gone,
        ),
        (
            "blob_relay_deletes_changed_total",
            "Deletes refused by If-Match: the blob was another version, and was kept.",
            &m.deletes_changed,
        ),
        (
            "blob_relay_deletes_failed_total",
            "Deletes storage failed (after the relay's retries) or refused.",
            &m.deletes_failed,
        ),
    ];
    for (name, help, v) in rows {
        out.value(name, Kind::Counter, help, Metrics::get(v));
    }
}

/// The block-buffer budget and what of it is in use.
fn budget_series(shared: &Shared, out: &mut Exposition) {
    let budget = &shared.limits.budget;
    out.value(
        "blob_relay_budget_bytes",
        Kind::Gauge,
        "Memory budget for block buffers.",
        budget.total_bytes(),
    );
    out.value(
        "blob_relay_budget_in_use_bytes",
        Kind::Gauge,
        "Block buffers in use.",
        budget.in_use_bytes(),
    );
}

/// Storage requests, commit times and, when known, the last storage check.
fn storage_series(m: &Metrics, storage: Option<&Reachability>, out: &mut Exposition) {
    out.value(
        "blob_relay_storage_requests_total",
        Kind::Counter,
        "Storage requests sent (retries included).",
        Metrics::get(&m.storage_requests),
    );
    out.histogram(
        "blob_relay_commit_seconds",
        "Time to verify and commit a blob (hash check, Put Block List and its retries), per committed blob.",
        &m.commit_seconds.snapshot(),
    );
    if let Some(storage) = storage {
        out.value(
            "blob_relay_storage_reachable",
            Kind::Gauge,
            "1 if the last storage check (every --storage-check-interval) succeeded, else 0.",
            u64::from(*storage == Reachability::Reachable),
        );
    }
}
