//! What one Put Blob costs the relay's process in CPU, through the relay's
//! storage writer (a writer per file, `BlobWriter::put_blob`: since
//! 2026-12-04 a request it builds itself, sent through the account's shared
//! Azure pipeline, with the request watch, retries and in-flight limit) and
//! as a request built by hand on the same HTTP client library (reqwest),
//! against the stand-in storage (`standin-storage`, its own process, so its
//! CPU is not counted). Alternated A B A B; prints µs of this process's CPU
//! per request (user + system, `getrusage`) and requests per second for each
//! round.
//!
//! A benchmark, not a test: it says how far the writer's Put Blob is from
//! the floor of such a path (docs/PERFORMANCE.md, "CPU per small file"). The
//! hand-built request here carries the same headers, SAS and body MD5, but
//! not the relay's request watch, retries or in-flight limit.
//!
//! `target/release/putblob-cost [--requests 20000] [--size 4096] [--in-flight 64] [--rounds 3]`

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use md5::{Digest, Md5};
use relay_proto::blob_name::SHA256_METADATA_KEY;
use relay_proto::id_key::SEAL_METADATA_KEY;
use relay_proto::protocol::Secret;
use relay_storage::account::Storage;
use relay_storage::blob::WriterOptions;
use relay_storage::credentials::{EntraSource, StorageAccess};
use relay_storage::store::{Commit, Condition};
use relay_tests::{DEV_ACCOUNT, DEV_KEY};

#[derive(Parser)]
struct Args {
    /// Put Blobs per round and variant.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Bytes per blob.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Rounds of (the relay's writer, by hand).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

/// The stand-in storage process; killed (by pid) and reaped on drop.
struct StandIn(Child);

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What every request carries: the body, its SHA-256 and a seal-sized string
/// (computed by the relay before its commit, so not part of the request's cost).
struct Blob {
    data: Bytes,
    sha256_hex: String,
    seal: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    relay_transport::install_crypto_provider();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let _standin = StandIn(
        Command::new(relay_tests::binary("standin-storage"))
            .arg("--listen")
            .arg(addr.to_string())
            .stdin(Stdio::null())
            .spawn()
            .context("start standin-storage (cargo build --release --workspace --bins)")?,
    );
    // One thread: every request's work, the HTTP client's included, is ours.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(&args, addr))
}

async fn run(args: &Args, addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            bail!("standin-storage did not start on {addr}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = format!("http://{addr}/{DEV_ACCOUNT}");
    let access =
        StorageAccess::resolve(&url, Some(&Secret(DEV_KEY.into())), EntraSource::default())
            .map_err(anyhow::Error::msg)?;
    let storage =
        Storage::new(access.clone(), &WriterOptions::default()).map_err(anyhow::Error::msg)?;
    storage.ensure_container("cost").await?;
    let sas = relay_storage::sas::account_sas(
        DEV_ACCOUNT,
        DEV_KEY,
        time::OffsetDateTime::now_utc(),
        time::Duration::hours(1),
    )?;
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let data: Vec<u8> = (0..args.size).map(|i| (i * 7 + 3) as u8).collect();
    let blob = Blob {
        sha256_hex: hex::encode(sha2::Sha256::digest(&data)),
        seal: "s".repeat(64),
        data: Bytes::from(data),
    };
    println!("| round | variant | requests | µs CPU per request | requests/s |");
    println!("|---|---|---:|---:|---:|");
    for round in 0..args.rounds {
        let n = args.requests;
        let names = |v: &'static str| (0..n).map(move |i| format!("{v}/{round}/{i}"));
        let (cpu, secs) = measure(args.in_flight, names("sdk"), |name| {
            sdk_put(&storage, name, &blob)
        })
        .await?;
        report(round, "relay writer", args.requests, cpu, secs);
        let (cpu, secs) = measure(args.in_flight, names("raw"), |name| {
            raw_put(&http, &access, &sas, name, &blob)
        })
        .await?;
        report(round, "by hand (reqwest)", args.requests, cpu, secs);
    }
    Ok(())
}

fn report(round: u32, variant: &str, n: usize, cpu: Duration, secs: f64) {
    println!(
        "| {} | {variant} | {n} | {:.1} | {:.0} |",
        round + 1,
        cpu.as_secs_f64() * 1e6 / n as f64,
        n as f64 / secs
    );
}

/// Runs `put` on every name, `in_flight` at a time: this process's CPU and
/// the wall seconds it took.
async fn measure<F, Fut>(
    in_flight: usize,
    names: impl Iterator<Item = String>,
    put: F,
) -> anyhow::Result<(Duration, f64)>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let mut results = futures::stream::iter(names.map(put)).buffer_unordered(in_flight);
    while let Some(r) = results.next().await {
        r?;
    }
    Ok((
        process_cpu().saturating_sub(cpu0),
        t0.elapsed().as_secs_f64(),
    ))
}

async fn sdk_put(storage: &Storage, name: String, blob: &Blob) -> anyhow::Result<()> {
    let meta = BTreeMap::new();
    let writer = storage.writer("cost", &name)?;
    let commit = Commit {
        sha256_hex: &blob.sha256_hex,
        seal: &blob.seal,
        content_type: Some("application/octet-stream"),
        content_md5: None,
        metadata: &meta,
        condition: &Condition::IfAbsent,
    };
    writer.put_blob(blob.data.clone(), &commit).await?;
    Ok(())
}

async fn raw_put(
    http: &reqwest::Client,
    access: &StorageAccess,
    sas: &str,
    name: String,
    blob: &Blob,
) -> anyhow::Result<()> {
    let mut url = access.blob_url("cost", &name)?;
    url.set_query(Some(sas));
    let md5 = B64.encode(Md5::digest(&blob.data));
    let resp = http
        .put(url)
        .header("x-ms-version", "2025-11-05")
        .header("x-ms-blob-type", "BlockBlob")
        .header("x-ms-blob-content-md5", md5)
        .header("x-ms-blob-content-type", "application/octet-stream")
        .header(format!("x-ms-meta-{SHA256_METADATA_KEY}"), &blob.sha256_hex)
        .header(format!("x-ms-meta-{SEAL_METADATA_KEY}"), &blob.seal)
        .header("if-none-match", "*")
        .body(blob.data.clone())
        .send()
        .await?;
    if resp.status() != reqwest::StatusCode::CREATED || resp.headers().get("etag").is_none() {
        bail!("Put Blob {name}: {}", resp.status());
    }
    Ok(())
}

/// User + system CPU of this process so far.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass and reads nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
