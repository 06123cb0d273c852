//! Reading back what the tests uploaded: every assertion on a blob goes through
//! Azurite, never through what the client or relay claimed.

use relay_storage::blob::BlobWriter;

use crate::azurite::shared_azurite;

pub fn writer(container: &str, blob: &str) -> BlobWriter {
    shared_azurite()
        .storage()
        .writer(container, blob)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A Put Blob straight to storage (not through the relay): its Content-MD5
/// set by storage, its `sha256` and seal metadata what the caller says (a
/// forged or a mismatched seal, as a storage writer could leave it). Returns
/// the ETag.
pub async fn put_sealed(container: &str, name: &str, data: &[u8], sha: &str, seal: &str) -> String {
    let meta = std::collections::BTreeMap::new();
    writer(container, name)
        .put_blob(
            bytes::Bytes::copy_from_slice(data),
            &relay_storage::store::Commit {
                sha256_hex: sha,
                seal,
                content_type: None,
                content_md5: None,
                metadata: &meta,
                condition: &relay_storage::store::Condition::Always,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("put {name}: {e}"))
}

/// Downloads the committed blob: (length, SHA-256 hex).
pub async fn blob_sha(container: &str, blob: &str) -> (u64, String) {
    let (n, h) = writer(container, blob)
        .content_sha256()
        .await
        .unwrap_or_else(|e| panic!("download {blob}: {e}"));
    (n, hex::encode(h))
}

/// The committed blob's Content-MD5 property, hex (`None`: it has none).
pub async fn blob_content_md5(container: &str, blob: &str) -> Option<String> {
    writer(container, blob)
        .content_md5()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .map(hex::encode)
}

/// Whether a committed blob of this name exists.
pub async fn blob_exists(container: &str, blob: &str) -> bool {
    writer(container, blob)
        .properties()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .is_some()
}

/// A fresh container for one test.
pub async fn new_container(tag: &str) -> String {
    let c = crate::unique_container(tag);
    shared_azurite()
        .storage()
        .ensure_container(&c)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c
}
