//! What an Offer must satisfy before any Azure call, as one pure function: protocol
//! version, container and blob names, metadata, the manifest hash, the content type,
//! the block plan and the largest block the relay will buffer. The relay checks the
//! token (which needs its TokenStore) and then calls [`check_offer`]; having no I/O,
//! it is unit-tested by a table and fuzzed (`fuzz/`, docs/FUZZING.md).

use crate::blob_name::{validate_blob_name, validate_container, validate_metadata};
use crate::limits::PROTOCOL_VERSION;
use crate::plan::{BlockPlan, PlanError};
use crate::protocol::{Code, Failure, Offer};
use crate::size::format_size;

/// Longest content type accepted, in bytes.
pub const MAX_CONTENT_TYPE_LEN: usize = 256;

/// The relay's side of the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferLimits {
    /// Block size planned when the Offer asks for none.
    pub default_block_size: u64,
    /// Largest block the relay accepts: its memory budget. (`Budget::fits` counts in
    /// KiB, but planned blocks are whole MiB, so "≤ the budget's bytes" is the same.)
    pub max_block_bytes: u64,
}

/// A protocol version the relay does not speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("protocol version {0} not supported (relay speaks {PROTOCOL_VERSION})")]
pub struct UnsupportedVersion(pub u32);

impl From<UnsupportedVersion> for Failure {
    fn from(e: UnsupportedVersion) -> Self {
        Failure::new(Code::UnsupportedVersion, e.to_string())
    }
}

/// The protocol version alone, for every first frame (Offer, Fetch, List): the
/// relay checks it before the token, so a client too old or too new hears that
/// first.
pub fn check_version(version: u32) -> Result<(), UnsupportedVersion> {
    if version != PROTOCOL_VERSION {
        return Err(UnsupportedVersion(version));
    }
    Ok(())
}

/// Every rule but the token, in the order the relay has always applied them; the
/// first broken rule is the Reject's code and message.
pub fn check_offer(offer: &Offer, limits: &OfferLimits) -> Result<BlockPlan, Failure> {
    check_version(offer.version)?;
    validate_container(&offer.container)
        .map_err(|e| Failure::new(Code::InvalidName, e.to_string()))?;
    validate_blob_name(&offer.blob).map_err(|e| Failure::new(Code::InvalidName, e.to_string()))?;
    validate_metadata(&offer.metadata)
        .map_err(|e| Failure::new(Code::InvalidOffer, e.to_string()))?;
    if let Some(h) = &offer.sha256
        && (h.len() != 64 || hex::decode(h).is_err())
    {
        return Err(Failure::new(
            Code::InvalidOffer,
            "sha256 must be 64 hex digits",
        ));
    }
    if let Some(ct) = &offer.content_type
        && (ct.len() > MAX_CONTENT_TYPE_LEN || ct.chars().any(char::is_control))
    {
        return Err(Failure::new(Code::InvalidOffer, "invalid content type"));
    }
    let requested = offer.block_size.unwrap_or(limits.default_block_size);
    let plan = BlockPlan::new(offer.size, requested).map_err(|e| match e {
        PlanError::TooLarge { .. } => Failure::new(Code::TooLarge, e.to_string()),
        PlanError::BadBlockSize(_) => Failure::new(Code::InvalidOffer, e.to_string()),
    })?;
    // The largest buffer this file needs is its first block: min(block size,
    // size). A file smaller than a block is admitted by its own size, so a relay
    // with a small budget still takes small files.
    if plan.block_len(0) > limits.max_block_bytes {
        return Err(Failure::new(
            Code::TooLarge,
            format!(
                "block size {} exceeds the relay's memory budget {}",
                format_size(plan.block_size),
                format_size(limits.max_block_bytes)
            ),
        ));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{
        DEFAULT_BLOCK_SIZE, GIB, MAX_BLOB_SIZE, MAX_BLOCK_SIZE, MAX_BLOCKS, MIB, MIN_BLOCK_SIZE,
        TIB,
    };
    use crate::protocol::{Overwrite, Secret};

    const LIMITS: OfferLimits = OfferLimits {
        default_block_size: DEFAULT_BLOCK_SIZE,
        max_block_bytes: GIB,
    };

    fn offer() -> Offer {
        Offer {
            version: PROTOCOL_VERSION,
            token: Secret("t".into()),
            container: "data".into(),
            blob: "dir/file.bin".into(),
            size: 10,
            content_type: Some("application/octet-stream".into()),
            metadata: [("project".to_string(), "alpha 1".to_string())].into(),
            overwrite: Overwrite::Never,
            sha256: Some("ab".repeat(32)),
            block_size: None,
            put_md5: false,
            progress: false,
            eager: true,
        }
    }

    type Edit = fn(&mut Offer);

    /// (what, edit of a good Offer, expected: Ok(block size) or Err(code)).
    /// Long on purpose: it is the rule table, one row per case.
    #[test]
    fn table() {
        let cases: Vec<(&str, Edit, Result<u64, Code>)> = vec![
            ("good", |_| {}, Ok(DEFAULT_BLOCK_SIZE)),
            (
                "no optional fields",
                |o| {
                    o.content_type = None;
                    o.metadata.clear();
                    o.sha256 = None;
                },
                Ok(DEFAULT_BLOCK_SIZE),
            ),
            ("empty file", |o| o.size = 0, Ok(DEFAULT_BLOCK_SIZE)),
            (
                "version 0",
                |o| o.version = 0,
                Err(Code::UnsupportedVersion),
            ),
            (
                "version 2",
                |o| o.version = 2,
                Err(Code::UnsupportedVersion),
            ),
            (
                "version before names",
                |o| {
                    o.version = 9;
                    o.container = "X".into();
                },
                Err(Code::UnsupportedVersion),
            ),
            (
                "container upper case",
                |o| o.container = "Data".into(),
                Err(Code::InvalidName),
            ),
            (
                "container too short",
                |o| o.container = "ab".into(),
                Err(Code::InvalidName),
            ),
            (
                "container --",
                |o| o.container = "a--b".into(),
                Err(Code::InvalidName),
            ),
            (
                "blob empty",
                |o| o.blob = String::new(),
                Err(Code::InvalidName),
            ),
            (
                "blob ..",
                |o| o.blob = "a/../b".into(),
                Err(Code::InvalidName),
            ),
            (
                "blob control",
                |o| o.blob = "a\u{1}b".into(),
                Err(Code::InvalidName),
            ),
            (
                "blob backslash",
                |o| o.blob = "a\\b".into(),
                Err(Code::InvalidName),
            ),
            (
                "blob 1024 chars",
                |o| o.blob = "é".repeat(1024),
                Ok(DEFAULT_BLOCK_SIZE),
            ),
            (
                "blob 1025 chars",
                |o| o.blob = "a".repeat(1025),
                Err(Code::InvalidName),
            ),
            (
                "names before metadata",
                |o| {
                    o.blob = "a/".into();
                    o.metadata.insert("sha256".into(), "x".into());
                },
                Err(Code::InvalidName),
            ),
            (
                "metadata sha256 reserved",
                |o| {
                    o.metadata.insert("Sha256".into(), "x".into());
                },
                Err(Code::InvalidOffer),
            ),
            (
                "metadata bad name",
                |o| {
                    o.metadata.insert("1x".into(), "v".into());
                },
                Err(Code::InvalidOffer),
            ),
            (
                "metadata non-ASCII value",
                |o| {
                    o.metadata.insert("k".into(), "ü".into());
                },
                Err(Code::InvalidOffer),
            ),
            (
                "metadata over 8 KiB",
                |o| {
                    o.metadata.insert("k".into(), "v".repeat(8200));
                },
                Err(Code::InvalidOffer),
            ),
            (
                "sha256 short",
                |o| o.sha256 = Some("ab".into()),
                Err(Code::InvalidOffer),
            ),
            (
                "sha256 not hex",
                |o| o.sha256 = Some("zz".repeat(32)),
                Err(Code::InvalidOffer),
            ),
            (
                "sha256 upper case hex",
                |o| o.sha256 = Some("AB".repeat(32)),
                Ok(DEFAULT_BLOCK_SIZE),
            ),
            (
                "sha256 multi-byte, 64 bytes",
                |o| o.sha256 = Some("é".repeat(32)),
                Err(Code::InvalidOffer),
            ),
            (
                "content type control",
                |o| {
                    o.content_type = Some("text/plain\r\nX-Evil: 1".into());
                },
                Err(Code::InvalidOffer),
            ),
            (
                "content type 256",
                |o| o.content_type = Some("a".repeat(256)),
                Ok(DEFAULT_BLOCK_SIZE),
            ),
            (
                "content type 257",
                |o| o.content_type = Some("a".repeat(257)),
                Err(Code::InvalidOffer),
            ),
            (
                "block size 4 MiB",
                |o| o.block_size = Some(4 * MIB),
                Err(Code::InvalidOffer),
            ),
            (
                "block size 5 MiB",
                |o| o.block_size = Some(MIN_BLOCK_SIZE),
                Ok(MIN_BLOCK_SIZE),
            ),
            (
                "block size rounded up",
                |o| o.block_size = Some(5 * MIB + 1),
                Ok(6 * MIB),
            ),
            (
                "block size 4001 MiB",
                |o| o.block_size = Some(4001 * MIB),
                Err(Code::InvalidOffer),
            ),
            (
                "block size over budget",
                |o| {
                    o.size = 2 * GIB;
                    o.block_size = Some(GIB + MIB)
                },
                Err(Code::TooLarge),
            ),
            (
                "block size over budget, file within it",
                |o| o.block_size = Some(GIB + MIB),
                Ok(GIB + MIB),
            ),
            ("block size = budget", |o| o.block_size = Some(GIB), Ok(GIB)),
            (
                "grows to 50,000 blocks",
                |o| o.size = 10 * TIB,
                Ok(210 * MIB),
            ),
            (
                "grown past the budget",
                |o| o.size = 100 * TIB,
                Err(Code::TooLarge),
            ),
            (
                "larger than a blob",
                |o| o.size = MAX_BLOB_SIZE + 1,
                Err(Code::TooLarge),
            ),
            ("u64::MAX bytes", |o| o.size = u64::MAX, Err(Code::TooLarge)),
        ];
        for (what, edit, want) in cases {
            let mut o = offer();
            edit(&mut o);
            let got = check_offer(&o, &LIMITS);
            match (&got, want) {
                (Ok(plan), Ok(bs)) => {
                    assert_eq!(plan.block_size, bs, "{what}");
                    assert_eq!(plan.size, o.size, "{what}");
                    assert!(plan.block_count() <= MAX_BLOCKS, "{what}");
                }
                (Err(f), Err(code)) => {
                    assert_eq!(f.code, code, "{what}: {}", f.message);
                    assert!(!f.message.is_empty(), "{what}");
                }
                _ => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn relay_limits() {
        // A relay configured with 8 MiB blocks plans them when the Offer asks for none.
        let small = OfferLimits {
            default_block_size: 8 * MIB,
            max_block_bytes: 8 * MIB,
        };
        assert_eq!(
            check_offer(&offer(), &small).map(|p| p.block_size),
            Ok(8 * MIB)
        );
        // A budget below the block size refuses a file with a block that large,
        // with both sizes named...
        let tiny = OfferLimits {
            default_block_size: DEFAULT_BLOCK_SIZE,
            max_block_bytes: MIB,
        };
        let mut large = offer();
        large.size = 20 * MIB;
        let f = check_offer(&large, &tiny).expect_err("over budget");
        assert_eq!(f.code, Code::TooLarge);
        assert_eq!(
            f.message,
            "block size 16 MiB exceeds the relay's memory budget 1 MiB"
        );
        // ...but admits files whose one block fits: each takes its own size.
        let mut small = offer();
        small.size = MIB;
        assert_eq!(check_offer(&small, &tiny).map(|p| p.block_len(0)), Ok(MIB));
        small.size = MIB + 1;
        assert!(check_offer(&small, &tiny).is_err());
        // The largest blob fits a relay that can hold one 4000 MiB block.
        let mut o = offer();
        o.size = MAX_BLOB_SIZE;
        let big = OfferLimits {
            default_block_size: DEFAULT_BLOCK_SIZE,
            max_block_bytes: MAX_BLOCK_SIZE,
        };
        let plan = check_offer(&o, &big).expect("largest blob");
        assert_eq!(plan.block_count(), MAX_BLOCKS);
    }

    /// Found with the fuzz targets' "every Reject fits a frame" check: names were
    /// echoed whole in the reason, so a 10,000-byte container name of DEL characters
    /// made a 70 KB Reject, over the frame limit, and the relay sent no answer at
    /// all. Every refusal must fit a Reject frame (docs/FUZZING.md).
    #[test]
    fn every_reason_fits_a_reject_frame() {
        use crate::codec::encode;
        use crate::protocol::Message;
        let hostile = "\u{7f}".repeat(10_000);
        let long_key = format!("k{}", "a".repeat(10_000));
        for field in 0..6 {
            let mut o = offer();
            match field {
                0 => o.container = hostile.clone(),
                1 => o.blob = hostile.clone(),
                2 => drop(o.metadata.insert(hostile.clone(), "v".into())),
                3 => drop(o.metadata.insert(long_key.clone(), "\u{7f}".into())),
                4 => o.sha256 = Some(hostile.clone()),
                _ => o.content_type = Some(hostile.clone()),
            }
            let f = check_offer(&o, &LIMITS).expect_err("hostile offer");
            let bytes = encode(&Message::Reject(f)).expect("the Reject fits a frame");
            assert!(bytes.len() < 2048, "{} bytes", bytes.len());
        }
    }

    #[test]
    fn messages_unchanged() {
        let mut o = offer();
        o.version = 7;
        assert_eq!(
            check_offer(&o, &LIMITS).map_err(|f| f.message),
            Err("protocol version 7 not supported (relay speaks 1)".to_string())
        );
        let mut o = offer();
        o.sha256 = Some("x".into());
        assert_eq!(
            check_offer(&o, &LIMITS).map_err(|f| f.message),
            Err("sha256 must be 64 hex digits".to_string())
        );
        let mut o = offer();
        o.content_type = Some("\u{7}".into());
        assert_eq!(
            check_offer(&o, &LIMITS).map_err(|f| f.message),
            Err("invalid content type".to_string())
        );
    }
}
