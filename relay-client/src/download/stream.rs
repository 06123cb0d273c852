//! An open download after its Source: the relay's `Fetch` stream (its
//! sections, compressed or not) or storage's ranges, read a piece at a time.

use quinn::{RecvStream, SendStream};
use relay_proto::protocol::{Message, Source, app_error};
use relay_transport::frames::read_frame;

use super::direct::Ranges;
use super::inflating::{Inflating, Wire};
use super::piece::{Next, READ_CHUNK, lost};
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// An open download after its Source: where the bytes come from.
pub(super) struct Stream {
    pub(super) body: Body,
    pub(super) source: Source,
}

pub(super) enum Body {
    Relay {
        _send: SendStream,
        recv: RecvStream,
        /// Bytes left in the current `Data` section.
        left: u64,
        /// The sections hold compressed chunks (`Source.encoding`).
        inflating: Option<Inflating>,
        wire: std::sync::Arc<Wire>,
    },
    Direct(Ranges),
}

impl Body {
    pub(super) fn stop(&mut self) {
        if let Body::Relay { recv, .. } = self {
            let _ = recv.stop(app_error::CLIENT_ABORT.into());
        }
    }

    /// The next bytes at `at` of a blob of `size`.
    pub(super) async fn next(&mut self, at: u64, size: u64) -> Result<Next, FileError> {
        let (recv, left, wire) = match self {
            Body::Direct(r) => return r.next().await,
            Body::Relay {
                recv,
                left,
                inflating: Some(inflating),
                ..
            } => return inflating.next(recv, left).await,
            Body::Relay {
                recv, left, wire, ..
            } => (recv, left, wire),
        };
        while *left == 0 {
            match read_frame(recv).await.map_err(lost)? {
                Message::Data(d) => {
                    if d.len > size - at {
                        return Err(FileError::new(
                            ErrorCode::Protocol,
                            format!("a section of {} bytes past the blob's end at {at}", d.len),
                            false,
                        ));
                    }
                    *left = d.len;
                }
                Message::Sent(sent) => {
                    return Ok(Next::End {
                        ranges_checked: sent.ranges_checked,
                    });
                }
                Message::Error(f) | Message::Reject(f) => return Ok(Next::Refused(f)),
                other => {
                    return Err(FileError::new(
                        ErrorCode::Protocol,
                        format!("expected Data or Sent, got {}", other.name()),
                        false,
                    ));
                }
            }
        }
        let max = usize::try_from(*left).unwrap_or(usize::MAX).min(READ_CHUNK);
        let chunk = recv
            .read_chunk(max, true)
            .await
            .map_err(lost)?
            .ok_or_else(|| lost("the stream ended inside a section"))?;
        *left -= chunk.bytes.len() as u64;
        wire.add(chunk.bytes.len() as u64);
        Ok(Next::Bytes(chunk.bytes))
    }
}
