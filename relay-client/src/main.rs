use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser};
use relay_client::cli::{Cli, Command, ConfigCommand, ConfigInitArgs};
use relay_client::commands::args::UploadArgs;
use relay_client::commands::setup::SetupError;
use relay_client::commands::watch_args::WatchArgs;
use relay_client::run::interrupt::{EXIT_INTERRUPTED, Interrupt, rerun_command};
use relay_client::run::outcome::{Cause, Outcome};
use relay_client::ui::progress::{Output, Reporter, summary_line};
use relay_client::ui::report::{Summary, Totals};
use relay_client::watch::WatchEnd;
use serde_json::json;

const EXIT_FAILED: u8 = 1;
const EXIT_SETUP: u8 = 2;
/// `watch`: the relay or storage refused what every file needs (a revoked token).
const EXIT_REFUSED: u8 = 3;

fn main() -> ExitCode {
    relay_storage::backtraces::no_library_backtraces();
    let argv: Vec<String> = std::env::args().collect();
    // The profile's settings join the command line (flags > environment > file);
    // `argv` stays what the user typed, for the rerun command.
    let merged = match relay_client::cli::config_file::merged_argv(&argv) {
        Ok(m) => m,
        Err(e) => {
            let output = if wants_json(&argv) {
                json_output(&argv)
            } else {
                Output::Text
            };
            print_error(output, "setup", "config", &e.to_string());
            return ExitCode::from(EXIT_SETUP);
        }
    };
    let cli = match Cli::try_parse_from(&merged) {
        Ok(cli) => cli,
        // Scripts that asked for JSON get their usage error as JSON too.
        Err(e) if e.use_stderr() && wants_json(&argv) => {
            print_error(
                json_output(&argv),
                "usage",
                &e.kind().to_string(),
                &e.to_string(),
            );
            return ExitCode::from(EXIT_SETUP);
        }
        Err(e) => e.exit(),
    };
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "warn,relay_client=info,shared=info",
        _ => "info,relay_client=debug,shared=debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour codes only for a person at a terminal: a log file or a CI log
    // read later must not be full of ESC bytes.
    use std::io::IsTerminal;
    let ansi = cli.color.ansi(
        std::env::var_os("NO_COLOR").as_deref(),
        std::io::stderr().is_terminal(),
    );
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Bench(args) => bench(*args),
        Command::Upload(args) => upload(*args, &argv),
        Command::Download(args) => download(*args, &argv),
        Command::Ls(args) => ls(*args),
        Command::Sync(args) => sync(*args, &argv),
        Command::Watch(args) => watch(*args),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "relay-client",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Config(ConfigCommand::Init(args)) => {
            config_init(&args, cli.config.as_deref(), cli.profile.as_deref())
        }
        Command::Man => {
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("relay-client: cannot write the man page: {e}");
                    ExitCode::from(EXIT_FAILED)
                }
            }
        }
    }
}

/// `relay-client config init`: one profile appended to the configuration file.
fn config_init(
    args: &ConfigInitArgs,
    file: Option<&std::path::Path>,
    profile: Option<&str>,
) -> ExitCode {
    use clap::ValueEnum;
    use relay_client::cli::config_file;
    let Some(path) = file
        .map(std::path::Path::to_path_buf)
        .or_else(config_file::default_path)
    else {
        eprintln!("relay-client: {}", config_file::ConfigError::NoHome);
        return ExitCode::from(EXIT_SETUP);
    };
    let entra = args
        .entra
        .and_then(|f| f.to_possible_value())
        .map(|v| v.get_name().to_string());
    let settings: Vec<(&str, String)> = [
        ("relay", Some(args.relay.clone())),
        ("relay_cert_sha256", args.relay_cert_sha256.clone()),
        (
            "relay_ca",
            args.relay_ca.as_ref().map(|p| p.display().to_string()),
        ),
        (
            "token_file",
            args.token_file.as_ref().map(|p| p.display().to_string()),
        ),
        ("entra", entra),
        ("entra_scope", args.entra_scope.clone()),
        ("to", args.to.clone()),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    let name = profile.unwrap_or("default");
    match config_file::init(&path, name, &settings) {
        Ok(()) => {
            println!("{}", path.display());
            eprintln!(
                "relay-client: profile {name:?} written to {}",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("relay-client: {e}");
            ExitCode::from(EXIT_SETUP)
        }
    }
}

fn wants_json(argv: &[String]) -> bool {
    argv.iter().any(|a| a == "--json" || a == "--json-lines")
}

fn json_output(argv: &[String]) -> Output {
    if argv.iter().any(|a| a == "--json-lines") {
        Output::JsonLines
    } else {
        Output::Json
    }
}

/// A run-stopping error: one message, in the output form the user asked for.
fn print_error(output: Output, code: &str, kind: &str, message: &str) {
    let message = message.trim_end();
    match output {
        Output::Text => eprintln!("relay-client: {message}"),
        Output::Json => {
            let v = json!({"ok": false, "error": {"code": code, "kind": kind, "message": message}});
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Output::JsonLines => {
            println!(
                "{}",
                json!({"event": "error", "code": code, "kind": kind, "message": message})
            );
        }
    }
}

/// `relay-client bench`: generated files through the relay and directly.
fn bench(args: relay_client::cli::BenchArgs) -> ExitCode {
    relay_transport::install_crypto_provider();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => relay_client::bench::main(args, &rt),
        Err(e) => {
            eprintln!("relay-client: cannot start the runtime: {e}");
            ExitCode::from(EXIT_SETUP)
        }
    }
}

/// The async runtime of a command; `None` (said on stderr) when it cannot start.
fn runtime(output: Output) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            print_error(
                output,
                "setup",
                "runtime",
                &format!("cannot start the runtime: {e}"),
            );
            None
        }
    }
}

fn upload(args: UploadArgs, argv: &[String]) -> ExitCode {
    let output = args.output.output();
    let quiet = args.output.quiet;
    let stopped = |t: &Totals, in_flight: usize, in_flight_bytes: u64, cause: Cause| {
        let what = match cause {
            Cause::Interrupt => "interrupted".to_string(),
            Cause::Patience(p) => format!(
                "stopped: the relay stayed unreachable for {} (--patience)",
                relay_client::ui::weather::human(p)
            ),
        };
        format!(
            "{what}: {} committed, {} skipped, {} failed; {in_flight} stopped in flight \
             ({} staged for them, kept and resumed; a small file whose bytes had all \
             reached the relay may still be committed, and the rerun skips it)",
            t.committed,
            t.skipped,
            t.failed,
            relay_proto::size::format_size(in_flight_bytes),
        )
    };
    move_files(
        output,
        quiet,
        argv,
        |reporter, interrupt| relay_client::commands::upload::run(args, reporter, interrupt),
        stopped,
        "committed",
    )
}

fn download(
    args: relay_client::commands::download_args::DownloadArgs,
    argv: &[String],
) -> ExitCode {
    let output = args.output.output();
    let quiet = args.output.quiet;
    let stopped = |t: &Totals, in_flight: usize, _: u64, _: Cause| {
        format!(
            "stopped: {} downloaded, {} skipped, {} failed; {in_flight} stopped in \
             flight (their partial files are kept and resumed)",
            t.downloaded, t.skipped, t.failed
        )
    };
    move_files(
        output,
        quiet,
        argv,
        |reporter, interrupt| relay_client::commands::download::run(args, reporter, interrupt),
        stopped,
        "finished",
    )
}

/// `relay-client ls`: the listing on stdout, its end as the exit status.
fn ls(args: relay_client::commands::ls_args::LsArgs) -> ExitCode {
    use relay_client::commands::ls::LsEnd;
    relay_transport::install_crypto_provider();
    let output = if args.json {
        Output::JsonLines
    } else {
        Output::Text
    };
    let Some(rt) = runtime(output) else {
        return ExitCode::from(EXIT_SETUP);
    };
    let end = rt.block_on(async {
        let interrupt = Interrupt::install();
        let mut out = std::io::BufWriter::new(std::io::stdout());
        let end = relay_client::commands::ls::run(args, &mut out, interrupt).await;
        let _ = std::io::Write::flush(&mut out);
        end
    });
    rt.shutdown_background();
    match end {
        Ok(LsEnd::Done) => ExitCode::SUCCESS,
        Ok(LsEnd::Failed(e)) => {
            print_error(output, e.code.as_str(), "listing", &e.message);
            ExitCode::from(EXIT_FAILED)
        }
        Ok(LsEnd::Refused(e)) => {
            print_error(output, e.code.as_str(), "refused", &e.message);
            ExitCode::from(EXIT_SETUP)
        }
        Ok(LsEnd::Interrupted) => {
            eprintln!("relay-client: interrupted");
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(e) => {
            print_error(output, "setup", "setup", &e.to_string());
            ExitCode::from(EXIT_SETUP)
        }
    }
}

fn sync(args: relay_client::commands::sync_args::SyncArgs, argv: &[String]) -> ExitCode {
    let output = args.output.output();
    let quiet = args.output.quiet;
    let stopped = |t: &Totals, in_flight: usize, _: u64, _: Cause| {
        format!(
            "stopped: {} sent, {} fetched, {} skipped, {} failed; {in_flight} stopped in \
             flight (what they staged or wrote is kept and resumed); nothing was deleted",
            t.committed, t.downloaded, t.skipped, t.failed
        )
    };
    move_files(
        output,
        quiet,
        argv,
        |reporter, interrupt| relay_client::commands::sync::run(args, reporter, interrupt),
        stopped,
        "unchanged",
    )
}

/// What `upload` and `download` share: the runtime, Ctrl-C, the summary and
/// the exit status. `stopped` says what a run stopped early left behind;
/// `done` is what the rerun skips as identical (`committed`, `finished`).
fn move_files<F>(
    output: Output,
    quiet: bool,
    argv: &[String],
    run: impl FnOnce(Arc<Reporter>, Interrupt) -> F,
    stopped: impl Fn(&Totals, usize, u64, Cause) -> String,
    done: &str,
) -> ExitCode
where
    F: std::future::Future<Output = Result<Outcome, SetupError>>,
{
    relay_transport::install_crypto_provider();
    let Some(rt) = runtime(output) else {
        return ExitCode::from(EXIT_SETUP);
    };
    let reporter = Arc::new(Reporter::new(output, quiet));
    let outcome = rt.block_on(async {
        let interrupt = Interrupt::install();
        run(reporter, interrupt).await
    });
    // Tasks still blocked on the file system must not hold the exit.
    rt.shutdown_background();
    match outcome {
        Ok(Outcome::Done(summary)) => {
            print_summary(&summary, output);
            if summary.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
        Ok(Outcome::Interrupted {
            mut summary,
            in_flight,
            in_flight_bytes,
            cause,
        }) => {
            summary.ok = false;
            summary.interrupted = true;
            summary.stopped_by = Some(match cause {
                Cause::Interrupt => "interrupt",
                Cause::Patience(_) => "patience",
            });
            print_summary(&summary, output);
            eprintln!(
                "relay-client: {}",
                stopped(&summary.totals, in_flight, in_flight_bytes, cause)
            );
            let rerun = rerun_command(argv);
            eprintln!(
                "relay-client: to resume, run the same command ({done} files are skipped as identical):\n  {}",
                rerun.command
            );
            if let Some(note) = rerun.note() {
                eprintln!("relay-client: ({note})");
            }
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(e) => {
            print_error(output, "setup", "setup", &e.to_string());
            ExitCode::from(EXIT_SETUP)
        }
    }
}

fn watch(args: WatchArgs) -> ExitCode {
    relay_transport::install_crypto_provider();
    let output = if args.upload.output.json_lines {
        Output::JsonLines
    } else {
        Output::Text
    };
    let Some(rt) = runtime(output) else {
        return ExitCode::from(EXIT_SETUP);
    };
    // No progress bars: a watch runs for months; status lines say where it is.
    let reporter = Arc::new(Reporter::new(output, true));
    let outcome = rt.block_on(relay_client::commands::watch::run(args, reporter));
    rt.shutdown_background();
    match outcome {
        Ok(WatchEnd::Stopped(summary)) => {
            print_summary(&summary, output);
            ExitCode::SUCCESS
        }
        Ok(WatchEnd::Refused(refusal)) => {
            print_error(output, "refused", "refused", &refusal.to_string());
            ExitCode::from(EXIT_REFUSED)
        }
        Ok(WatchEnd::OutOfPatience {
            mut summary,
            patience,
        }) => {
            summary.ok = false;
            summary.interrupted = true;
            summary.stopped_by = Some("patience");
            print_summary(&summary, output);
            eprintln!(
                "relay-client: stopped: the relay stayed unreachable for {} (--patience); \
                 start the watch again to go on (the journal keeps what was committed, \
                 the relay what was staged)",
                relay_client::ui::weather::human(patience)
            );
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(e) => {
            print_error(output, "setup", "setup", &e.to_string());
            ExitCode::from(EXIT_SETUP)
        }
    }
}

fn print_summary(s: &Summary, output: Output) {
    match output {
        // Written as it is encoded: a summary of a million files' reports
        // is never one string in memory.
        Output::Json => {
            use std::io::Write;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let written = serde_json::to_writer_pretty(&mut out, s)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush());
            if let Err(e) = written {
                eprintln!("relay-client: cannot write the summary: {e}");
            }
        }
        Output::JsonLines => {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("files");
                o.insert("event".into(), "summary".into());
            }
            println!("{v}");
        }
        Output::Text => println!("{}", summary_line(s)),
    }
}
