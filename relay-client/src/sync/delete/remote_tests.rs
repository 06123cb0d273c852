//! The remote side's ordering, concurrency and refusal logic, against an
//! in-process double (the real relay's Delete is tested end to end).
use super::*;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::super::report::DeleteEvent;

/// Answers by name (`Deleted` unless told), and watches how many deletes
/// are in flight at once.
#[derive(Default)]
pub(crate) struct Double {
    pub answers: HashMap<String, Result<RemoteOutcome, RemoteDeleteError>>,
    pub calls: Mutex<Vec<(String, String)>>,
    now: AtomicUsize,
    pub most: AtomicUsize,
}

#[async_trait::async_trait]
impl RemoteDeleter for Double {
    async fn delete(&self, name: &str, etag: &str) -> Result<RemoteOutcome, RemoteDeleteError> {
        self.calls
            .lock()
            .expect("calls")
            .push((name.to_string(), etag.to_string()));
        let answer = self
            .answers
            .get(name)
            .cloned()
            .unwrap_or(Ok(RemoteOutcome::Deleted));
        // A refusal comes back at once (the relay refuses before storage).
        if matches!(answer, Ok(RemoteOutcome::Refused { .. })) {
            return answer;
        }
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // Stay in flight a while, so the others get started meanwhile.
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        self.now.fetch_sub(1, Ordering::SeqCst);
        answer
    }
}

pub(crate) fn blob(i: usize) -> DeleteCandidate {
    DeleteCandidate::Remote {
        name: format!("b{i:04}"),
        etag: format!("\"0x{i}\""),
    }
}

fn ok(n: usize) -> impl Iterator<Item = Result<DeleteCandidate, std::io::Error>> {
    (0..n).map(|i| Ok(blob(i)))
}

#[tokio::test]
async fn every_blob_is_deleted_once_with_its_listed_etag_a_few_at_a_time() {
    let double = Arc::new(Double::default());
    let (mut summary, mut events) = (DeleteSummary::default(), Vec::<DeleteEvent>::new());
    run(ok(100), double.clone(), &mut summary, &mut events)
        .await
        .expect("no stop");
    let mut calls = double.calls.lock().expect("calls").clone();
    calls.sort();
    let want: Vec<_> = (0..100)
        .map(|i| (format!("b{i:04}"), format!("\"0x{i}\"")))
        .collect();
    assert_eq!(calls, want);
    assert_eq!(summary.deleted, 100);
    assert_eq!(events.len(), 100);
    let most = double.most.load(Ordering::SeqCst);
    assert!((2..=IN_FLIGHT).contains(&most), "{most} in flight at once");
}

#[tokio::test]
async fn each_answer_is_counted_as_what_it_says() {
    let mut double = Double::default();
    double
        .answers
        .insert("b0001".into(), Ok(RemoteOutcome::AlreadyGone));
    double
        .answers
        .insert("b0002".into(), Ok(RemoteOutcome::Changed));
    double.answers.insert(
        "b0003".into(),
        Err(RemoteDeleteError("connection lost".into())),
    );
    let (mut summary, mut events) = (DeleteSummary::default(), Vec::<DeleteEvent>::new());
    run(ok(5), Arc::new(double), &mut summary, &mut events)
        .await
        .expect("no stop");
    let want = DeleteSummary {
        deleted: 2,
        already_gone: 1,
        kept_changed: 1,
        failed: 1,
        ..DeleteSummary::default()
    };
    assert_eq!(summary, want);
    let failed = events.iter().find(|e| e.name == "b0003").expect("event");
    assert_eq!(failed.outcome, Outcome::Failed("connection lost".into()));
}

/// A refusal (no delete grant) stops the batch: no delete is started after
/// it comes back, those in flight finish and are counted, and the refusal
/// is one error, not an event per blob.
#[tokio::test]
async fn the_first_refusal_stops_every_delete() {
    let mut double = Double::default();
    for i in [5, 6, 40] {
        double.answers.insert(
            format!("b{i:04}"),
            Ok(RemoteOutcome::Refused {
                reason: "no delete grant".into(),
            }),
        );
    }
    let double = Arc::new(double);
    let (mut summary, mut events) = (DeleteSummary::default(), Vec::<DeleteEvent>::new());
    let stop = run(ok(100), double.clone(), &mut summary, &mut events).await;
    assert_eq!(stop, Err(Stop::Refused("no delete grant".into())));
    let calls = double.calls.lock().expect("calls").clone();
    // Started before the refusal came back: at most the window after it.
    assert!(
        calls.len() <= 6 + IN_FLIGHT,
        "{} deletes started",
        calls.len()
    );
    let last = calls.iter().map(|(n, _)| n.clone()).max().expect("some");
    assert!(last < format!("b{:04}", 6 + IN_FLIGHT), "{last}");
    assert!(events.iter().all(|e| e.outcome == Outcome::Deleted));
    assert_eq!(summary.deleted as usize, events.len());
    assert_eq!(summary.deleted as usize + 2, calls.len());
}

#[tokio::test]
async fn a_candidate_that_cannot_be_read_back_stops_the_batch() {
    let double = Arc::new(Double::default());
    let items = (0..10).map(|i| {
        if i == 3 {
            Err(std::io::Error::other("disk"))
        } else {
            Ok(blob(i))
        }
    });
    let (mut summary, mut events) = (DeleteSummary::default(), Vec::<DeleteEvent>::new());
    let stop = run(items, double.clone(), &mut summary, &mut events).await;
    assert_eq!(stop, Err(Stop::Spill("disk".into())));
    assert_eq!(double.calls.lock().expect("calls").len(), 3);
    assert_eq!(summary.deleted, 3);
}

/// A deleter that panics on one name: that delete is a failure under its
/// own name, and the others go on.
struct Panics;

#[async_trait::async_trait]
impl RemoteDeleter for Panics {
    async fn delete(&self, name: &str, _etag: &str) -> Result<RemoteOutcome, RemoteDeleteError> {
        assert_ne!(name, "b0002", "a deleter's bug");
        Ok(RemoteOutcome::Deleted)
    }
}

#[tokio::test]
async fn a_delete_that_panics_fails_under_its_name() {
    let (mut summary, mut events) = (DeleteSummary::default(), Vec::<DeleteEvent>::new());
    run(ok(4), Arc::new(Panics), &mut summary, &mut events)
        .await
        .expect("no stop");
    assert_eq!((summary.deleted, summary.failed), (3, 1));
    let failed = events.iter().find(|e| e.name == "b0002").expect("named");
    assert!(matches!(failed.outcome, Outcome::Failed(_)), "{failed:?}");
}
