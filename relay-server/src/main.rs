use clap::Parser;
use relay_server::config::Args;
use relay_server::{Config, Relay};
use tokio::sync::watch;

fn main() -> std::process::ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Err(e) = relay_server::config::load_config_file(&argv) {
        eprintln!("relay-server: {e}");
        return std::process::ExitCode::from(2);
    }
    let args = Args::parse_from(argv);
    init_logging(&args.log_format);
    relay_transport::install_crypto_provider();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("relay-server: cannot start the runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay-server: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let cfg = Config::from_args(&args)?;
    if args.check_config {
        // What Relay::bind would refuse, short of binding: e.g. a key that does
        // not belong to the certificate.
        cfg.identity.server_crypto()?;
        let bound = cfg.memory_bound();
        println!(
            "relay-server: configuration ok (listen {}, storage {:?}, certificate {}, memory bound {}: {bound})",
            args.listen,
            cfg.storage.access(),
            cfg.identity.fingerprint,
            relay_proto::size::format_size(bound.total()),
        );
        return Ok(());
    }
    if let Some(path) = &args.cert_fingerprint_file {
        std::fs::write(path, format!("{}\n", cfg.identity.fingerprint))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let budget = cfg.budget.total_bytes();
    let bound = cfg.memory_bound();
    let health = match args.health_listen {
        Some(addr) => Some(relay_server::health::bind(addr).await?),
        None => None,
    };
    let relay = Relay::bind(cfg)?;
    let addr = relay.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        %addr,
        fingerprint = relay.fingerprint(),
        memory_budget = %relay_proto::size::format_size(budget),
        memory_bound = %relay_proto::size::format_size(bound.total()),
        "relay listening (pin clients with --relay-cert-sha256)"
    );
    let (tx, rx) = watch::channel(false);
    if let Some(listener) = health {
        tracing::info!(addr = ?listener.local_addr().ok(), "health endpoint: /healthz, /metrics");
        tokio::spawn(relay_server::health::serve(
            listener,
            relay.shared(),
            rx.clone(),
        ));
    }
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received");
        let _ = tx.send(true);
    });
    relay.serve(rx).await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a person at a terminal: in journald or a file an
        // ESC byte is noise, and a log a reader can trust has none.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
