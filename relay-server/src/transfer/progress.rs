//! `Progress` frames (relay → client, when the Offer asks): informational,
//! outside the session, written while the relay stages.

use std::time::Duration;

use quinn::SendStream;
use relay_proto::protocol::{Message, Progress};
use relay_transport::frames::write_frame;

/// A Progress frame that cannot be written within this time is the last one: a
/// client that does not read them must not hold its own transfer's staging
/// (and the memory under it) while the relay waits to tell it.
const PROGRESS_WRITE: Duration = Duration::from_secs(1);

/// Runs `work` while telling the client, in `Progress` frames, how many bytes
/// of its file are staged (`progress` changes as blocks land). Writing stops
/// for good at the first frame that does not go out within `PROGRESS_WRITE`.
pub(super) async fn telling_progress<T>(
    send: &mut SendStream,
    progress: Option<tokio::sync::watch::Receiver<u64>>,
    work: impl Future<Output = T>,
) -> T {
    let Some(mut progress) = progress else {
        return work.await;
    };
    tokio::pin!(work);
    let mut live = true;
    loop {
        tokio::select! {
            out = &mut work => {
                // The last blocks may have landed with the work's end: say so
                // before the session moves on (the client's bar reaches the
                // file's size before its commit, which a Ctrl-C waits for).
                if live && progress.has_changed().unwrap_or(false) {
                    let staged = *progress.borrow_and_update();
                    tell(send, staged).await;
                }
                return out;
            }
            changed = progress.changed(), if live => {
                let staged = *progress.borrow_and_update();
                live = changed.is_ok() && tell(send, staged).await;
            }
        }
    }
}

/// One `Progress` frame; false if it did not go out within `PROGRESS_WRITE`.
async fn tell(send: &mut SendStream, staged: u64) -> bool {
    let frame = Message::Progress(Progress { staged });
    matches!(
        tokio::time::timeout(PROGRESS_WRITE, write_frame(send, &frame)).await,
        Ok(Ok(()))
    )
}
