//! The `code` of a file's failure in the report: one word a script can match
//! on. The relay's own refusals keep the relay's word (`Code::label`); the
//! client's failures have words of their own.

use relay_proto::protocol::Code;
use serde::{Serialize, Serializer};

/// Why a file failed, for scripts (the report's `code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    // The relay's codes (`relay_proto::protocol::Code`), also used by the
    // client for the same failure.
    Unauthorized,
    Forbidden,
    InvalidName,
    InvalidOffer,
    UnsupportedVersion,
    TooLarge,
    Exists,
    Busy,
    HashMismatch,
    Truncated,
    Conflict,
    Storage,
    StorageRefused,
    BadEncoding,
    NotFound,
    Changed,
    Internal,
    // The client's own.
    /// The connection to the relay was lost or could not be made.
    Connection,
    /// The relay stayed unreachable for longer than `--patience`.
    Unreachable,
    /// The local file cannot be read, or is not one to upload.
    Source,
    /// The local file changed while it was being sent.
    SourceChanged,
    /// The peer said something out of order.
    Protocol,
    /// A compressed section could not be inflated.
    Compress,
    /// Signing in for a token failed.
    SignIn,
    /// The bytes failed their check.
    Verify,
    /// `--checksums` does not list the file.
    NotInManifest,
    /// Two sources map to one blob (upload) or one local file (download).
    DuplicateDestination,
    Duplicate,
    /// Another writer holds the partial file.
    InUse,
    // The local folder of a download (`download::safe_fs`).
    Symlink,
    InTheWay,
    SpecialFile,
    Permission,
    DiskFull,
    LocalIo,
}

/// Every code, for the check that each word reads back as its code.
pub const ALL: [ErrorCode; 35] = {
    use ErrorCode::*;
    [
        Unauthorized,
        Forbidden,
        InvalidName,
        InvalidOffer,
        UnsupportedVersion,
        TooLarge,
        Exists,
        Busy,
        HashMismatch,
        Truncated,
        Conflict,
        Storage,
        StorageRefused,
        BadEncoding,
        NotFound,
        Changed,
        Internal,
        Connection,
        Unreachable,
        Source,
        SourceChanged,
        Protocol,
        Compress,
        SignIn,
        Verify,
        NotInManifest,
        DuplicateDestination,
        Duplicate,
        InUse,
        Symlink,
        InTheWay,
        SpecialFile,
        Permission,
        DiskFull,
        LocalIo,
    ]
};

impl ErrorCode {
    /// The word in the report (and in `--json`).
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            Unauthorized => Code::Unauthorized.label(),
            Forbidden => Code::Forbidden.label(),
            InvalidName => Code::InvalidName.label(),
            InvalidOffer => Code::InvalidOffer.label(),
            UnsupportedVersion => Code::UnsupportedVersion.label(),
            TooLarge => Code::TooLarge.label(),
            Exists => Code::Exists.label(),
            Busy => Code::Busy.label(),
            HashMismatch => Code::HashMismatch.label(),
            Truncated => Code::Truncated.label(),
            Conflict => Code::Conflict.label(),
            Storage => Code::Storage.label(),
            StorageRefused => Code::StorageRefused.label(),
            BadEncoding => Code::BadEncoding.label(),
            NotFound => Code::NotFound.label(),
            Changed => Code::Changed.label(),
            Internal => Code::Internal.label(),
            Connection => "connection",
            Unreachable => "unreachable",
            Source => "source",
            SourceChanged => "source_changed",
            Protocol => "protocol",
            Compress => "compress",
            SignIn => "sign_in",
            Verify => "verify",
            NotInManifest => "not_in_manifest",
            DuplicateDestination => "duplicate_destination",
            Duplicate => "duplicate",
            InUse => "in_use",
            Symlink => "symlink",
            InTheWay => "in_the_way",
            SpecialFile => "special_file",
            Permission => "permission",
            DiskFull => "disk_full",
            LocalIo => "local_io",
        }
    }

    /// The code of a word (`as_str`), for the pure download session's
    /// decisions, which name their codes by word.
    pub fn from_label(label: &str) -> Option<Self> {
        ALL.into_iter().find(|c| c.as_str() == label)
    }
}

impl From<Code> for ErrorCode {
    fn from(code: Code) -> Self {
        use ErrorCode::*;
        match code {
            Code::Unauthorized => Unauthorized,
            Code::Forbidden => Forbidden,
            Code::InvalidName => InvalidName,
            Code::InvalidOffer => InvalidOffer,
            Code::UnsupportedVersion => UnsupportedVersion,
            Code::TooLarge => TooLarge,
            Code::Exists => Exists,
            Code::Busy => Busy,
            Code::HashMismatch => HashMismatch,
            Code::Truncated => Truncated,
            Code::Conflict => Conflict,
            Code::Storage => Storage,
            Code::StorageRefused => StorageRefused,
            Code::BadEncoding => BadEncoding,
            Code::NotFound => NotFound,
            Code::Changed => Changed,
            Code::Internal => Internal,
        }
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
        for code in ALL {
            assert_eq!(ErrorCode::from_label(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::from_label("no_such_code"), None);
    }

    #[test]
    fn a_relay_code_keeps_the_relay_s_word() {
        for code in [
            Code::Exists,
            Code::StorageRefused,
            Code::Internal,
            Code::Busy,
        ] {
            assert_eq!(ErrorCode::from(code).as_str(), code.label());
        }
        let json = serde_json::to_string(&ErrorCode::SourceChanged).unwrap_or_default();
        assert_eq!(json, "\"source_changed\"");
    }
}
