//! Dropping a lab removes everything, also when the test panics, and kills
//! processes left running inside it.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use linklab::{LinkProfile, Side};

fn exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

#[test]
fn drop_deletes_namespaces_and_kills_members() {
    let Some(lab) = common::lab_or_skip("teardown", LinkProfile::new(1.0, 0.0, 0.0)) else {
        return;
    };
    let names = [lab.site_ns().to_owned(), lab.cloud_ns().to_owned()];
    assert!(names.iter().all(|n| exists(n)));
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    let mut child = lab.spawn_in(Side::Cloud, cmd).unwrap();
    drop(lab);
    let status = common::wait_bounded(&mut child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| !s.success()),
        "member process was killed"
    );
    assert!(names.iter().all(|n| !exists(n)), "namespaces deleted");
}

#[test]
fn panic_still_tears_down() {
    if let Err(e) = linklab::check_privileges() {
        eprintln!("SKIPPED panic_still_tears_down: {e:#}");
        return;
    }
    let names = Mutex::new(Vec::new());
    let result = std::panic::catch_unwind(|| {
        let lab = linklab::Lab::start(LinkProfile::new(1.0, 0.0, 10.0)).unwrap();
        names
            .lock()
            .unwrap()
            .extend([lab.site_ns().to_owned(), lab.cloud_ns().to_owned()]);
        panic!("test failure inside a lab");
    });
    assert!(result.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 2);
    assert!(
        names.iter().all(|n| !exists(n)),
        "namespaces deleted after panic"
    );
}
