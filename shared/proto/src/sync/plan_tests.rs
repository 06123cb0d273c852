use super::*;
use crate::sync::entry::FileStat;

fn stat(size: u64, mtime_ns: i64) -> FileStat {
    FileStat {
        size,
        mtime_ns,
        identity: None,
    }
}

fn local(name: &str, mtime_ns: i64) -> Result<LocalEntry, Gap> {
    Ok(LocalEntry {
        name: name.into(),
        stat: stat(4, mtime_ns),
    })
}

fn remote(name: &str, etag: &str) -> Result<RemoteEntry, Gap> {
    Ok(RemoteEntry {
        name: name.into(),
        size: 4,
        last_modified: None,
        etag: etag.into(),
        vouched_sha256: None,
    })
}

/// The index of a machine that moved `names` at etag `e1`, mtime 1.
fn index(names: &'static [&'static str]) -> impl FnMut(&str) -> Option<IndexRecord> {
    move |name| {
        names.contains(&name).then(|| IndexRecord {
            etag: "e1".into(),
            sha256: "00".into(),
            stat: stat(4, 1),
        })
    }
}

#[test]
fn an_upload_sends_the_new_and_changed_and_names_the_blobs_to_delete() {
    let walk = vec![local("a", 1), local("b", 2), local("d", 1)];
    let listing = vec![remote("a", "e1"), remote("b", "e1"), remote("c", "e9")];
    let plan = UploadPlan::new(
        walk.into_iter(),
        listing.into_iter(),
        NameOrder::Utf8,
        index(&["a", "b", "d"]),
        CompareFlags::default(),
    );
    let decisions: Vec<UploadDecision> = plan.map(|d| d.expect("in order")).collect();
    let send = |name: &str, mtime, reason, listed| UploadDecision::Send {
        local: local(name, mtime).expect("entry"),
        reason,
        listed,
    };
    assert_eq!(
        decisions,
        [
            UploadDecision::Skip("a".into()),
            // Replaces only the version listed.
            send("b", 2, SendReason::ChangedLocally, remote("b", "e1").ok()),
            UploadDecision::Delete(DeleteCandidate::Remote {
                name: "c".into(),
                etag: "e9".into()
            }),
            // Sent before, since removed at the destination: sent again.
            send("d", 1, SendReason::New, None),
        ]
    );
}

#[test]
fn a_download_fetches_the_new_keeps_conflicts_and_knows_what_it_placed() {
    let listing = vec![remote("a", "e1"), remote("b", "e2"), remote("c", "e1")];
    let walk = vec![
        local("a", 1),
        local("b", 1),
        local("c", 5),
        local("x", 1),
        local("y", 1),
    ];
    let plan = DownloadPlan::new(
        listing.into_iter(),
        walk.into_iter(),
        NameOrder::Utf16,
        index(&["a", "b", "c", "x"]),
        CompareFlags::default(),
    );
    let decisions: Vec<DownloadDecision> = plan.map(|d| d.expect("in order")).collect();
    let entry = |r: Result<RemoteEntry, Gap>| r.expect("entry");
    assert_eq!(
        decisions,
        [
            DownloadDecision::Skip("a".into()),
            DownloadDecision::Fetch {
                remote: entry(remote("b", "e2")),
                reason: FetchReason::ChangedRemotely
            },
            DownloadDecision::Conflict {
                local: local("c", 5).expect("entry"),
                remote: entry(remote("c", "e1")),
                reason: ConflictReason::ChangedLocally
            },
            DownloadDecision::Delete(DeleteCandidate::Local {
                name: "x".into(),
                origin: Origin::Placed,
                stat: stat(4, 1),
            }),
            DownloadDecision::Delete(DeleteCandidate::Local {
                name: "y".into(),
                origin: Origin::Unknown,
                stat: stat(4, 1),
            }),
        ]
    );
}

#[test]
fn a_download_with_overwrite_replaces_a_changed_local_file() {
    let plan = DownloadPlan::new(
        vec![remote("c", "e1")].into_iter(),
        vec![local("c", 5)].into_iter(),
        NameOrder::Utf8,
        index(&["c"]),
        CompareFlags {
            checksum: false,
            overwrite: true,
        },
    );
    let decisions: Vec<_> = plan.map(|d| d.expect("in order")).collect();
    assert!(matches!(
        decisions[..],
        [DownloadDecision::Fetch {
            reason: FetchReason::Overwrite,
            ..
        }]
    ));
}

#[test]
fn a_local_file_changed_since_placed_is_marked_so_for_the_delete_rules() {
    let mut plan = DownloadPlan::new(
        std::iter::empty(),
        vec![local("x", 7)].into_iter(),
        NameOrder::Utf8,
        index(&["x"]),
        CompareFlags::default(),
    );
    assert_eq!(
        plan.next(),
        Some(Ok(DownloadDecision::Delete(DeleteCandidate::Local {
            name: "x".into(),
            origin: Origin::ChangedSincePlaced,
            // The walk's stat, carried for the delete's last check.
            stat: stat(4, 7),
        })))
    );
    assert_eq!(plan.next(), None);
    assert_eq!(
        plan.completion(),
        Completion {
            source: true,
            dest: true
        }
    );
}
