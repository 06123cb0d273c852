use std::process::ExitCode;

use clap::Parser;
use relay_client::cli::{Cli, Command};
use relay_client::report::{Status, Summary};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    relay_transport::install_crypto_provider();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("relay-client: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Bench(args) => relay_client::bench::main(args, &rt),
        Command::Upload(args) => {
            let json = args.json;
            match rt.block_on(relay_client::upload::run(args)) {
                Ok(summary) => print_summary(&summary, json),
                Err(e) => {
                    eprintln!("relay-client: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn print_summary(s: &Summary, json: bool) -> ExitCode {
    if json {
        match serde_json::to_string_pretty(s) {
            Ok(text) => println!("{text}"),
            Err(e) => eprintln!("relay-client: cannot encode the summary: {e}"),
        }
    } else {
        for f in s.files.iter().filter(|f| f.status == Status::Committed) {
            println!(
                "committed  {}/{}  {} bytes  sha256 {}  etag {}{}",
                f.container,
                f.blob,
                f.bytes,
                f.sha256.as_deref().unwrap_or(""),
                f.etag.as_deref().unwrap_or(""),
                if f.bytes_resumed > 0 {
                    format!("  (resumed at {})", f.bytes_resumed)
                } else {
                    String::new()
                }
            );
        }
        let t = &s.totals;
        println!(
            "{} of {} files committed and verified, {} in {:.1} s ({:.1} Mbit/s, {})",
            t.committed,
            t.files,
            relay_proto::size::format_size(t.bytes),
            t.seconds,
            t.mbit_per_s,
            s.mode
        );
    }
    for f in s.files.iter().filter(|f| f.status == Status::Failed) {
        let why = f
            .error
            .as_ref()
            .map(|e| e.message.as_str())
            .unwrap_or("failed");
        eprintln!("relay-client: {}: {why}", f.path);
    }
    if s.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
