//! A blob in the way before any byte moved: is it this very file, already
//! committed under our seal? A re-run after an interrupted run (or a
//! replacement whose own commit moved the etag before its answer was lost) then
//! succeeds with nothing sent. One decision for the relay and for direct mode;
//! the look itself is `Upload::ours_in_the_way`.

use relay_storage::publish::{Destination, PublishError, may_learn_of, sealed_as};
use relay_storage::store::BlobProperties;

/// Whether a refusal from `Upload::prepare` may be our own earlier commit of
/// these bytes, and so worth one look at the blob. "Exists" (never overwrite)
/// and "changed" (replacing one version) may be; any other refusal stands.
pub fn may_be_ours(refusal: &PublishError) -> bool {
    matches!(
        refusal,
        PublishError::Exists(_) | PublishError::Changed { .. }
    )
}

/// What one look at the blob in the way decides: its properties when it holds
/// exactly the file hashing to `sha256_hex` (same size, that SHA-256 and a seal
/// over both under `dest.key`) and the writer may learn of that blob (they may
/// read the container, or they committed it: `publish::may_learn_of`), else
/// the refusal stands. So a writer who may not read learns nothing by guessing:
/// whatever `sha256_hex` is, the answer is the refusal.
pub fn settle(
    refusal: PublishError,
    found: Option<BlobProperties>,
    dest: &Destination<'_>,
    sha256_hex: &str,
) -> Result<BlobProperties, PublishError> {
    if !may_be_ours(&refusal) {
        return Err(refusal);
    }
    match found {
        Some(props) if may_learn_of(&props, dest) && sealed_as(&props, dest, sha256_hex) => {
            Ok(props)
        }
        _ => Err(refusal),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use relay_proto::id_key::{IdKey, Owner};
    use relay_storage::publish::{Existing, Writer};
    use relay_storage::store::Condition;

    use super::*;

    const SHA: &str = "ab12";
    const SIZE: u64 = 10;

    fn exists() -> PublishError {
        PublishError::Exists(Some(Existing {
            etag: "e1".into(),
            last_modified: None,
        }))
    }

    fn changed() -> PublishError {
        PublishError::Changed {
            found: Some("e2".into()),
            expected: "e1".into(),
        }
    }

    fn props(
        key: &IdKey,
        size: u64,
        sha: Option<&str>,
        sealed_for: Option<&str>,
    ) -> BlobProperties {
        BlobProperties {
            etag: "e2".into(),
            size,
            sha256: sha.map(str::to_string),
            seal: sealed_for.map(|s| key.seal("c", "b", size, s)),
            writer: None,
            last_modified: None,
        }
    }

    #[test]
    fn only_our_sealed_copy_of_these_bytes_settles_a_refusal() {
        let key = IdKey::from_bytes([7; 32]);
        let other_key = IdKey::from_bytes([8; 32]);
        let meta = BTreeMap::new();
        let owner = Owner::of_token("reader");
        let dest = Destination {
            container: "c",
            blob: "b",
            key: &key,
            writer: Writer {
                owner: &owner,
                reads: true,
            },
            size: SIZE,
            content_type: None,
            metadata: &meta,
            condition: &Condition::IfAbsent,
        };
        // (what was found, whether it is ours)
        let table: Vec<(&str, Option<BlobProperties>, bool)> = vec![
            ("gone since", None, false),
            ("ours", Some(props(&key, SIZE, Some(SHA), Some(SHA))), true),
            (
                "ours, upper-case hex",
                Some(props(&key, SIZE, Some("AB12"), Some(SHA))),
                true,
            ),
            (
                "no SHA-256",
                Some(props(&key, SIZE, None, Some(SHA))),
                false,
            ),
            ("no seal", Some(props(&key, SIZE, Some(SHA), None)), false),
            (
                "other bytes",
                Some(props(&key, SIZE, Some("cd34"), Some("cd34"))),
                false,
            ),
            (
                "another size",
                Some(props(&key, SIZE + 1, Some(SHA), Some(SHA))),
                false,
            ),
            (
                "another key's seal",
                Some(props(&other_key, SIZE, Some(SHA), Some(SHA))),
                false,
            ),
        ];
        for (name, found, ours) in table {
            for refusal in [exists, changed] {
                let got = settle(refusal(), found.clone(), &dest, SHA);
                match (ours, got) {
                    (true, Ok(p)) => assert_eq!(p.etag, "e2", "{name}"),
                    (false, Err(e)) => {
                        assert_eq!(e.to_string(), refusal().to_string(), "{name}")
                    }
                    (want, got) => panic!("{name}: ours={want}, got {got:?}"),
                }
            }
            // Other refusals stand whatever the blob holds.
            let got = settle(PublishError::Gone, found.clone(), &dest, SHA);
            assert!(matches!(got, Err(PublishError::Gone)), "{name}");
        }
    }

    #[test]
    fn only_exists_and_changed_may_be_ours() {
        assert!(may_be_ours(&exists()));
        assert!(may_be_ours(&changed()));
        assert!(!may_be_ours(&PublishError::Gone));
        assert!(!may_be_ours(&PublishError::HashMismatch {
            ours: "a".into(),
            who: "the client".into(),
            theirs: "b".into(),
        }));
    }
}
