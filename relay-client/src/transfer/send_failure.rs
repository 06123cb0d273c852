//! How a file's stream fails, as the report's failure: the connection lost,
//! the relay saying something out of order, the source unreadable or changed,
//! no token for the relay.

use relay_proto::codec::FrameError;
use relay_proto::protocol::Message;

use crate::transfer::source::NotAFile;
use crate::ui::error_code::ErrorCode;
use crate::ui::report::FileError;

pub(crate) fn lost(e: impl std::fmt::Display) -> FileError {
    FileError::new(
        ErrorCode::Connection,
        format!("connection to relay lost: {e}"),
        true,
    )
}

/// No token for the relay: every file would fail the same way (`file::fatal`).
pub fn sign_in_failed(e: crate::sign_in::SignInError) -> FileError {
    FileError::new(ErrorCode::SignIn, e.to_string(), false)
}

/// The source could not be opened or read: a link swapped in (`symlink`)
/// or a special file (`special_file`) says so; anything else is `source`.
pub(crate) fn unreadable(e: std::io::Error) -> FileError {
    match NotAFile::of(&e) {
        Some(NotAFile::Link) => FileError::new(ErrorCode::Symlink, e.to_string(), false),
        Some(NotAFile::Special) => FileError::new(ErrorCode::SpecialFile, e.to_string(), false),
        Some(NotAFile::Replaced) => FileError::new(ErrorCode::SourceChanged, e.to_string(), false),
        None if e.kind() == std::io::ErrorKind::PermissionDenied => FileError::new(
            ErrorCode::Source,
            "permission denied: cannot open it for reading (check its permissions)",
            false,
        ),
        None => FileError::new(ErrorCode::Source, format!("cannot read: {e}"), false),
    }
}

pub(crate) fn frame_err(what: &str, e: FrameError) -> FileError {
    match e {
        FrameError::Io(_) | FrameError::Closed | FrameError::Truncated => FileError::new(
            ErrorCode::Connection,
            format!("{what}: connection to relay lost ({e})"),
            true,
        ),
        _ => FileError::new(ErrorCode::Protocol, format!("{what}: {e}"), false),
    }
}

pub(crate) fn unexpected(wanted: &str, got: &Message) -> FileError {
    FileError::new(
        ErrorCode::Protocol,
        format!("expected {wanted}, got {}", got.name()),
        false,
    )
}

pub(crate) fn changed_or(e: std::io::Error) -> FileError {
    if NotAFile::of(&e).is_some() {
        unreadable(e)
    } else if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FileError::new(
            ErrorCode::SourceChanged,
            format!("{e}; nothing committed"),
            false,
        )
    } else {
        FileError::new(
            ErrorCode::Source,
            format!("read failed: {e}; nothing committed"),
            false,
        )
    }
}
