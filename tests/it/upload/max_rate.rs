//! `--max-rate` (and its AzCopy name `--cap-mbps`) on loopback, the shortest path
//! there is: a window of rate × RTT alone used to starve it at ~10 Mbit/s whatever
//! the request. The client now meters its writes; the rate it reports for the
//! transfer (bytes over Offer-to-last-byte) must not exceed the cap by more than
//! 10 %. The metering makes that bound hold whatever the machine's load (a busy
//! machine only makes an upload slower); the lower side depends on the load, so
//! it is printed, not asserted (docs/TRANSPORT.md has the measured figures).

use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_sha, new_container};
use relay_tests::files::{Scratch, write_random};
use relay_tests::relay::{RelayHandle, RelayOptions};
use relay_tests::{run_client, summary};

const T: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rate_is_a_cap_on_loopback() {
    let container = new_container("rate").await;
    let relay = RelayHandle::start(shared_azurite().storage(), RelayOptions::default());
    let dir = Scratch::new("rate");
    for (flag, mbit, size) in [
        ("--max-rate", 8.0, 4u64 << 20),
        ("--cap-mbps", 40.0, 16 << 20),
    ] {
        let file = dir.path(&format!("r{mbit}.bin"));
        let sha = write_random(&file, size, mbit as u64);
        let mut a: Vec<String> = vec![
            "upload".into(),
            file.to_str().unwrap_or_default().into(),
            "--json".into(),
            flag.into(),
            mbit.to_string(),
            "--block-size".into(),
            "5MiB".into(),
            "--no-warm-start".into(),
        ];
        a.extend(relay.client_args(&container));
        let out = run_client(&a, &[], T).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = summary(&out);
        let ms = s["files"][0]["clocks_ms"]["transfer_ms"]
            .as_u64()
            .unwrap_or_default()
            .max(1);
        let got = size as f64 * 8.0 / (ms as f64 / 1000.0) / 1e6;
        eprintln!("{flag} {mbit}: {got:.2} Mbit/s over {ms} ms");
        assert!(got <= mbit * 1.10, "{flag} {mbit}: {got:.2} Mbit/s");
        let name = format!("r{mbit}.bin");
        assert_eq!(blob_sha(&container, &name).await, (size, sha));
    }
    relay.stop().await;
}
