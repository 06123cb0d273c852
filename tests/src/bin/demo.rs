//! The main job, end to end on one machine: a local Azurite, a relay process, a
//! generated multi-file data set uploaded through the relay with the real client,
//! and every blob downloaded again and checked against its source.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relay_tests::files::{sha256_file, write_random};
use relay_tests::{DEV_KEY, binary};

fn main() {
    if let Err(e) = run() {
        eprintln!("demo: {e}");
        std::process::exit(1);
    }
}

fn free_udp_port() -> Result<u16, String> {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn run() -> Result<(), String> {
    relay_transport::install_crypto_provider();
    let work = PathBuf::from(".demo");
    let _ = std::fs::remove_dir_all(&work);
    let data = work.join("data");
    println!("== 1/5 generating a data set in {}", data.display());
    let mut expected = vec![(
        data.join("big.bin"),
        write_random(&data.join("big.bin"), 40 << 20, 1),
    )];
    for i in 0..24u64 {
        let p = data.join(format!("images/day{}/img{i:03}.raw", i % 3));
        expected.push((p.clone(), write_random(&p, 50_000 + i * 4_099, 100 + i)));
    }
    std::fs::write(
        data.join("README.txt"),
        b"Uploaded by the Blob Relay demo.\n",
    )
    .map_err(|e| e.to_string())?;
    expected.push((
        data.join("README.txt"),
        sha256_file(&data.join("README.txt")),
    ));
    std::fs::write(data.join("empty.log"), b"").map_err(|e| e.to_string())?;
    expected.push((data.join("empty.log"), sha256_file(&data.join("empty.log"))));
    println!("   {} files", expected.len());

    println!("== 2/5 starting Azurite (local Azure Storage emulator)");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())?;
    let az = relay_tests::azurite::start(port);
    let storage_url = az.url();
    println!("   {storage_url} (pid {})", az.pid);
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let storage = az.storage();
    rt.block_on(storage.ensure_container("demo"))
        .map_err(|e| e.to_string())?;

    println!("== 3/5 starting relay-server");
    let token = format!("demo-token-{:016x}", rand::random::<u64>());
    std::fs::write(work.join("tokens"), format!("{token} demo\n")).map_err(|e| e.to_string())?;
    let fp_file = work.join("relay.sha256");
    let relay_addr = format!("127.0.0.1:{}", free_udp_port()?);
    let relay_log = std::fs::File::create(work.join("relay.log")).map_err(|e| e.to_string())?;
    let mut relay = Command::new(binary("relay-server"))
        .args([
            "--listen",
            &relay_addr,
            "--storage-url",
            &storage_url,
            "--account-key",
            DEV_KEY,
        ])
        .args([
            "--tokens",
            &path(&work.join("tokens")),
            "--id-key-file",
            &path(&work.join("id.key")),
            "--state-dir",
            &path(&work.join("state")),
            "--cert-fingerprint-file",
            &path(&fp_file),
        ])
        .args(["--memory-budget", "512MiB"])
        .stdout(Stdio::null())
        .stderr(relay_log)
        .spawn()
        .map_err(|e| format!("cannot start relay-server: {e}"))?;
    let t0 = Instant::now();
    let fingerprint = loop {
        if let Ok(s) = std::fs::read_to_string(&fp_file)
            && !s.trim().is_empty()
        {
            break s.trim().to_string();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = relay.kill();
            return Err("relay-server did not start; see .demo/relay.log".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("   listening on {relay_addr}, certificate SHA-256 {fingerprint}");

    println!(
        "== 4/5 relay-client upload {} --to demo/run1 (QUIC through the relay)",
        data.display()
    );
    let status = Command::new(binary("relay-client"))
        .args([
            "upload",
            &path(&data),
            "--relay",
            &relay_addr,
            "--relay-cert-sha256",
            &fingerprint,
        ])
        .args(["--to", "demo/run1", "--parallel", "6"])
        .env("RELAY_TOKEN", &token)
        .status()
        .map_err(|e| format!("cannot run relay-client: {e}"))?;
    // Stop the relay the way systemd would (SIGTERM to our own child).
    unsafe {
        libc::kill(relay.id() as i32, libc::SIGTERM);
    }
    let _ = relay.wait();
    if !status.success() {
        return Err(format!(
            "relay-client failed ({status}); relay log: .demo/relay.log"
        ));
    }

    println!("== 5/5 downloading every blob from Azurite and comparing SHA-256 with the source");
    let mut ok = 0;
    for (file, sha) in &expected {
        let rel = file
            .strip_prefix(&work)
            .map_err(|e| e.to_string())?
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect::<Vec<_>>()
            .join("/");
        let blob = format!("run1/{rel}");
        let w = storage.writer("demo", &blob).map_err(|e| e.to_string())?;
        let (n, got) = rt
            .block_on(w.content_sha256())
            .map_err(|e| format!("{blob}: {e}"))?;
        let props = rt.block_on(w.properties()).map_err(|e| e.to_string())?;
        let meta = props.and_then(|p| p.sha256).unwrap_or_default();
        let good = hex::encode(got) == *sha && meta == *sha;
        println!(
            "   {} demo/{blob} {n} bytes sha256 {}",
            if good { "ok  " } else { "BAD " },
            &sha[..16]
        );
        ok += usize::from(good);
    }
    println!(
        "\n{ok} of {} blobs verified by download (content and `sha256` metadata).",
        expected.len()
    );
    if ok != expected.len() {
        return Err("verification failed".into());
    }
    Ok(())
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
