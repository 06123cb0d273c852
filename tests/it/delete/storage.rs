//! Storage's delete of one version, as direct mode uses it: `If-Match` the
//! listed ETag, a typed answer for each of storage's (Azurite's) outcomes.

use relay_storage::delete::{DeleteError, Deletion};
use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::{blob_exists, blob_sha, new_container, put_sealed};
use sha2::{Digest, Sha256};

/// The listed version goes; a blob gone is `NotFound`; a blob written after
/// the listing (another ETag) is `Changed` and kept, holding its new bytes;
/// no ETag, `*` or a list is refused before any request.
#[tokio::test]
async fn storage_deletes_only_the_version_it_is_given() {
    let c = new_container("stdel").await;
    let storage = shared_azurite().storage();
    let first = put_sealed(&c, "d/a", b"one", "00", "none").await;
    let deleter = storage.deleter(&c, "d/a").unwrap_or_else(|e| panic!("{e}"));
    let outcome = deleter.delete_if_match(&first).await;
    assert!(matches!(outcome, Ok(Deletion::Deleted)), "{outcome:?}");
    assert!(!blob_exists(&c, "d/a").await);
    let again = deleter.delete_if_match(&first).await;
    assert!(matches!(again, Ok(Deletion::NotFound)), "{again:?}");

    let old = put_sealed(&c, "d/b", b"old", "00", "none").await;
    let new_bytes = b"new bytes, written after the listing";
    let new = put_sealed(&c, "d/b", new_bytes, "00", "none").await;
    assert_ne!(old, new);
    let deleter = storage.deleter(&c, "d/b").unwrap_or_else(|e| panic!("{e}"));
    let kept = deleter.delete_if_match(&old).await;
    assert!(matches!(kept, Ok(Deletion::Changed)), "{kept:?}");
    let (n, sha) = blob_sha(&c, "d/b").await;
    assert_eq!(n, new_bytes.len() as u64);
    assert_eq!(sha, hex::encode(Sha256::digest(new_bytes)));
    // The listing's bare form of the ETag names the same version.
    let bare = deleter.delete_if_match(new.trim_matches('"')).await;
    assert!(matches!(bare, Ok(Deletion::Deleted)), "{bare:?}");

    for etag in ["", "\"\"", "*", "\"*\"", "\"a\",\"b\"", "a,b"] {
        let refused = deleter.delete_if_match(etag).await;
        assert!(
            matches!(refused, Err(DeleteError::NoEtag)),
            "{etag:?}: {refused:?}"
        );
    }
}
