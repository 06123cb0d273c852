//! The wire's compatibility and shape, for `protocol`: which codes refuse
//! the caller, and that optional fields stay optional both ways.

use super::*;

/// Only a refusal of the token or its grant is about the caller; every
/// other code is about one request, and the connection stays.
#[test]
fn only_unauthorized_and_forbidden_refuse_the_caller() {
    let all = [
        (Code::Unauthorized, true),
        (Code::Forbidden, true),
        (Code::InvalidName, false),
        (Code::InvalidOffer, false),
        (Code::UnsupportedVersion, false),
        (Code::TooLarge, false),
        (Code::Exists, false),
        (Code::Busy, false),
        (Code::HashMismatch, false),
        (Code::Truncated, false),
        (Code::Conflict, false),
        (Code::Storage, false),
        (Code::StorageRefused, false),
        (Code::BadEncoding, false),
        (Code::NotFound, false),
        (Code::Changed, false),
        (Code::Internal, false),
    ];
    for (code, caller) in all {
        assert_eq!(code.refuses_the_caller(), caller, "{code:?}");
    }
}

/// Listing markers are optional fields both ways: frames of a relay from
/// before them parse here, and these parse in a client from before them
/// (unknown fields are ignored), so older peers keep working.
#[test]
fn listing_markers_are_optional_for_older_peers() {
    let old: Message =
        serde_json::from_str(r#"{"type":"listing","blobs":[{"name":"a","size":1,"etag":"e"}]}"#)
            .expect("an older relay's Listing");
    assert!(matches!(old, Message::Listing(ref l) if l.marker.is_none() && !l.resumed));
    let old: Message = serde_json::from_str(r#"{"type":"list_end","blobs":1}"#).expect("ListEnd");
    assert!(matches!(old, Message::ListEnd(ref e) if !e.resumed));
    let old: Message = serde_json::from_str(
        r#"{"type":"list","version":1,"token":"t","container":"c","prefix":"p"}"#,
    )
    .expect("an older client's List");
    assert!(matches!(old, Message::List(ref l) if l.marker.is_none()));

    /// A Listing as a client from before markers knows it.
    #[derive(Deserialize)]
    struct OlderListing {
        blobs: Vec<Listed>,
    }
    let new = Listing {
        blobs: vec![Listed {
            name: "a".into(),
            size: 1,
            etag: "e".into(),
            last_modified: None,
            sha256: None,
        }],
        marker: Some("2!opaque".into()),
        resumed: true,
    };
    let text = serde_json::to_string(&new).expect("encode");
    let older: OlderListing = serde_json::from_str(&text).expect("parses without markers");
    assert_eq!(older.blobs.len(), 1);
    // Nothing new on the wire when there is nothing to say.
    let plain = Listing {
        marker: None,
        resumed: false,
        ..new
    };
    let text = serde_json::to_string(&plain).expect("encode");
    assert!(
        !text.contains("marker") && !text.contains("resumed"),
        "{text}"
    );
}

/// The seal's SHA-256 in a listing is optional both ways: an older
/// relay's entry parses without it, an entry without it says nothing new
/// on the wire, and an older client reads an entry with it.
#[test]
fn a_listings_sha256_is_optional_for_older_peers() {
    let old: Listed =
        serde_json::from_str(r#"{"name":"a","size":1,"etag":"e"}"#).expect("older entry");
    assert_eq!(old.sha256, None);
    let plain = serde_json::to_string(&old).expect("encode");
    assert!(!plain.contains("sha256"), "{plain}");
    let vouched = Listed {
        sha256: Some("ab".repeat(32)),
        ..old
    };
    let text = serde_json::to_string(&vouched).expect("encode");
    #[derive(Deserialize)]
    struct OlderListed {
        name: String,
    }
    let older: OlderListed = serde_json::from_str(&text).expect("an older client");
    assert_eq!(older.name, "a");
    let back: Listed = serde_json::from_str(&text).expect("decode");
    assert_eq!(back, vouched);
}

/// A Delete's frames as the wire writes them: the etag is required, the
/// outcome is one of three names.
#[test]
fn delete_frames_round_trip_and_need_an_etag() {
    let d = Message::Delete(Delete {
        version: 1,
        token: Secret("t".into()),
        container: "c".into(),
        name: "a/b".into(),
        etag: "\"0x1\"".into(),
    });
    let text = serde_json::to_string(&d).expect("encode");
    assert_eq!(serde_json::from_str::<Message>(&text).expect("decode"), d);
    let no_etag = r#"{"type":"delete","version":1,"token":"t","container":"c","name":"a"}"#;
    assert!(serde_json::from_str::<Message>(no_etag).is_err());
    for (outcome, name) in [
        (Removal::Deleted, "deleted"),
        (Removal::AlreadyGone, "already_gone"),
        (Removal::Changed, "changed"),
    ] {
        let m = Message::Deleted(Deleted {
            outcome,
            requests: 1,
        });
        let text = serde_json::to_string(&m).expect("encode");
        assert!(text.contains(name), "{text}");
        assert_eq!(serde_json::from_str::<Message>(&text).expect("decode"), m);
    }
}
