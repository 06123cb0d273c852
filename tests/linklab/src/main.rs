//! `linklab`: bring a WAN lab up, clean up after crashed runs, or measure
//! TCP goodput across it. See docs/LINKLAB.md.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use linklab::{Lab, LinkProfile, calibrate, netns, tcp_tool};

#[derive(Parser)]
#[command(
    name = "linklab",
    about = "WAN link emulator between two network namespaces (needs root)",
    long_about = "WAN link emulator between two network namespaces (needs root).\n\n\
        Examples:\n  \
        linklab up --rtt-ms 100 --loss 0.01 --rate-mbit 200\n  \
        ip netns exec brl-cloud-PID-0 linklab tcp-sink --listen 10.77.0.2:5201\n  \
        ip netns exec brl-site-PID-0 linklab tcp-send --to 10.77.0.2:5201 --seconds 10 --cc bbr\n  \
        linklab calibrate\n  \
        linklab cleanup"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring a lab up, print it as JSON, forward until SIGINT/SIGTERM.
    ///
    /// SIGUSR1 prints the counters as a JSON line; they are printed again at exit.
    Up {
        /// Round-trip delay in milliseconds (half each way).
        #[arg(long, default_value_t = 100.0)]
        rtt_ms: f64,
        /// Random loss probability per packet and direction (0.01 = 1 %).
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// Bottleneck rate per direction in Mbit/s (0 = unlimited).
        #[arg(long, default_value_t = 200.0)]
        rate_mbit: f64,
        /// Drop-tail queue limit in bytes (default: one BDP).
        #[arg(long)]
        queue_bytes: Option<u64>,
        /// Seed of the loss RNG.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Emulate NIC offloads: UDP GSO batches cross whole, checksums are
        /// computed and checked by the emulator (needs Linux 6.2).
        #[arg(long)]
        offload: bool,
    },
    /// Measure and report (JSON lines) how closely the emulator reproduces a
    /// profile on this machine: RTT, loss, TCP goodput against the ceiling.
    ///
    /// A report, not a test: accuracy depends on the machine's load.
    Calibrate {
        #[arg(long, default_value_t = 50.0)]
        rtt_ms: f64,
        #[arg(long, default_value_t = 0.02)]
        loss: f64,
        #[arg(long, default_value_t = 100.0)]
        rate_mbit: f64,
        /// UDP echo probes for the RTT.
        #[arg(long, default_value_t = 40)]
        probes: u32,
        /// UDP datagrams for the loss.
        #[arg(long, default_value_t = 10_000)]
        packets: u64,
        /// Seconds of each TCP flow.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Congestion controls to measure, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "cubic,bbr")]
        cc: Vec<String>,
    },
    /// Delete brl-* namespaces whose owning process is gone.
    Cleanup {
        /// Delete all brl-* namespaces, also those of running labs.
        #[arg(long)]
        all: bool,
    },
    /// Receive TCP flows and print goodput per flow as JSON.
    TcpSink {
        #[arg(long)]
        listen: SocketAddr,
        /// Exit after the first flow.
        #[arg(long)]
        once: bool,
    },
    /// Send one TCP flow and print the goodput the sink measured as JSON.
    TcpSend {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Congestion control for this socket: cubic, bbr, reno, ...
        #[arg(long, default_value = "cubic")]
        cc: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Up {
            rtt_ms,
            loss,
            rate_mbit,
            queue_bytes,
            seed,
            offload,
        } => up(LinkProfile {
            rtt_ms,
            loss,
            rate_mbit,
            queue_bytes,
            seed,
            offload,
            nat: false,
        }),
        Cmd::Calibrate {
            rtt_ms,
            loss,
            rate_mbit,
            probes,
            packets,
            seconds,
            cc,
        } => calibrate::run(&calibrate::Calibration {
            rtt_ms,
            loss,
            rate_mbit,
            probes,
            packets,
            seconds,
            ccs: cc,
        }),
        Cmd::Cleanup { all } => netns::cleanup(all).map(|deleted| {
            for name in deleted {
                println!("deleted {name}");
            }
        }),
        Cmd::TcpSink { listen, once } => tcp_tool::sink(listen, once),
        Cmd::TcpSend { to, seconds, cc } => {
            tcp_tool::send(to, seconds, &cc).map(|r| println!("{}", r.to_json("send")))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linklab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Run a lab until SIGINT/SIGTERM. The signals are blocked before any thread
/// starts and taken with sigwait, so no handler races the teardown.
fn up(profile: LinkProfile) -> anyhow::Result<()> {
    // SAFETY: plain sigset manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let lab = Lab::start(profile)?;
    println!("{}", lab.describe_json());
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals in `set`.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        if sig == libc::SIGUSR1 {
            println!("{}", lab.stats().to_json());
        } else {
            break;
        }
    }
    let stats = lab.stats();
    drop(lab);
    println!("{}", stats.to_json());
    Ok(())
}
