//! `--dry-run`: what an upload would do to each file, writing nothing. Through a
//! relay the file is offered with its SHA-256 and the stream is reset at the
//! Plan, before any byte: the relay answers exactly as for a real upload (a
//! Receipt when its seal says the blob holds these bytes, a Reject when it would
//! refuse, a Plan when it would take the bytes). In direct mode the same checks
//! run against the blob's properties with this user's key.

use quinn::Connection;
use relay_pipeline::failure::{condition, storage_failure};
use relay_proto::limits::PROTOCOL_VERSION;
use relay_proto::protocol::{Code, ExistingBlob, Message, Offer, Overwrite, app_error};
use relay_storage::publish::{Destination, Writer, sealed_as};
use relay_transport::frames::{read_frame, write_frame};

use crate::transfer::direct::Direct;
use crate::transfer::send::Options;
use crate::transfer::send_failure::unreadable;
use crate::transfer::source::{Snapshot, hash_prefix};
use crate::transfer::walk::Source;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

/// What the relay (or storage) said it would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The blob holds exactly these bytes (verified seal): skipped.
    Identical,
    /// The blob exists with other bytes, and this mode does not replace it
    /// unconditionally; the blob as reported, if it was.
    Exists(Option<ExistingBlob>),
    /// The bytes would be sent (from `resume_offset`).
    Upload { resume_offset: u64 },
}

async fn sha256_of(src: &Source) -> Result<(u64, String), FileError> {
    if let Some(h) = &src.sha256 {
        return Ok((src.size, h.clone()));
    }
    let snap = Snapshot::take(&src.path, src.reading).map_err(unreadable)?;
    let h = hash_prefix(src.path.clone(), src.reading, snap.len)
        .await
        .map_err(unreadable)?;
    Ok((snap.len, hex::encode(sha2::Digest::finalize(h))))
}

fn protocol(e: impl std::fmt::Display) -> FileError {
    FileError::new(
        ErrorCode::Connection,
        format!("asking the relay: {e}"),
        true,
    )
}

pub async fn through_relay(
    conn: &Connection,
    src: &Source,
    opts: &Options,
) -> Result<Verdict, FileError> {
    let (size, sha256) = sha256_of(src).await?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(protocol)?;
    let token = opts
        .token
        .current()
        .await
        .map_err(crate::transfer::send::sign_in_failed)?;
    let offer = Offer {
        version: PROTOCOL_VERSION,
        token,
        container: opts.container.clone(),
        blob: src.blob.clone(),
        size,
        content_type: opts.content_type.clone(),
        metadata: opts.metadata.clone(),
        overwrite: opts.overwrite.clone(),
        sha256: Some(sha256),
        block_size: opts.block_size,
        put_md5: opts.put_md5,
        progress: false,
        eager: false,
    };
    write_frame(&mut send, &Message::Offer(offer))
        .await
        .map_err(protocol)?;
    let answer = read_frame(&mut recv).await.map_err(protocol)?;
    // Nothing follows the Offer: the relay stages nothing for this stream.
    let _ = send.reset(app_error::CLIENT_ABORT.into());
    match answer {
        Message::Receipt(_) => Ok(Verdict::Identical),
        Message::Plan(p) => Ok(Verdict::Upload {
            resume_offset: p.resume_offset,
        }),
        Message::Reject(f) if f.code == Code::Exists => Ok(Verdict::Exists(f.existing)),
        Message::Reject(f) => Err(FileError::from_relay(f.code, f.message)),
        other => Err(FileError::new(
            ErrorCode::Protocol,
            format!("expected a Plan, got {}", other.name()),
            false,
        )),
    }
}

pub async fn direct(d: &Direct, src: &Source, opts: &Options) -> Result<Verdict, FileError> {
    let writer = d
        .storage
        .writer(&opts.container, &src.blob)
        .map_err(|e| relay_like(storage_failure(&e)))?;
    let Some(props) = writer
        .properties()
        .await
        .map_err(|e| relay_like(storage_failure(&e)))?
    else {
        return Ok(Verdict::Upload { resume_offset: 0 });
    };
    let (size, sha256) = sha256_of(src).await?;
    let condition = condition(&opts.overwrite);
    let owner = relay_proto::id_key::Owner::direct();
    let dest = Destination {
        container: &opts.container,
        blob: &src.blob,
        key: &d.id_key,
        writer: Writer {
            owner: &owner,
            reads: true,
        },
        size,
        content_type: None,
        metadata: &opts.metadata,
        condition: &condition,
    };
    if sealed_as(&props, &dest, &sha256) {
        return Ok(Verdict::Identical);
    }
    Ok(match opts.overwrite {
        Overwrite::Never => Verdict::Exists(Some(ExistingBlob {
            etag: props.etag,
            last_modified: props.last_modified,
        })),
        _ => Verdict::Upload { resume_offset: 0 },
    })
}

fn relay_like(f: relay_proto::protocol::Failure) -> FileError {
    FileError::from_relay(f.code, f.message)
}
