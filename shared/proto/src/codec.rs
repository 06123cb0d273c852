//! Framing of control messages: a 4-byte big-endian length, then JSON.
//!
//! `decode` keeps "incomplete" (need more bytes) apart from "invalid" (refuse the
//! peer), as mini-redis does. Reading and writing frames on a stream lives in
//! `relay_transport::frames`, which parses with this same `decode`.

use crate::limits::MAX_FRAME_LEN;
use crate::protocol::Message;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
    TooLong(usize),
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("stream ended inside a frame")]
    Truncated,
    #[error("stream ended before a frame")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Longest reason kept from a JSON error. serde_json quotes offending strings and
/// variant names from the frame (Debug-escaped, up to 7 bytes per byte once
/// JSON-escaped again), and the relay sends `bad Offer: {reason}` back in a Reject,
/// which must itself fit in a frame.
const MAX_REASON_CHARS: usize = 256;

fn malformed(e: &serde_json::Error) -> FrameError {
    let text = e.to_string();
    FrameError::Malformed(match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    })
}

pub fn encode(msg: &Message) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(msg).map_err(|e| malformed(&e))?;
    if body.len() > MAX_FRAME_LEN {
        return Err(FrameError::TooLong(body.len()));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Length of a frame's header, the big-endian body length.
pub const HEADER_LEN: usize = 4;

/// The body length a header announces, refused if over the limit: lets a reader
/// size its buffer before reading the body, without trusting the peer.
pub fn body_len(header: [u8; HEADER_LEN]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLong(len));
    }
    Ok(len)
}

/// `Ok(None)`: incomplete, read more. `Ok(Some((msg, used)))`: one frame of `used` bytes.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, FrameError> {
    let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let len = body_len(*header)?;
    if buf.len() < HEADER_LEN + len {
        return Ok(None);
    }
    let msg =
        serde_json::from_slice(&buf[HEADER_LEN..HEADER_LEN + len]).map_err(|e| malformed(&e))?;
    Ok(Some((msg, HEADER_LEN + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::*;

    fn offer() -> Message {
        Message::Offer(Offer {
            version: 1,
            token: Secret("t0k".into()),
            container: "c".into(),
            blob: "dir/file.bin".into(),
            size: 42,
            content_type: Some("application/octet-stream".into()),
            metadata: [("k".to_string(), "v".to_string())].into(),
            overwrite: Overwrite::IfMatch {
                etag: "\"0x1\"".into(),
            },
            sha256: None,
            block_size: Some(16 << 20),
            put_md5: false,
            progress: false,
            eager: true,
        })
    }

    #[test]
    fn round_trips_every_message() {
        let msgs = vec![
            offer(),
            Message::Plan(Plan {
                tag: "ab".into(),
                block_size: 1,
                resume_offset: 0,
                checkpoint: "00".into(),
                relay_version: Some("0.1.0 (abc1234)".into()),
            }),
            Message::Reject(Failure {
                code: Code::Exists,
                message: "x".into(),
                existing: None,
                requests: None,
                outcome_unknown: false,
            }),
            Message::Start(Start::plain(7)),
            Message::Trailer(Trailer {
                sha256: "ff".into(),
            }),
            Message::Receipt(Receipt {
                container: "c".into(),
                blob: "b".into(),
                etag: "e".into(),
                size: 1,
                sha256: "s".into(),
                block_size: 2,
                blocks: 3,
                bytes_resumed: 0,
                bytes_received: 1,
                retries: 0,
                requests: 2,
                earlier_commit: false,
                content_md5: None,
                timings: Timings::default(),
            }),
            Message::Error(Failure {
                code: Code::HashMismatch,
                message: "m".into(),
                existing: None,
                requests: None,
                outcome_unknown: false,
            }),
        ];
        for m in msgs {
            let bytes = encode(&m).expect("encode");
            let (back, used) = decode(&bytes).expect("valid").expect("complete");
            assert_eq!(back, m);
            assert_eq!(used, bytes.len());
        }
    }

    /// `outcome_unknown` is optional both ways: an old relay's Error (no
    /// field) reads as false, and a false one is sent as an old relay sends it.
    #[test]
    fn outcome_unknown_is_optional_on_the_wire() {
        let old = br#"{"type":"error","code":"storage","message":"m"}"#;
        let mut frame = (old.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(old);
        let Some((Message::Error(f), _)) = decode(&frame).expect("valid") else {
            panic!("an Error");
        };
        assert!(!f.outcome_unknown);
        let sent = encode(&Message::Error(f.clone())).expect("encode");
        assert!(!String::from_utf8_lossy(&sent).contains("outcome_unknown"));
        let flagged = Message::Error(Failure {
            outcome_unknown: true,
            ..f
        });
        let bytes = encode(&flagged).expect("encode");
        let (back, _) = decode(&bytes).expect("valid").expect("complete");
        assert_eq!(back, flagged);
    }

    #[test]
    fn incomplete_is_not_invalid() {
        let bytes = encode(&offer()).expect("encode");
        for cut in 0..bytes.len() {
            assert!(matches!(decode(&bytes[..cut]), Ok(None)), "cut at {cut}");
        }
    }

    #[test]
    fn oversized_and_malformed_are_invalid() {
        let mut big = (MAX_FRAME_LEN as u32 + 1).to_be_bytes().to_vec();
        big.extend_from_slice(b"{}");
        assert!(matches!(decode(&big), Err(FrameError::TooLong(_))));
        let mut bad = 5u32.to_be_bytes().to_vec();
        bad.extend_from_slice(b"{nope");
        assert!(matches!(decode(&bad), Err(FrameError::Malformed(_))));
        let mut unknown = 22u32.to_be_bytes().to_vec();
        unknown.extend_from_slice(br#"{"type":"Teleport"}   "#);
        assert!(matches!(decode(&unknown), Err(FrameError::Malformed(_))));
    }

    /// Found with the fuzz targets' "every Reject fits a frame" check: serde_json
    /// quotes a bad string from the frame in its error, the relay answers
    /// `bad Offer: {error}` in a Reject, and a 10,000-byte string of DEL characters
    /// (7 bytes each once quoted and JSON-escaped) made that Reject too long to send,
    /// so the client heard nothing. See docs/FUZZING.md.
    #[test]
    fn malformed_reason_fits_a_reject() {
        let body = format!(
            r#"{{"type":"offer","version":1,"token":"t","container":"c","blob":"b","size":"{}"}}"#,
            "\u{7f}".repeat(10_000)
        );
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body.as_bytes());
        let Err(e @ FrameError::Malformed(_)) = decode(&frame) else {
            panic!("a string size must be malformed");
        };
        let reject = Message::Reject(Failure {
            code: Code::InvalidOffer,
            message: format!("bad Offer: {e}"),
            existing: None,
            requests: None,
            outcome_unknown: false,
        });
        let bytes = encode(&reject).expect("the Reject fits a frame");
        assert!(bytes.len() < 2048, "{} bytes", bytes.len());
    }

    #[test]
    fn token_never_in_debug() {
        let text = format!("{:?}", offer());
        assert!(!text.contains("t0k"), "{text}");
    }
}
