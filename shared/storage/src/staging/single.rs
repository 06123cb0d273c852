//! The one-block case: a file of at most one block is not staged; its bytes
//! stay under their memory permit until one Put Blob publishes them, after
//! verification.

use bytes::Bytes;

use super::budget::BlockPermit;

/// The bytes of a one-block file and the memory they hold.
pub struct SingleBlob {
    pub data: Bytes,
    _permit: Option<BlockPermit>,
}

impl SingleBlob {
    pub(super) fn held(data: Bytes, permit: BlockPermit) -> Self {
        Self {
            data,
            _permit: Some(permit),
        }
    }

    /// An empty file: an empty Put Blob, holding no memory.
    pub(super) fn empty() -> Self {
        Self {
            data: Bytes::new(),
            _permit: None,
        }
    }
}

impl std::fmt::Debug for SingleBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SingleBlob({} bytes)", self.data.len())
    }
}
