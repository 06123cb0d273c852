use std::process::ExitCode;
use std::sync::Arc;

use relay_server::connection::tls::TlsError;
use relay_server::operations::config::{Args, ConfigError, LogFormat, parse_with_config_file};
use relay_server::operations::health::HealthBindError;
use relay_server::operations::probe::{ProbeError, StorageHealth, StorageProbe};
use relay_server::server::BindError;
use relay_server::{Config, Relay, ResolveError};
use relay_storage::account::ClientBuildError;
use tokio::sync::watch;

/// Why the relay stopped before serving, or why `--check-config` failed.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Config(#[from] ResolveError),
    /// The storage probe's HTTP client.
    #[error(transparent)]
    ProbeClient(#[from] ClientBuildError),
    #[error("cannot write {}: {source}", path.display())]
    FingerprintFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Health(#[from] HealthBindError),
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The bound endpoint cannot tell its own address.
    #[error(transparent)]
    LocalAddr(std::io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `--check-config`: storage refused the relay's credentials, or did not answer.
    #[error("storage {storage} not usable ({what}): {source}")]
    Storage {
        storage: String,
        what: String,
        source: ProbeError,
    },
}

fn main() -> ExitCode {
    relay_storage::backtraces::no_library_backtraces();
    let args = match parse_with_config_file(std::env::args_os().collect()) {
        Ok(a) => a,
        // Help and version go to stdout with status 0, usage errors to stderr with 2.
        Err(ConfigError::Usage(e)) => e.exit(),
        Err(e) => {
            eprintln!("relay-server: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(args.telemetry.log_format, args.telemetry.color);
    relay_transport::install_crypto_provider();
    if let Some(command) = &args.command {
        return match relay_server::operations::commands::run(command, &args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("relay-server: {e}");
                ExitCode::from(1)
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("relay-server: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay-server: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<(), RunError> {
    // First, so every log (and a crash report) says which build wrote it.
    tracing::info!(
        version = relay_server::telemetry::version::VERSION,
        commit = relay_server::telemetry::version::COMMIT,
        "relay-server {} starting",
        relay_server::telemetry::version::LONG
    );
    let cfg = Config::from_args(&args)?;
    let mut granted = cfg.sign_in.tokens.granted_containers();
    if let Some(entra) = &cfg.sign_in.entra {
        for c in entra.grants.containers() {
            if !granted.contains(&c) {
                granted.push(c);
            }
        }
    }
    let probe = StorageProbe::new(cfg.storage.account.access().clone(), &granted)?;
    if args.check_config {
        return check_config(&cfg, &probe).await;
    }
    if let Some(path) = &args.listen.cert_fingerprint_file {
        std::fs::write(path, format!("{}\n", cfg.listen.identity.fingerprint)).map_err(
            |source| RunError::FingerprintFile {
                path: path.clone(),
                source,
            },
        )?;
    }
    let budget = cfg.limits.budget.total_bytes();
    let telemetry = cfg.telemetry;
    let bound = cfg.memory_bound();
    // Installed before anything answers (health endpoint, QUIC): a supervisor
    // that sees the relay up and sends SIGTERM must get a clean stop, never
    // the default action that kills the process.
    let signals = StopSignals::install();
    let health = match telemetry.health_listen {
        Some(addr) => Some(relay_server::operations::health::bind(addr).await?),
        None => None,
    };
    let relay = Relay::bind(cfg)?;
    let addr = relay.local_addr().map_err(RunError::LocalAddr)?;
    tracing::info!(
        %addr,
        fingerprint = relay.fingerprint(),
        memory_budget = %relay_proto::size::format_size(budget),
        memory_bound = %relay_proto::size::format_size(bound.total()),
        "relay listening (pin clients with --relay-cert-sha256)"
    );
    let (tx, rx) = watch::channel(false);
    let storage = Arc::new(StorageHealth::default());
    tokio::spawn(relay_server::operations::probe::run(
        probe,
        storage.clone(),
        telemetry.storage_check_interval,
        rx.clone(),
    ));
    if let Some(listener) = health {
        if let Ok(a) = listener.local_addr() {
            tracing::info!(addr = %a, "health endpoint: /healthz, /metrics");
        }
        tokio::spawn(relay_server::operations::health::serve(
            listener,
            relay.shared(),
            storage,
            rx.clone(),
        ));
    }
    tokio::spawn(async move {
        signals.wait().await;
        tracing::info!("signal received");
        let _ = tx.send(true);
    });
    relay.serve(rx).await;
    tracing::info!("stopped");
    Ok(())
}

/// What `Relay::bind` would refuse, short of binding (e.g. a key that does not
/// belong to the certificate), then one request to storage with the relay's
/// credentials. The first line says the local part is fine even when storage
/// is not, so an offline check (image build, CI) still learns that much.
async fn check_config(cfg: &Config, probe: &StorageProbe) -> Result<(), RunError> {
    cfg.listen.identity.server_crypto()?;
    let bound = cfg.memory_bound();
    println!(
        "relay-server: configuration ok (listen {}, certificate {}, memory bound {}: {bound})",
        cfg.listen.addr,
        cfg.listen.identity.fingerprint,
        relay_proto::size::format_size(bound.total()),
    );
    let storage = relay_server::describe_storage(cfg.storage.account.access());
    let what = format!("Get Blob Properties in container {:?}", probe.container());
    if let Err(source) = probe.check().await {
        return Err(RunError::Storage {
            storage,
            what,
            source,
        });
    }
    println!("relay-server: storage {storage} reachable ({what})");
    Ok(())
}

/// SIGTERM (systemd's stop) and SIGINT (Ctrl-C), registered with the runtime
/// at once so a signal that arrives before anyone waits is kept, not lost.
struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        if let Err(e) = term.as_ref().and(interrupt.as_ref()) {
            tracing::warn!(error = %e, "cannot watch for stop signals; stop with SIGKILL");
        }
        Self {
            term: term.ok(),
            interrupt: interrupt.ok(),
        }
    }

    async fn wait(mut self) {
        async fn recv(s: Option<&mut tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(self.term.as_mut()) => {}
            _ = recv(self.interrupt.as_mut()) => {}
        }
    }
}

fn init_logging(format: LogFormat, color: relay_proto::color::ColorChoice) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colour codes only for a person at a terminal (and not with NO_COLOR): in
    // journald or a file an ESC byte is noise, and a log a reader can trust
    // has none.
    let ansi = color.ansi(
        std::env::var_os("NO_COLOR").as_deref(),
        std::io::stderr().is_terminal(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
