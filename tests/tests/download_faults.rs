//! Storage faults under a download through the relay (issue 50): the relay's
//! ranged reads retry 503s, resets and lost answers on the writer's schedule
//! and the bytes still come back exact; a refusal that retrying cannot cure
//! ends the download with a clear `storage_refused`, not a half file.

use std::net::SocketAddr;
use std::time::Duration;

use relay_proto::protocol::{Code, Message};
use relay_storage::blob::WriterOptions;
use relay_storage::retry::Backoff;
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::new_container;
use relay_tests::download::{fetch, fetch_of, upload_raw};
use relay_tests::hostile::raw_connect;
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule};
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use sha2::{Digest, Sha256};

const MIB: usize = 1 << 20;

fn quick_writer() -> WriterOptions {
    WriterOptions {
        backoff: Backoff {
            initial: Duration::from_millis(20),
            cap: Duration::from_millis(300),
            max_attempts: 20,
        },
        patience: relay_storage::watch::Patience::both(Duration::from_secs(10)),
        ..WriterOptions::default()
    }
}

async fn relay_behind(schedule: Schedule, tag: &str) -> (FaultProxy, RelayHandle, String) {
    let container = new_container(tag).await;
    let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
    let proxy = FaultProxy::start(azurite, schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), quick_writer());
    let relay = RelayHandle::start(
        storage,
        RelayOptions {
            limited_to: format!("{container}:rw"),
            ..Default::default()
        },
    );
    (proxy, relay, container)
}

#[tokio::test]
async fn ranged_reads_retry_busy_reset_and_lost_answers_and_the_bytes_are_exact() {
    let (proxy, relay, c) = relay_behind(Schedule::seeded(50), "dlfaults").await;
    let (_ep, conn) = raw_connect(&relay, "127.0.0.1").await.expect("connect");
    let data: Vec<u8> = (0..9 * MIB + 17)
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect();
    let sha = hex::encode(Sha256::digest(&data));
    upload_raw(&conn, LIMITED_TOKEN, &c, "f.bin", &data).await;
    // The faults only for the download's requests.
    proxy.set_schedule(Schedule {
        script: vec![
            (Op::GetBlob, Fault::ServerBusy),
            (Op::GetBlob, Fault::Reset),
            (Op::GetBlob, Fault::LostResponse),
            (Op::GetBlob, Fault::InternalError),
            (Op::GetProperties, Fault::OperationTimeout),
        ],
        ..Schedule::seeded(50)
    });
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "f.bin")).await;
    assert_eq!(hex::encode(Sha256::digest(&got.data)), sha);
    match got.end {
        // Three ranges and one Get Blob Properties, and the five faults
        // retried; the sealed blob's ranges are checked whole at the client.
        Some(Message::Sent(s)) => {
            assert_eq!(s.ranges_checked, 0);
            assert_eq!(s.requests, 4 + 5);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.stats.requests_of(Op::GetBlob), 3 + 4);
    relay.stop().await;
}

#[tokio::test]
async fn a_refused_read_ends_the_download_with_storage_refused() {
    let schedule = Schedule {
        script: vec![(Op::GetBlob, Fault::Status(403, "AuthorizationFailure"))],
        ..Schedule::seeded(51)
    };
    let (_proxy, relay, c) = relay_behind(schedule, "dlrefused").await;
    let (_ep, conn) = raw_connect(&relay, "127.0.0.1").await.expect("connect");
    let data = vec![7u8; MIB];
    upload_raw(&conn, LIMITED_TOKEN, &c, "f.bin", &data).await;
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "f.bin")).await;
    assert!(matches!(got.first, Message::Source(_)), "{:?}", got.first);
    assert!(got.data.is_empty());
    match got.end {
        Some(Message::Error(f)) => {
            assert_eq!(f.code, Code::StorageRefused);
            assert!(f.message.contains("403"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(relay.metric("blob_relay_fetches_failed_total"), Some(1));
    relay.stop().await;
}
