//! What each side of a sync says about a name, and what the index
//! remembers about it.
//!
//! Names are the blob's name below the sync's prefix, `/`-separated, after
//! the client's name mapping: the local walk and the listing (its prefix
//! stripped) use the same form, so one order and one comparison serve both.

/// What identifies a file beyond its size and time, where the platform has
/// it: any rename over the file, copy onto it or write to it changes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub ino: u64,
    pub dev: u64,
    pub ctime_ns: i64,
}

/// A local file's `stat`, as the walk saw it or the index recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub size: u64,
    pub mtime_ns: i64,
    pub identity: Option<Identity>,
}

impl FileStat {
    /// Whether `self` is still the file `recorded` describes. Where only one
    /// of the two has an identity (the index was written on another kind of
    /// file system) nothing vouches for it: not the same.
    pub fn same_file_as(&self, recorded: &FileStat) -> bool {
        self.size == recorded.size
            && self.mtime_ns == recorded.mtime_ns
            && self.identity == recorded.identity
    }
}

/// One regular file of the local walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEntry {
    pub name: String,
    pub stat: FileStat,
}

/// One blob of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEntry {
    pub name: String,
    pub size: u64,
    /// Seconds since the epoch, if storage said.
    pub last_modified: Option<u64>,
    /// In the headers' form (quoted), as a delete's `If-Match` carries it.
    pub etag: String,
    /// The content's SHA-256 (hex) when the relay's seal vouches for it.
    pub vouched_sha256: Option<String>,
}

/// What this machine recorded after it last moved a name, in either
/// direction: the blob version and the local file as they were then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRecord {
    pub etag: String,
    /// SHA-256 (hex) of the bytes moved, computed by this client.
    pub sha256: String,
    /// The local file right after the transfer (after placing it, on a
    /// download; as read, on an upload).
    pub stat: FileStat,
}

/// Anything a merge pairs by name.
pub trait Named {
    fn name(&self) -> &str;
}

impl Named for LocalEntry {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for RemoteEntry {
    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(size: u64, mtime_ns: i64, identity: Option<Identity>) -> FileStat {
        FileStat {
            size,
            mtime_ns,
            identity,
        }
    }

    #[test]
    fn a_file_is_the_same_only_if_everything_recorded_matches() {
        let id = Identity {
            ino: 7,
            dev: 1,
            ctime_ns: 5,
        };
        let recorded = stat(10, 100, Some(id));
        assert!(stat(10, 100, Some(id)).same_file_as(&recorded));
        assert!(!stat(11, 100, Some(id)).same_file_as(&recorded));
        assert!(!stat(10, 101, Some(id)).same_file_as(&recorded));
        for other in [
            Identity { ino: 8, ..id },
            Identity { dev: 2, ..id },
            Identity { ctime_ns: 6, ..id },
        ] {
            assert!(!stat(10, 100, Some(other)).same_file_as(&recorded));
        }
        assert!(!stat(10, 100, None).same_file_as(&recorded));
        assert!(!recorded.same_file_as(&stat(10, 100, None)));
        assert!(stat(10, 100, None).same_file_as(&stat(10, 100, None)));
    }
}
