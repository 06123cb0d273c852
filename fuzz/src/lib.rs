//! The properties the fuzz targets assert, as plain functions: the libFuzzer targets
//! (`fuzz_targets/`) and the stable property tests (`tests/props.rs`) call the same
//! code. Each function panics when a property breaks; any panic is a finding.
//!
//! * [`check_frame_bytes`]: the frame codec on arbitrary bytes.
//! * [`check_offer_input`]: Offer validation on arbitrary Offers and relay limits,
//!   against an independent restatement of the rules ([`expected_outcome`]).
//! * [`inflate::check_inflate_bytes`]: the relay's decoder of compressed chunks
//!   on arbitrary bytes (and [`inflate::check_round_trip`]: the client's chunks
//!   come back as the file).

pub mod inflate;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use arbitrary::Arbitrary;
use relay_proto::codec::{FrameError, decode, encode};
use relay_proto::limits::{
    DEFAULT_BLOCK_SIZE, HIGH_THROUGHPUT_THRESHOLD, MAX_BLOB_SIZE, MAX_BLOCK_SIZE, MAX_BLOCKS,
    MAX_FRAME_LEN, MIB, MIN_BLOCK_SIZE, PROTOCOL_VERSION,
};
use relay_proto::offer_rules::{OfferLimits, check_offer};
use relay_proto::protocol::{Code, Failure, Message, Offer, Overwrite, Secret};
use relay_transport::frames::read_frame;

/// The relay's defaults: 16 MiB blocks and a 1 GiB memory budget.
pub const RELAY_LIMITS: OfferLimits = OfferLimits {
    default_block_size: DEFAULT_BLOCK_SIZE,
    max_block_bytes: 1 << 30,
};

/// `read_frame` on a byte slice: a slice never blocks, so one poll finishes it.
fn read_frame_now(mut bytes: &[u8]) -> Result<Message, FrameError> {
    let mut fut = pin!(read_frame(&mut bytes));
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => panic!("read_frame on a slice returned Pending"),
    }
}

/// Longest reason a Reject may carry. Reasons quote parts of the peer's input;
/// bounding them (not just "fits a frame") lets small fuzz inputs catch an echo
/// that grows with the input.
pub const MAX_REASON_BYTES: usize = 2048;

/// The relay answers a refused stream with a Reject frame: it must fit in a frame,
/// or the peer hears nothing at all (the relay ignores the failed write).
fn assert_reject_fits(f: &Failure) {
    assert!(!f.message.is_empty(), "empty reason for {:?}", f.code);
    assert!(
        f.message.len() <= MAX_REASON_BYTES,
        "a {} byte reason ({:?}) echoes too much of the input",
        f.message.len(),
        f.code
    );
    let reject = Message::Reject(f.clone());
    if let Err(e) = encode(&reject) {
        panic!(
            "the Reject ({:?}, {} byte reason) cannot be framed: {e}",
            f.code,
            f.message.len()
        );
    }
}

/// The codec on arbitrary bytes:
/// * never panics;
/// * `read_frame` (what the relay uses) agrees with `decode` on the same bytes;
/// * incomplete vs invalid: `Ok(None)` exactly when fewer bytes than the header
///   announces are present (and the announced length is within the limit); every
///   proper prefix of a complete frame is `Ok(None)`, never an error;
/// * a decoded frame uses `4 + announced length` bytes, and decoding that frame alone
///   gives the same message;
/// * a decoded message re-encodes (unless the defaults it gained make it longer than
///   a frame) and decodes back to itself, and its encoding is canonical;
/// * a decoded Offer goes through `check_offer` and any refusal fits a Reject frame;
///   so does the "bad Offer" refusal of a malformed frame.
pub fn check_frame_bytes(data: &[u8]) {
    let decoded = decode(data);
    let read = read_frame_now(data);
    match (&decoded, &read) {
        (Ok(Some((m, _))), Ok(r)) => assert_eq!(m, r, "decode and read_frame disagree"),
        (Ok(None), Err(FrameError::Closed)) => assert!(data.is_empty()),
        (Ok(None), Err(FrameError::Truncated)) => assert!(!data.is_empty()),
        (Err(FrameError::TooLong(a)), Err(FrameError::TooLong(b))) => assert_eq!(a, b),
        (Err(FrameError::Malformed(a)), Err(FrameError::Malformed(b))) => assert_eq!(a, b),
        _ => panic!("decode gave {decoded:?} but read_frame gave {read:?}"),
    }

    let announced = (data.len() >= 4)
        .then(|| u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize);
    match decoded {
        Ok(None) => {
            if let Some(len) = announced {
                assert!(len <= MAX_FRAME_LEN, "over-long header reported incomplete");
                assert!(data.len() < 4 + len, "complete frame reported incomplete");
            }
        }
        Err(FrameError::TooLong(n)) => {
            assert_eq!(Some(n), announced);
            assert!(n > MAX_FRAME_LEN);
        }
        Err(e @ FrameError::Malformed(_)) => {
            let len = announced.expect("malformed needs a header");
            assert!(len <= MAX_FRAME_LEN && data.len() >= 4 + len);
            // The relay's answer to it.
            assert_reject_fits(&Failure {
                code: Code::InvalidOffer,
                message: format!("bad Offer: {e}"),
                existing: None,
                requests: None,
                outcome_unknown: false,
            });
        }
        Err(other) => panic!("decode returned an i/o-only error: {other:?}"),
        Ok(Some((msg, used))) => {
            assert_eq!(
                Some(used - 4),
                announced,
                "used bytes differ from the header"
            );
            assert!(used <= data.len());
            let frame = &data[..used];
            for cut in 0..used {
                assert!(
                    matches!(decode(&frame[..cut]), Ok(None)),
                    "a {cut}-byte prefix of a valid {used}-byte frame is not incomplete"
                );
            }
            match decode(frame) {
                Ok(Some((again, n))) => {
                    assert_eq!(again, msg);
                    assert_eq!(n, used);
                }
                other => panic!("the frame alone decodes to {other:?}"),
            }
            round_trip(&msg);
            if let Message::Offer(offer) = &msg
                && let Err(f) = check_offer(offer, &RELAY_LIMITS)
            {
                assert_reject_fits(&f);
            }
        }
    }
}

/// `encode` then `decode` gives the message back, using every byte; encoding the
/// result again gives the same bytes.
pub fn round_trip(msg: &Message) {
    let bytes = match encode(msg) {
        Ok(b) => b,
        // Omitted optional fields are written out on encode, so a message decoded
        // from a frame near the limit may not fit one when re-encoded.
        Err(FrameError::TooLong(n)) => {
            assert!(n > MAX_FRAME_LEN);
            return;
        }
        Err(e) => panic!("encode failed: {e}"),
    };
    match decode(&bytes) {
        Ok(Some((back, used))) => {
            assert_eq!(&back, msg, "round trip changed the message");
            assert_eq!(used, bytes.len());
            assert_eq!(encode(&back).ok(), Some(bytes), "encoding is not canonical");
        }
        other => panic!("an encoded frame decodes to {other:?}"),
    }
}

/// A number, biased towards the ones the rules care about.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Num {
    Raw(u64),
    /// `mib` MiB plus a small signed offset.
    Mib {
        mib: u16,
        delta: i16,
    },
    /// Near the largest blob.
    NearMaxBlob(i32),
}

impl Num {
    pub fn get(self) -> u64 {
        match self {
            Num::Raw(n) => n,
            Num::Mib { mib, delta } => (u64::from(mib) * MIB).saturating_add_signed(delta.into()),
            Num::NearMaxBlob(d) => MAX_BLOB_SIZE.saturating_add_signed(d.into()),
        }
    }
}

/// An Offer and the relay's limits, as the fuzzer builds them (a mirror of
/// `relay_proto::protocol::Offer`, which does not derive `Arbitrary`).
#[derive(Debug, Clone, Arbitrary)]
pub struct OfferInput {
    pub version: u32,
    pub container: String,
    pub blob: String,
    pub size: Num,
    pub content_type: Option<String>,
    pub metadata: Vec<(String, String)>,
    pub sha256: Option<String>,
    pub block_size: Option<Num>,
    pub eager: bool,
    pub default_block_size: Num,
    pub max_block_bytes: Num,
}

impl OfferInput {
    pub fn offer(&self) -> Offer {
        Offer {
            version: self.version,
            token: Secret("fuzz".into()),
            container: self.container.clone(),
            blob: self.blob.clone(),
            size: self.size.get(),
            content_type: self.content_type.clone(),
            metadata: self.metadata.iter().cloned().collect(),
            overwrite: Overwrite::Never,
            sha256: self.sha256.clone(),
            block_size: self.block_size.map(Num::get),
            eager: self.eager,
            // No Offer rule depends on these; the codec seeds carry them.
            put_md5: false,
            progress: false,
        }
    }

    pub fn limits(&self) -> OfferLimits {
        OfferLimits {
            default_block_size: self.default_block_size.get(),
            max_block_bytes: self.max_block_bytes.get(),
        }
    }
}

/// `check_offer` on an arbitrary Offer and limits:
/// * never panics;
/// * agrees with [`expected_outcome`] (same code when refused, same block size when
///   accepted), so it neither lets a bad Offer through nor refuses a good one;
/// * an accepted plan: the Offer's size, a whole number of MiB above Azure's 4 MiB
///   high-throughput threshold, at most 4000 MiB and the relay's largest block, at
///   most 50,000 blocks covering the file exactly;
/// * a refusal has a reason that fits a Reject frame.
pub fn check_offer_input(input: &OfferInput) {
    let offer = input.offer();
    let limits = input.limits();
    let got = check_offer(&offer, &limits);
    let want = expected_outcome(&offer, &limits);
    match (&got, want) {
        (Ok(plan), Ok(block_size)) => {
            assert_eq!(plan.block_size, block_size, "block size for {offer:?}");
            assert_eq!(plan.size, offer.size);
            assert!(plan.block_size > HIGH_THROUGHPUT_THRESHOLD);
            assert!(plan.block_size <= MAX_BLOCK_SIZE);
            assert!(plan.block_len(0) <= limits.max_block_bytes);
            assert_eq!(plan.block_size % MIB, 0);
            let blocks = plan.block_count();
            assert!(blocks <= MAX_BLOCKS, "{blocks} blocks");
            assert!(u128::from(blocks) * u128::from(plan.block_size) >= u128::from(plan.size));
            if blocks > 0 {
                assert!(plan.block_len(blocks - 1) > 0, "empty last block");
                assert_eq!(plan.block_range(blocks - 1).1, plan.size);
            }
            if blocks > 1 {
                // Only a file's own last block may be at or below Azure's
                // high-throughput threshold (the blocks before the second to
                // last are whole blocks, above it by the block size's rule).
                let before_last = plan.block_len(blocks - 2);
                assert!(before_last > HIGH_THROUGHPUT_THRESHOLD, "{before_last}");
            }
        }
        (Err(f), Err(code)) => {
            assert_eq!(f.code, code, "{offer:?} refused for: {}", f.message);
            assert_reject_fits(f);
        }
        _ => panic!("check_offer gave {got:?}, the rules say {want:?}, for {offer:?} {limits:?}"),
    }
}

/// The Offer rules restated independently of `relay-proto` (from the protocol docs and
/// Azure's limits), in the relay's order: what `check_offer` should answer, as
/// the planned block size or the Reject's code.
pub fn expected_outcome(offer: &Offer, limits: &OfferLimits) -> Result<u64, Code> {
    if offer.version != PROTOCOL_VERSION {
        return Err(Code::UnsupportedVersion);
    }
    if !container_ok(&offer.container) || !blob_ok(&offer.blob) {
        return Err(Code::InvalidName);
    }
    if !metadata_ok(&offer.metadata) {
        return Err(Code::InvalidOffer);
    }
    if let Some(h) = &offer.sha256
        && !(h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(Code::InvalidOffer);
    }
    if let Some(ct) = &offer.content_type
        && (ct.len() > 256 || ct.chars().any(|c| c.is_control()))
    {
        return Err(Code::InvalidOffer);
    }
    let requested = offer.block_size.unwrap_or(limits.default_block_size);
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&requested) {
        return Err(Code::InvalidOffer);
    }
    if offer.size > MAX_BLOB_SIZE {
        return Err(Code::TooLarge);
    }
    // The smallest whole-MiB block size ≥ the request that needs ≤ 50,000 blocks.
    let mut block_size = requested.div_ceil(MIB) * MIB;
    if offer.size > block_size * MAX_BLOCKS {
        block_size = offer.size.div_ceil(MAX_BLOCKS).div_ceil(MIB) * MIB;
    }
    // The buffer the relay needs is the file's largest block: a file smaller
    // than a block needs only its own size.
    if block_size.min(offer.size) > limits.max_block_bytes {
        return Err(Code::TooLarge);
    }
    Ok(block_size)
}

/// Azure container names: 3-63 of `a-z`, `0-9` and single inner hyphens.
pub fn container_ok(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|&c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !b.windows(2).any(|w| w == b"--")
}

/// Blob names: 1-1024 characters, no control characters, bidirectional-control
/// characters (they reorder what people read: `invoice\u{202e}fdp.exe` shows as
/// `invoiceexe.pdf`) or backslashes, 1-254 segments between `/`, none empty,
/// `.` or `..`, and no trailing `.`.
pub fn blob_ok(name: &str) -> bool {
    let chars = name.chars().count();
    let segments: Vec<&str> = name.split('/').collect();
    (1..=1024).contains(&chars)
        && !name
            .chars()
            .any(|c| c.is_control() || c == '\\' || reorders_text(c))
        && segments.len() <= 254
        && segments
            .iter()
            .all(|s| !s.is_empty() && *s != "." && *s != "..")
        && !name.ends_with('.')
}

/// Unicode's bidirectional formatting characters: the embeddings and overrides
/// U+202A-U+202E, the isolates U+2066-U+2069, and the marks LRM U+200E, RLM
/// U+200F and ALM U+061C.
fn reorders_text(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
    )
}

/// Metadata: C#-identifier ASCII names other than `sha256` (any case), printable
/// ASCII values, and at most 8 KiB in all counting the relay's own `sha256` entry.
pub fn metadata_ok(meta: &BTreeMap<String, String>) -> bool {
    let mut total = "sha256".len() + 64;
    for (k, v) in meta {
        let ident = k
            .bytes()
            .enumerate()
            .all(|(i, c)| c == b'_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if k.is_empty() || !ident || k.eq_ignore_ascii_case("sha256") {
            return false;
        }
        if !v.bytes().all(|c| (0x20..0x7f).contains(&c)) {
            return false;
        }
        total += k.len() + v.len();
    }
    total <= 8 * 1024
}

/// One valid frame of every message type: the codec target's seed corpus.
pub fn seed_messages() -> Vec<Message> {
    use relay_proto::protocol::{Plan, Receipt, Start, Timings, Trailer};
    let offer = Offer {
        version: PROTOCOL_VERSION,
        token: Secret("token".into()),
        container: "data".into(),
        blob: "dir/file.bin".into(),
        size: 123_456_789,
        content_type: Some("application/octet-stream".into()),
        metadata: [("project".to_string(), "alpha".to_string())].into(),
        overwrite: Overwrite::IfMatch {
            etag: "\"0x8DC\"".into(),
        },
        sha256: Some("ab".repeat(32)),
        block_size: Some(16 * MIB),
        eager: true,
        put_md5: true,
        progress: true,
    };
    let minimal = Offer {
        content_type: None,
        metadata: BTreeMap::new(),
        overwrite: Overwrite::Always,
        sha256: None,
        block_size: None,
        eager: false,
        put_md5: false,
        progress: false,
        ..offer.clone()
    };
    vec![
        Message::Offer(offer),
        Message::Offer(minimal),
        Message::Plan(Plan {
            tag: "00ff".repeat(8),
            block_size: 16 * MIB,
            resume_offset: 32 * MIB,
            checkpoint: "cd".repeat(40),
            relay_version: Some("0.1.0 (abc1234-dirty)".into()),
        }),
        Message::Reject(Failure {
            code: Code::InvalidName,
            message: "invalid blob name \"a/\": ends with '/' or '.'".into(),
            existing: None,
            requests: None,
            outcome_unknown: false,
        }),
        Message::Start(Start::plain(0)),
        Message::Trailer(Trailer {
            sha256: "ef".repeat(32),
        }),
        Message::Receipt(Receipt {
            container: "data".into(),
            blob: "dir/file.bin".into(),
            etag: "\"0x8DC\"".into(),
            size: 123_456_789,
            sha256: "ef".repeat(32),
            block_size: 16 * MIB,
            blocks: 8,
            bytes_resumed: 0,
            bytes_received: 123_456_789,
            retries: 1,
            requests: 9,
            earlier_commit: false,
            content_md5: Some("0f".repeat(16)),
            timings: Timings {
                receive_ms: 1,
                stage_wait_ms: 2,
                commit_ms: 3,
            },
        }),
        Message::Error(Failure {
            code: Code::HashMismatch,
            message: "SHA-256 differs".into(),
            existing: None,
            requests: None,
            outcome_unknown: false,
        }),
        Message::Progress(relay_proto::protocol::Progress { staged: 16 * MIB }),
    ]
}
