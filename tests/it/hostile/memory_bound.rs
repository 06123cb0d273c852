//! The relay's memory bound (docs/SECURITY.md, "Memory") holds for the real
//! process while it is attacked: a separate `relay-server` process, small limits,
//! tokenless peers from several addresses holding every pending slot with half-sent
//! frames on every stream they may open, and legitimate uploads filling the block
//! budget and the connection windows at the same time. Its peak RSS (VmHWM) must
//! stay inside the bound that `Config::memory_bound` computes from the very same
//! flags, which is the formula the relay refuses to start above.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use relay_client::relay::connect::Connector;
use relay_server::Config;
use relay_server::operations::config::Args;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::raw_quic::Dial;
use relay_tests::{DEV_KEY, Reaped, binary, http, load, reserved_port, run_client};

const MIB: u64 = 1 << 20;
const TOKEN: &str = "memory-bound-token-0123456789";

/// The relay process; killed (by its PID, which we started) when dropped.
struct RelayProcess(Reaped);

/// A tokenless peer from `from`: it completes the handshake, then on every
/// stream the relay allows before authentication writes the header of the
/// largest frame and most of its body, and waits. It never sends a token.
async fn half_sent_frames(
    addr: std::net::SocketAddr,
    fingerprint: &str,
    from: &str,
) -> Option<(Connector, quinn::Connection, Vec<quinn::SendStream>)> {
    let (c, conn) = Dial::at(addr, fingerprint)
        .from(from)
        .try_connect()
        .await
        .ok()?;
    let mut streams = Vec::new();
    let body_len = relay_proto::limits::MAX_FRAME_LEN as u32;
    for _ in 0..4 {
        let Ok(Ok((mut send, _recv))) =
            tokio::time::timeout(Duration::from_secs(2), conn.open_bi()).await
        else {
            break;
        };
        let mut bytes = body_len.to_be_bytes().to_vec();
        bytes.resize(body_len as usize - 16, 0x5a);
        if send.write_all(&bytes).await.is_err() {
            break;
        }
        streams.push(send);
    }
    Some((c, conn, streams))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacked_relay_stays_inside_its_memory_bound() {
    let az = shared_azurite();
    let container = new_container("membound").await;
    let dir = Scratch::new("membound");
    std::fs::write(dir.path("tokens"), format!("{TOKEN}\n")).unwrap_or_else(|e| panic!("{e}"));
    let listen = format!("127.0.0.1:{}", reserved_port());
    let health = format!("127.0.0.1:{}", reserved_port());
    let fp_file = dir.path("fp");
    let flags: Vec<String> = [
        "--listen",
        &listen,
        "--storage-url",
        &az.url(),
        "--account-key",
        DEV_KEY,
        "--tokens",
        &dir.path("tokens").display().to_string(),
        "--id-key-ephemeral",
        "--state-dir",
        &dir.path("state").display().to_string(),
        "--cert-fingerprint-file",
        &fp_file.display().to_string(),
        "--memory-budget",
        "96MiB",
        "--max-connections",
        "4",
        "--max-pending",
        "24",
        "--max-per-address",
        "8",
        "--connection-window",
        "48MiB",
        "--stream-window",
        "16MiB",
        "--auth-deadline",
        "60",
        "--memory-limit",
        "64GiB",
        "--health-listen",
        &health,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    // The bound from the same flags the process gets, through the same code.
    let args =
        Args::try_parse_from(std::iter::once("relay-server".to_string()).chain(flags.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
    let bound = Config::from_args(&args)
        .unwrap_or_else(|e| panic!("{e}"))
        .memory_bound();

    let relay = RelayProcess(Reaped(
        Command::new(binary("relay-server"))
            .args(&flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}")),
    ));
    let pid = relay.0.id();
    let t0 = Instant::now();
    let fingerprint = loop {
        let fp = std::fs::read_to_string(&fp_file).unwrap_or_default();
        if !fp.trim().is_empty() {
            break fp.trim().to_string();
        }
        // A bound against hangs only, not a timing assertion.
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "relay never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let addr: std::net::SocketAddr = listen.parse().unwrap_or_else(|e| panic!("{e}"));

    // Every pending slot, from three "hosts", each with half-sent frames.
    let mut held = Vec::new();
    for host in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..8 {
            if let Some(peer) = half_sent_frames(addr, &fingerprint, host).await {
                held.push(peer);
            }
        }
    }
    assert_eq!(held.len(), 24, "the attack holds every pending slot");
    let metrics = |series: &str| {
        let (_, text) = http::get(&health, "/metrics").unwrap_or_else(|| panic!("no /metrics"));
        http::sample(&text, series).unwrap_or_else(|| panic!("no {series} in {text}"))
    };
    assert_eq!(metrics("blob_relay_connections_pending"), 24.0);

    // Meanwhile four legitimate clients (every authenticated slot) upload at
    // once: the block budget and their connection windows fill.
    let files = Scratch::new("membound-files");
    let mut uploads = Vec::new();
    for i in 0..4u64 {
        let file = files.path(&format!("f{i}.bin"));
        let sha = write_random(&file, 40 * MIB, 900 + i);
        let args = load::upload_args(&file, &listen, &fingerprint, &container, TOKEN);
        uploads.push(tokio::spawn(async move {
            let out = run_client(&args, &[], Duration::from_secs(300)).await;
            (out, sha)
        }));
    }
    for (i, upload) in uploads.into_iter().enumerate() {
        let (out, sha) = upload.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            blob_sha(&container, &format!("f{i}.bin")).await,
            (40 * MIB, sha)
        );
    }

    // Every pending slot was held when the first came: it got in by evicting
    // one of the attacker's connections (and, authenticated, freed the slot).
    let evicted =
        metrics("blob_relay_connections_refused_total{reason=\"evicted_oldest_pending\"}");
    assert!(evicted >= 1.0, "evicted {evicted}");

    let (peak, _) = load::process_usage(pid);
    eprintln!(
        "relay-server peak RSS {} MiB under attack; bound {} MiB ({bound}); {} tokenless connections held",
        peak / MIB,
        bound.total() / MIB,
        held.len()
    );
    assert!(
        peak <= bound.total(),
        "peak RSS {peak} above the memory bound {} ({bound})",
        bound.total()
    );
    drop(held);
    drop(relay);
}
