//! The `code` of a file's failure in the report: one word a script can match
//! on. The relay's own refusals keep the relay's word (`Code::label`); the
//! client's failures have words of their own.

use relay_proto::protocol::Code;
use serde::{Serialize, Serializer};

/// The enum, every code (`ALL`) and each one's word, from one list.
macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident => $label:literal,)*) => {
        /// Why a file failed, for scripts (the report's `code`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $name,)*
        }

        /// Every code, for the check that each word reads back as its code.
        pub const ALL: &[ErrorCode] = &[$(ErrorCode::$name,)*];

        impl ErrorCode {
            /// The word in the report (and in `--json`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $label,)*
                }
            }
        }
    };
}

codes! {
    // The relay's codes (`relay_proto::protocol::Code`), also used by the
    // client for the same failure.
    Unauthorized => "unauthorized",
    Forbidden => "forbidden",
    InvalidName => "invalid_name",
    InvalidOffer => "invalid_offer",
    UnsupportedVersion => "unsupported_version",
    TooLarge => "too_large",
    Exists => "exists",
    Busy => "busy",
    HashMismatch => "hash_mismatch",
    Truncated => "truncated",
    Conflict => "conflict",
    Storage => "storage",
    StorageRefused => "storage_refused",
    BadEncoding => "bad_encoding",
    NotFound => "not_found",
    Changed => "changed",
    Internal => "internal",
    // The client's own.
    /// The connection to the relay was lost or could not be made.
    Connection => "connection",
    /// The relay stayed unreachable for longer than `--patience`.
    Unreachable => "unreachable",
    /// The local file cannot be read, or is not one to upload.
    Source => "source",
    /// The local file changed while it was being sent.
    SourceChanged => "source_changed",
    /// The peer said something out of order.
    Protocol => "protocol",
    /// A compressed section could not be inflated.
    Compress => "compress",
    /// Signing in for a token failed.
    SignIn => "sign_in",
    /// The bytes failed their check.
    Verify => "verify",
    /// `--checksums` does not list the file.
    NotInManifest => "not_in_manifest",
    /// Two files of an upload map to one blob name.
    DuplicateDestination => "duplicate_destination",
    /// Two sources of a download map to one local file.
    Duplicate => "duplicate",
    /// Another writer holds the partial file.
    InUse => "in_use",
    // The local folder of a download (`download::safe_fs`).
    Symlink => "symlink",
    InTheWay => "in_the_way",
    SpecialFile => "special_file",
    Permission => "permission",
    DiskFull => "disk_full",
    LocalIo => "local_io",
    // `sync`.
    /// A local file changed since this machine placed it, and the blob is
    /// not put over it (without `--overwrite`).
    SyncConflict => "sync_conflict",
    /// Part of one side of a sync could not be read (a folder, a name, the
    /// listing): nothing is deleted.
    Incomplete => "incomplete",
}

impl ErrorCode {
    /// The code of a word (`as_str`), for the pure download session's
    /// decisions, which name their codes by word.
    pub fn from_label(label: &str) -> Option<Self> {
        ALL.iter().copied().find(|c| c.as_str() == label)
    }
}

/// A relay's code is the client's code of the same word; a code newer than
/// this client is an internal error here.
impl From<Code> for ErrorCode {
    fn from(code: Code) -> Self {
        ErrorCode::from_label(code.label()).unwrap_or(ErrorCode::Internal)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_word_reads_back_as_its_code() {
        for &code in ALL {
            assert_eq!(ErrorCode::from_label(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::from_label("no_such_code"), None);
    }

    #[test]
    fn a_relay_code_keeps_the_relay_s_word() {
        // Every word of the relay's codes is a code here, read back as it.
        let mut relay = 0;
        for &code in ALL {
            let word = serde_json::Value::from(code.as_str());
            if let Ok(theirs) = serde_json::from_value::<Code>(word) {
                assert_eq!(theirs.label(), code.as_str());
                assert_eq!(ErrorCode::from(theirs), code, "{theirs:?}");
                relay += 1;
            }
        }
        assert_eq!(relay, 17);
        let json = serde_json::to_string(&ErrorCode::SourceChanged).unwrap_or_default();
        assert_eq!(json, "\"source_changed\"");
    }
}
