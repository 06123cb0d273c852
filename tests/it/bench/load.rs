//! The load bench's three scenarios at a size CI can afford (`loadbench` runs
//! them at full size): many clients with many small and some large files, a few
//! clients with one large file each, and the first again with the relay killed
//! and restarted mid-run. Every client must succeed, every blob must download
//! and hash to its file, and the relay process's peak RSS must stay inside the
//! memory bound its flags imply.

use relay_tests::azurite::shared_azurite;
use relay_tests::load::{self, Kill, Scenario};

const MIB: u64 = 1 << 20;

fn small(mut s: Scenario) -> Scenario {
    if s.small_files > 0 {
        s.small_files = 12;
        s.large_files = 2;
        s.large_bytes = (4 * MIB, 6 * MIB);
    }
    s.memory_budget = "64MiB".into();
    // Small windows so the bound is small enough to mean something here.
    s.relay_flags = [
        "--max-pending",
        "16",
        "--connection-window",
        "16MiB",
        "--stream-window",
        "8MiB",
        "--max-connections",
        "16",
    ]
    .iter()
    .map(|f| f.to_string())
    .collect();
    s
}

async fn check(s: Scenario) {
    let r = load::run(shared_azurite(), &s)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", r.render());
    assert!(r.problems.is_empty(), "{}", r.render());
    assert_eq!(r.verified, r.files, "{}", r.render());
    assert!(r.relay_peak_rss_bytes > 0, "no RSS read");
    assert!(
        r.relay_peak_rss_bytes <= r.memory_bound_bytes,
        "{}",
        r.render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients() {
    check(small(Scenario::many_clients(8, None))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_files() {
    check(small(Scenario::big_files(4, 24))).await;
}

/// The kill lands mid-run (after 30 of the 112 files were committed, so many
/// are in flight); whatever it interrupts is resumed or redone by the clients,
/// and the checks are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_across_a_relay_restart() {
    check(small(Scenario::many_clients(
        8,
        Some(Kill::AfterCommitted(30)),
    )))
    .await;
}

/// Eight clients, one connection slot: seven are told `busy` and must wait for
/// the slot (`--busy-wait`) instead of giving up, so every file still arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_beyond_the_connection_limit_wait_for_a_slot() {
    let mut s = small(Scenario::many_clients(8, None));
    let limit = s
        .relay_flags
        .iter()
        .position(|f| f == "--max-connections")
        .unwrap_or_else(|| panic!("no --max-connections flag to lower"));
    s.relay_flags[limit + 1] = "1".into();
    check(s).await;
}
