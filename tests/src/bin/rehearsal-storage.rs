//! The uploads account's front end in the deployment rehearsal
//! (scripts/rehearse, docs/REHEARSAL.md): HTTPS with the storage
//! certificate, then the fault proxy, which checks every `x-ms-content-crc64`
//! against Azure's CRC-64 of the body as the service does (400 Crc64Mismatch
//! on a difference), can corrupt the next N Put Block bodies on arrival and
//! hold a Put Block List when told (a slow commit), then HTTPS again to
//! Azurite. The proxy's counts are written to `--stats` as
//! JSON four times a second.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule};
use relay_tests::tls_pipe;

#[derive(Parser)]
struct Args {
    /// Address the account's name resolves to (HTTPS).
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    cert: PathBuf,
    #[arg(long)]
    key: PathBuf,
    /// Azurite's HTTPS address and the name its certificate is checked for.
    #[arg(long)]
    upstream: SocketAddr,
    #[arg(long)]
    upstream_name: String,
    /// The run's CA (PEM).
    #[arg(long)]
    ca: PathBuf,
    /// How many Put Block bodies to corrupt (the first ones that arrive).
    #[arg(long, default_value_t = 0)]
    corrupt_put_blocks: usize,
    /// When this file appears, the next Put Block List is held
    /// --slow-put-block-list-s before it is forwarded (and the file removed):
    /// a commit slower than the alert rules' threshold, at the moment the
    /// rehearsal chooses, for the series the alerts stage is tested on.
    #[arg(long)]
    slow_commit_trigger: Option<PathBuf>,
    #[arg(long, default_value_t = 12)]
    slow_put_block_list_s: u64,
    #[arg(long)]
    stats: PathBuf,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let plain = tls_pipe::originate(args.upstream, &args.upstream_name, &args.ca).await?;
    let schedule = Schedule {
        corrupt: vec![Op::PutBlock; args.corrupt_put_blocks],
        ..Schedule::seeded(31)
    };
    let proxy = std::sync::Arc::new(FaultProxy::start(plain, schedule).await);
    if let Some(trigger) = args.slow_commit_trigger.clone() {
        let (proxy, hold) = (
            proxy.clone(),
            Duration::from_secs(args.slow_put_block_list_s),
        );
        tokio::spawn(async move {
            loop {
                if std::fs::remove_file(&trigger).is_ok() {
                    // Whatever was scheduled before (the corrupted body) is done by now.
                    proxy.set_schedule(Schedule {
                        script: vec![(Op::PutBlockList, Fault::Delay(hold))],
                        ..Schedule::seeded(31)
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let stats = proxy.stats.clone();
    let path = args.stats.clone();
    tokio::spawn(async move {
        loop {
            let (matched, mismatched) = stats.crc64_checks();
            let json = serde_json::json!({
                "requests": stats.requests.load(Ordering::SeqCst),
                "put_block": stats.requests_of(Op::PutBlock),
                "crc64_matched": matched,
                "crc64_mismatched": mismatched,
                "corrupted": stats.corrupted.load(Ordering::SeqCst),
            });
            let tmp = path.with_extension("new");
            if std::fs::write(&tmp, json.to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    tls_pipe::terminate(args.listen, &args.cert, &args.key, proxy.addr).await
}
