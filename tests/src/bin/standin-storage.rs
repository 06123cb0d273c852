//! The stand-in storage (`relay_tests::standin`) as a process, for
//! `wanbench --storage standin`: one account in memory, path style
//! (`http://ADDR/ACCOUNT/container/blob`), on `--listen`.

use std::net::SocketAddr;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Address to serve HTTP on.
    #[arg(long, default_value = "127.0.0.1:10000")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = relay_tests::standin::serve(args.listen).await {
        eprintln!("standin-storage: {}: {e}", args.listen);
        std::process::exit(1);
    }
}
