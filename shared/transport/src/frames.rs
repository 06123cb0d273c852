//! One control frame read from or written to a byte stream (a QUIC stream in the
//! product, a byte slice in tests and fuzzing). The bytes are parsed by
//! `relay_proto::codec::decode`, the same pure function the unit tests and fuzz
//! targets exercise; this module only gathers them without reading past the frame.

use relay_proto::codec::{FrameError, HEADER_LEN, body_len, decode, encode};
use relay_proto::protocol::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads exactly one frame; never reads past it, so raw bytes may follow.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Message, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        let n = r.read(&mut header[got..]).await?;
        if n == 0 {
            return Err(if got == 0 {
                FrameError::Closed
            } else {
                FrameError::Truncated
            });
        }
        got += n;
    }
    // Checked before allocating: a hostile length never sizes the buffer.
    let len = body_len(header)?;
    let mut frame = vec![0u8; HEADER_LEN + len];
    frame[..HEADER_LEN].copy_from_slice(&header);
    r.read_exact(&mut frame[HEADER_LEN..])
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
            _ => FrameError::Io(e),
        })?;
    match decode(&frame)? {
        Some((msg, _)) => Ok(msg),
        // Unreachable: the buffer holds the whole announced frame.
        None => Err(FrameError::Truncated),
    }
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &Message,
) -> Result<(), FrameError> {
    let bytes = encode(msg)?;
    w.write_all(&bytes).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_proto::protocol::Start;

    #[tokio::test]
    async fn reads_one_frame_and_leaves_the_rest() {
        let mut bytes = encode(&Message::Start(Start::plain(9))).expect("encode");
        bytes.extend_from_slice(b"RAW");
        let mut r = &bytes[..];
        let m = read_frame(&mut r).await.expect("frame");
        assert_eq!(m, Message::Start(Start::plain(9)));
        assert_eq!(r, b"RAW");
        let mut short = &bytes[..3];
        assert!(matches!(
            read_frame(&mut short).await,
            Err(FrameError::Truncated)
        ));
        let mut empty: &[u8] = &[];
        assert!(matches!(
            read_frame(&mut empty).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn refuses_an_oversized_header_before_reading_the_body() {
        let huge = (relay_proto::limits::MAX_FRAME_LEN as u32 + 1).to_be_bytes();
        let mut r = &huge[..];
        assert!(matches!(
            read_frame(&mut r).await,
            Err(FrameError::TooLong(_))
        ));
    }
}
