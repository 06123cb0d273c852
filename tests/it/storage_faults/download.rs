//! The read side against storage that misbehaves (the fault proxy in front of
//! Azurite), through the relay and with `--direct`.
//!
//! The matrix (`matrix!` below, one test per row, each run both ways with
//! the real client): 503 storms, resets and bodies cut short, a byte flipped
//! in an answer for each way a download is checked (`sealed`, `content_md5`,
//! `ranges`), a blob overwritten and one deleted between two of its ranges,
//! an answer and a body held past the stall timeout, a slow answer that
//! keeps moving, and a listing page failing past the retries with names
//! whose UTF-8 and UTF-16 orders differ across the page boundary. Every file
//! a download placed is hashed and compared with what storage holds.
//!
//! Then the relay on its own, over the raw protocol: its ranged reads retry
//! 503s, resets and lost answers on the writer's schedule and the bytes still
//! come back exact; a refusal that retrying cannot cure ends the download
//! with a clear `storage_refused`, not a half file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use relay_proto::protocol::{Code, Message};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{new_container, writer};
use relay_tests::download::{fetch, fetch_of, upload_raw};
use relay_tests::files::Scratch;
use relay_tests::proxy::{Fault, FaultProxy, Op, Schedule, quick_writer};
use relay_tests::raw_quic::Dial;
use relay_tests::read_faults::{Kind, Setup, Way, placed};
use relay_tests::relay::{LIMITED_TOKEN, RelayHandle, RelayOptions};
use relay_tests::{run_client, stderr, summary};
use sha2::{Digest, Sha256};

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

async fn relay_behind(schedule: Schedule, tag: &str) -> (FaultProxy, RelayHandle, String) {
    let container = new_container(tag).await;
    let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
    let proxy = FaultProxy::start(azurite, schedule).await;
    let storage = shared_azurite().storage_at(&proxy.url(), quick_writer(20));
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
    let (_ep, conn) = Dial::to(&relay).connect().await;
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
            (Op::GetBlob, Fault::OperationTimeout),
        ],
        ..Schedule::seeded(50)
    });
    // The proxy counted the upload's requests too: only the download's here.
    let properties = proxy.stats.requests_of(Op::GetProperties);
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "f.bin")).await;
    assert_eq!(hex::encode(Sha256::digest(&got.data)), sha);
    match got.end {
        // Three ranges (the first answering for the properties too), and the
        // five faults retried (the first range's, whose answer the Source
        // waits for); the sealed blob's ranges are checked whole at the
        // client.
        Some(Message::Sent(s)) => {
            assert_eq!(s.ranges_checked, 0);
            assert_eq!(s.requests, 3 + 5);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.stats.requests_of(Op::GetBlob), 3 + 5);
    assert_eq!(proxy.stats.requests_of(Op::GetProperties), properties);
    relay.stop().await;
}

/// A refusal of the first Get Blob (the one whose answer is the Source) and
/// one of a later range: either ends the download with a clear
/// `storage_refused`, not a half file (the first before any byte, as a
/// Reject; the later one after the Source, as an Error).
#[tokio::test]
async fn a_refused_read_ends_the_download_with_storage_refused() {
    let refused = || (Op::GetBlob, Fault::Status(403, "AuthorizationFailure"));
    let (proxy, relay, c) = relay_behind(Schedule::seeded(51), "dlrefused").await;
    let (_ep, conn) = Dial::to(&relay).connect().await;
    let data = vec![7u8; 9 * MIB];
    upload_raw(&conn, LIMITED_TOKEN, &c, "f.bin", &data).await;
    proxy.set_schedule(Schedule {
        script: vec![refused()],
        ..Schedule::seeded(51)
    });
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "f.bin")).await;
    assert!(got.data.is_empty());
    match &got.first {
        Message::Reject(f) => {
            assert_eq!(f.code, Code::StorageRefused);
            assert!(f.message.contains("403"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
    // The first range answers, the second is refused.
    proxy.set_schedule(Schedule {
        script: vec![(Op::GetBlob, Fault::Delay(Duration::ZERO)), refused()],
        ..Schedule::seeded(51)
    });
    let got = fetch(&conn, fetch_of(LIMITED_TOKEN, &c, "f.bin")).await;
    assert!(matches!(got.first, Message::Source(_)), "{:?}", got.first);
    assert!(got.data.len() < data.len());
    match got.end {
        Some(Message::Error(f)) => {
            assert_eq!(f.code, Code::StorageRefused);
            assert!(f.message.contains("403"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(relay.metric("blob_relay_fetches_failed_total"), Some(2));
    relay.stop().await;
}

// ---- The read-side matrix ----------------------------------------------------

/// One blob of a row: its name, size, how it is checked and its bytes' seed.
struct Spec {
    name: &'static str,
    size: usize,
    kind: Kind,
    seed: u8,
}

/// What a row does to a blob between its first range and the others (while
/// the proxy holds them).
#[derive(Clone, Copy)]
enum Change {
    Overwrite,
    Delete,
}

/// One row of the matrix.
struct Case {
    tag: &'static str,
    blobs: &'static [Spec],
    /// The faults, for the way's number of attempts.
    faults: fn(Way) -> Schedule,
    between_ranges: Option<Change>,
    /// The download's hang detector: a held read must be abandoned well
    /// before it (2 s stall timeout; a body read whole under one deadline was
    /// given 60 s more).
    hang: Duration,
    /// Checks of what the storage requests were, after the download.
    after: fn(&Setup),
}

const BIG: usize = 9 * MIB + 17;
const HELD: Duration = Duration::from_secs(45);
const PATIENT: Duration = Duration::from_secs(180);

fn one(kind: Kind) -> &'static [Spec] {
    match kind {
        Kind::Sealed => &[Spec {
            name: "p/sealed.bin",
            size: BIG,
            kind: Kind::Sealed,
            seed: 1,
        }],
        Kind::ContentMd5 => &[Spec {
            name: "p/md5.bin",
            size: BIG,
            kind: Kind::ContentMd5,
            seed: 2,
        }],
        Kind::Ranges => &[Spec {
            name: "p/ranges.bin",
            size: BIG,
            kind: Kind::Ranges,
            seed: 3,
        }],
    }
}

/// Names Azurite lists by UTF-16 code units: `p/😀` (D83D) before `p/！`
/// (FF01), the other way round by UTF-8 bytes (F0 after EF); with two names a
/// page the boundary falls between them.
const ORDERS_DIFFER: &[Spec] = &[
    Spec {
        name: "p/a.txt",
        size: 1000,
        kind: Kind::Sealed,
        seed: 4,
    },
    Spec {
        name: "p/\u{1F600}",
        size: 1001,
        kind: Kind::Sealed,
        seed: 5,
    },
    Spec {
        name: "p/\u{FF01}",
        size: 1002,
        kind: Kind::Sealed,
        seed: 6,
    },
    Spec {
        name: "p/\u{FF5A}",
        size: 1003,
        kind: Kind::Sealed,
        seed: 7,
    },
];

fn script(script: Vec<(Op, Fault)>) -> Schedule {
    Schedule {
        script,
        ..Schedule::seeded(56)
    }
}

fn nothing_more(_: &Setup) {}

/// Runs `case` one way: blobs put, faults set, the download run; every file
/// placed hashed against what storage holds, nothing else placed.
async fn run(way: Way, case: &Case) {
    let setup = Setup::new(way, case.tag).await;
    let mut want: BTreeMap<String, (String, Kind)> = BTreeMap::new();
    for b in case.blobs {
        let sha = setup.put(b.name, &pattern(b.size, b.seed), b.kind).await;
        want.insert(b.name.to_string(), (sha, b.kind));
    }
    setup.proxy.set_schedule((case.faults)(way));
    if case.between_ranges.is_some() {
        setup.proxy.hold_after(Op::GetBlob, 1);
    }
    let out_dir = Scratch::new("rf-out");
    let args = setup.download_args(&format!("{}/p", setup.container), &out_dir.0);
    let hang = case.hang;
    let download = tokio::spawn(async move { run_client(&args, &[], hang).await });
    let mut gone = None;
    if let Some(change) = case.between_ranges {
        setup.proxy.wait_held(1, case.hang).await;
        let b = &case.blobs[0];
        match change {
            Change::Overwrite => {
                let sha = setup
                    .put(b.name, &pattern(5 * MIB + 3, b.seed + 100), b.kind)
                    .await;
                want.insert(b.name.to_string(), (sha, b.kind));
            }
            Change::Delete => {
                writer(&setup.container, b.name)
                    .delete()
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                want.remove(b.name);
                gone = Some(b.name);
            }
        }
        setup.proxy.release();
    }
    let out = download.await.unwrap_or_else(|e| panic!("{e}"));
    let v = summary(&out);
    let what = format!("{way:?} {}", case.tag);
    assert_eq!(
        out.status.code(),
        Some(if gone.is_some() { 1 } else { 0 }),
        "{what}: {}",
        stderr(&out)
    );
    for f in v["files"].as_array().cloned().unwrap_or_default() {
        let blob = f["blob"].as_str().unwrap_or_default();
        if Some(blob) == gone {
            assert_eq!(f["status"], "failed", "{what}: {f}");
            assert_eq!(f["error"]["code"], "not_found", "{what}: {f}");
            continue;
        }
        let (_, kind) = &want[blob];
        assert_eq!(f["status"], "downloaded", "{what}: {f}");
        assert_eq!(f["check"], kind.check(), "{what}: {f}");
    }
    let placed = placed(&out_dir.0);
    let expected: Vec<(String, String)> = want
        .iter()
        .map(|(name, (sha, _))| (name.clone(), sha.clone()))
        .collect();
    assert_eq!(placed, expected, "{what}: every file placed, hashed");
    (case.after)(&setup);
    setup.stop().await;
}

macro_rules! matrix {
    ($($name:ident: $case:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let case = $case;
            for way in [Way::Relay, Way::Direct] {
                run(way, &case).await;
            }
        }
    )*};
}

matrix! {
    storms_of_503_and_500_are_retried: Case {
        tag: "rf-storm",
        blobs: one(Kind::Ranges),
        faults: |_| script(vec![
            (Op::GetBlob, Fault::ServerBusy),
            (Op::GetBlob, Fault::OperationTimeout),
            (Op::GetBlob, Fault::InternalError),
            (Op::GetBlob, Fault::ServerBusy),
            (Op::ListBlobs, Fault::ServerBusy),
            (Op::ListBlobs, Fault::ServerBusy),
            (Op::ListBlobs, Fault::InternalError),
            (Op::ListBlobs, Fault::ServerBusy),
        ]),
        between_ranges: None,
        hang: PATIENT,
        after: |s| assert_eq!(s.proxy.faults(), 8),
    };
    resets_and_short_bodies_are_retried: Case {
        tag: "rf-reset",
        blobs: one(Kind::Sealed),
        faults: |_| script(vec![
            (Op::GetBlob, Fault::Reset),
            (Op::GetBlob, Fault::ShortBody),
            (Op::GetBlob, Fault::LostResponse),
            (Op::ListBlobs, Fault::Reset),
            (Op::ListBlobs, Fault::ShortBody),
        ]),
        between_ranges: None,
        hang: PATIENT,
        after: |s| assert_eq!(s.proxy.faults(), 5),
    };
    a_flipped_byte_of_a_sealed_blob_is_caught_and_read_again: Case {
        tag: "rf-flip-sealed",
        blobs: one(Kind::Sealed),
        faults: |_| Schedule { corrupt_answers: vec![Op::GetBlob], ..script(vec![]) },
        between_ranges: None,
        hang: PATIENT,
        after: flipped_once,
    };
    a_flipped_byte_of_a_blob_with_content_md5_is_caught_and_read_again: Case {
        tag: "rf-flip-md5",
        blobs: one(Kind::ContentMd5),
        faults: |_| Schedule { corrupt_answers: vec![Op::GetBlob], ..script(vec![]) },
        between_ranges: None,
        hang: PATIENT,
        after: flipped_once,
    };
    a_flipped_byte_of_a_range_is_caught_by_its_md5_and_read_again: Case {
        tag: "rf-flip-ranges",
        blobs: one(Kind::Ranges),
        faults: |_| Schedule { corrupt_answers: vec![Op::GetBlob], ..script(vec![]) },
        between_ranges: None,
        hang: PATIENT,
        after: flipped_once,
    };
    a_blob_overwritten_between_ranges_is_read_again_whole: Case {
        tag: "rf-overwrite",
        blobs: one(Kind::Sealed),
        faults: |_| script(vec![]),
        between_ranges: Some(Change::Overwrite),
        hang: PATIENT,
        after: nothing_more,
    };
    a_blob_deleted_between_ranges_fails_and_nothing_is_placed: Case {
        tag: "rf-delete",
        blobs: one(Kind::Ranges),
        faults: |_| script(vec![]),
        between_ranges: Some(Change::Delete),
        hang: PATIENT,
        after: nothing_more,
    };
    an_answer_held_before_its_head_is_abandoned_and_sent_again: Case {
        tag: "rf-hold-answer",
        blobs: one(Kind::Sealed),
        faults: |_| script(vec![
            (Op::ListBlobs, Fault::HoldAnswer),
            (Op::GetBlob, Fault::HoldAnswer),
        ]),
        between_ranges: None,
        hang: HELD,
        after: abandoned_twice,
    };
    an_answer_held_halfway_through_its_body_is_abandoned_and_sent_again: Case {
        tag: "rf-hold-body",
        blobs: one(Kind::Ranges),
        faults: |_| script(vec![
            (Op::ListBlobs, Fault::HoldBody),
            (Op::GetBlob, Fault::HoldBody),
        ]),
        between_ranges: None,
        hang: HELD,
        after: abandoned_twice,
    };
    a_slow_answer_that_keeps_moving_is_never_abandoned: Case {
        tag: "rf-trickle",
        blobs: &[Spec { name: "p/slow.bin", size: MIB, kind: Kind::Ranges, seed: 8 }],
        // 16 pieces 0.4 s apart: over 6 s in all, never 2 s without a byte.
        faults: |_| script(vec![(Op::GetBlob, Fault::Trickle(Duration::from_millis(400)))]),
        between_ranges: None,
        hang: PATIENT,
        after: |s| assert_eq!(s.proxy.stats.requests_of(Op::GetBlob), 1, "read once"),
    };
    a_listing_page_failing_past_the_retries_is_taken_up_at_its_marker: Case {
        tag: "rf-list",
        blobs: ORDERS_DIFFER,
        faults: |way| {
            let mut faults = vec![(Op::ListBlobs, Fault::Delay(Duration::ZERO))];
            faults.extend((0..way.attempts()).map(|_| (Op::ListBlobs, Fault::ServerBusy)));
            Schedule { list_page: Some(2), ..script(faults) }
        },
        between_ranges: None,
        hang: PATIENT,
        after: |s| {
            // Page 1, page 2 failing every attempt, then page 2 again from
            // its marker: the listing was not started over.
            assert_eq!(
                s.proxy.stats.requests_of(Op::ListBlobs),
                1 + u64::from(s.way.attempts()) + 1
            );
        },
    };
}

const TIMEOUTS: &str = "blob_relay_azure_retries_total{status=\"timeout\"}";

/// One answer's byte was flipped on its way to the reader.
fn flipped_once(s: &Setup) {
    assert_eq!(
        s.proxy.stats.answers_corrupted.load(Ordering::SeqCst),
        1,
        "{:?}",
        s.way
    );
}

/// Both held answers (a listing's and a range's) were given up by the
/// reader, not waited for, and counted (at least those two: a busy machine
/// may slow another answer past the stall timeout too).
fn abandoned_twice(s: &Setup) {
    assert_eq!(s.proxy.stats.given_up(), 2, "{:?}", s.way);
    if let Some(relay) = &s.relay {
        let timeouts = relay.metric(TIMEOUTS).unwrap_or(0);
        assert!(timeouts >= 2, "{timeouts}");
    }
}

/// Storage that never answers `--direct`'s first requests (its access check,
/// Get Blob Properties from several connections at once): each attempt is
/// given up after the stall timeout too, and the run stops with a setup error
/// (exit 2) well within the hang detector, not after 30 s an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_modes_access_check_keeps_the_stall_timeout() {
    let setup = Setup::new(Way::Direct, "rf-check").await;
    setup.put("p/x.bin", &pattern(1000, 9), Kind::Ranges).await;
    setup.proxy.set_schedule(Schedule {
        chances: vec![(Op::GetProperties, 1.0, Fault::HoldAnswer)],
        ..Schedule::seeded(56)
    });
    let out_dir = Scratch::new("rf-out");
    let args = setup.download_args(&format!("{}/p", setup.container), &out_dir.0);
    let out = run_client(&args, &[], HELD).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(placed(&out_dir.0).is_empty());
    assert!(setup.proxy.stats.given_up() >= 2);
    setup.stop().await;
}
