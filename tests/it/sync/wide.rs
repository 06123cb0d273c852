//! A folder wider than the walk's in-memory bound (lowered here with
//! `RELAY_SYNC_SORT_WIDTH`, so its entries are sorted in runs spilled to a
//! temporary file and merged) syncs both ways exactly as a narrow one: every
//! blob and file byte for byte, and an unchanged re-run, wide or narrow,
//! sends and fetches nothing.

use relay_tests::blobs::blob_sha;
use relay_tests::download_client::{T, relay_flags, setup, tree};
use relay_tests::files::{Scratch, sha256_file, write_random};
use relay_tests::{client_command, summary};

use super::{ok, sync_args};

/// Files of the flat folder, beside folders whose names sort around `/`.
const FLAT: usize = 300;
const FOLDERS: [&str; 3] = ["d", "d.", "d-"];
/// The test's bound: the folder is some 19 runs wide.
const WIDTH: &str = "16";

fn names() -> Vec<String> {
    let mut names: Vec<String> = (0..FLAT).map(|i| format!("f{i}")).collect();
    names.extend(FOLDERS.iter().map(|f| format!("{f}/in")));
    names.extend(["d.b", "d0", "d-c"].map(String::from));
    names.push("\u{1F600}".into());
    names.push("\u{FF01}".into());
    names
}

async fn sync_width(
    way: &[String],
    src: &str,
    dest: &str,
    index: &std::path::Path,
    width: Option<&str>,
) -> serde_json::Value {
    let args = sync_args(way, src, dest, index, &[]);
    let envs: Vec<(&str, &str)> = width
        .map(|w| ("RELAY_SYNC_SORT_WIDTH", w))
        .into_iter()
        .collect();
    let out = tokio::time::timeout(T, client_command(&args, &envs).output())
        .await
        .unwrap_or_else(|_| panic!("sync did not finish within {T:?}"))
        .unwrap_or_else(|e| panic!("cannot run relay-client: {e}"));
    let v = summary(&out);
    ok(&out, &v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_wider_than_the_bound_syncs_both_ways_as_a_narrow_one() {
    let (relay, c) = setup("sync-wide", None).await;
    let dir = Scratch::new("sync-wide");
    let root = dir.path("src");
    for (i, name) in names().iter().enumerate() {
        write_random(&root.join(name), (i % 7) as u64 * 100, i as u64);
    }
    let n = names().len();
    let way = relay_flags(&relay);
    let (src, dest) = (format!("{}/", root.display()), format!("{c}/w"));
    let index = dir.path("up.sqlite");

    let y = sync_width(&way, &src, &dest, &index, Some(WIDTH)).await;
    assert_eq!(y["sent"], n, "{y}");
    for name in names() {
        let (_, sha) = blob_sha(&c, &format!("w/{name}")).await;
        assert_eq!(sha, sha256_file(&root.join(&name)), "{name}");
    }
    // Unchanged, sorted in runs and in memory: the same names, nothing sent.
    for width in [Some(WIDTH), None] {
        let y = sync_width(&way, &src, &dest, &index, width).await;
        assert_eq!(
            (y["skipped_unchanged"].as_u64(), y["sent"].as_u64()),
            (Some(n as u64), Some(0)),
            "{y}"
        );
        assert_eq!(y["bytes_read"], 0, "{y}");
    }

    // Down into a folder that the walk also finds wide.
    let out_dir = dir.path("out");
    let down = dir.path("down.sqlite");
    let from = format!("{c}/w");
    let to = out_dir.display().to_string();
    let y = sync_width(&way, &from, &to, &down, Some(WIDTH)).await;
    assert_eq!(y["fetched"], n, "{y}");
    assert_eq!(tree(&out_dir), tree(&root));
    for width in [Some(WIDTH), None] {
        let y = sync_width(&way, &from, &to, &down, width).await;
        assert_eq!(
            (y["skipped_unchanged"].as_u64(), y["fetched"].as_u64()),
            (Some(n as u64), Some(0)),
            "{y}"
        );
    }
}
